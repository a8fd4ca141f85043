// Package dataproto is the framing of the GovFS data path: chunk bytes move
// between clients and chunk servers (and along replica chains) as frames
// on persistent TCP connections, while control traffic stays on gRPC.
// (The metadata benchmarks measured ~20 µs of CPU per side for a small
// gRPC call on the reference machine; a data request should cost a header
// parse and a CRC.)
//
// # Frame format (version 1), all integers big-endian
//
//	off size field
//	  0    4 magic        "GVFD" (0x47564644)
//	  4    1 version      1
//	  5    1 type         Type
//	  6    2 flags        reserved, must be 0
//	  8    8 request id   chosen by the requester, echoed in the reply
//	 16    8 handle       chunk handle
//	 24    8 group        replica group holding the chunk (0 = none yet)
//	 32    8 epoch        replica-group epoch the requester believes in
//	 40    8 version      chunk version (expected or assigned)
//	 48    8 offset       byte offset in the chunk (signed, must be >= 0)
//	 56    4 length       payload bytes that follow the header
//	 60    4 status       0 = OK, else a Status code (replies only)
//	 64    4 payload CRC  CRC32C (Castagnoli) of the payload
//	 68    4 header CRC   CRC32C of bytes 0..67
//	 72    -  payload
//
// A reader rejects, with an error saying which check failed and before
// allocating anything for the payload: a wrong magic or version, a bad
// header CRC, non-zero flags, an unknown type, a negative offset, and a
// length above the configured maximum. A payload whose CRC does not match
// is read fully (the stream stays in sync) and then rejected. A peer that
// sends a bad frame is not trusted further: callers close the connection.
package dataproto
