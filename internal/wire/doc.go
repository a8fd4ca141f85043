// Package wire holds the generated protobuf messages and gRPC services of
// GovFS (see govfs.proto, regenerated with `make proto`). No logic lives
// here.
package wire
