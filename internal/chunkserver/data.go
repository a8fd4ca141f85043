package chunkserver

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/govfs/govfs/internal/chunkstore"
	"github.com/govfs/govfs/internal/dataproto"
)

// maxReadLength bounds one read request.
const maxReadLength = 8 << 20

func (s *Server) serve() {
	for {
		c, err := s.lis.Accept()
		if err != nil {
			select {
			case <-s.stop:
				return
			default:
			}
			s.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// serveConn answers frames in order until the peer closes the connection
// or sends a bad frame (which ends the connection: the stream can no
// longer be trusted).
func (s *Server) serveConn(c net.Conn) {
	r := dataproto.NewReader(bufio.NewReader(c), dataproto.DefaultMaxPayload)
	w := bufio.NewWriter(c)
	for {
		f, err := r.Next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				s.log.Debug("data connection ended", "peer", c.RemoteAddr().String(), "err", err)
			}
			return
		}
		reply := s.handle(f)
		if err := dataproto.WriteFrame(w, reply); err != nil {
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
	}
}

func (s *Server) handle(f *dataproto.Frame) *dataproto.Frame {
	reply := &dataproto.Frame{RequestID: f.RequestID, Handle: f.Handle, Offset: f.Offset}
	if f.Epoch != 0 {
		// Replica groups are not assigned yet, so no epoch can be current.
		reply.Type, reply.Status = replyType(f.Type), dataproto.StatusStaleEpoch
		reply.Payload = []byte("replica-group epochs are not supported by this server yet")
		return reply
	}
	h := chunkstore.Handle(f.Handle)
	switch f.Type {
	case dataproto.TypeWrite:
		reply.Type = dataproto.TypeWriteReply
		reply.Status, reply.Payload = status(s.store.Write(h, f.Offset, f.Payload, f.Version))
		reply.Version = f.Version
	case dataproto.TypeAppend:
		reply.Type = dataproto.TypeAppendReply
		off, err := s.store.Append(h, f.Payload, f.Version)
		reply.Status, reply.Payload = status(err)
		reply.Offset, reply.Version = off, f.Version
	case dataproto.TypeRead:
		reply.Type = dataproto.TypeReadReply
		if len(f.Payload) != 4 {
			reply.Status, reply.Payload = dataproto.StatusInvalid, []byte("read: payload must be the 4-byte length wanted")
			return reply
		}
		n := binary.BigEndian.Uint32(f.Payload)
		if n > maxReadLength {
			reply.Status, reply.Payload = dataproto.StatusInvalid, []byte("read: more than 8 MiB asked at once")
			return reply
		}
		data, err := s.store.Read(h, f.Offset, int(n))
		if err != nil {
			reply.Status, reply.Payload = status(err)
			return reply
		}
		info, err := s.store.Stat(h)
		if err != nil {
			reply.Status, reply.Payload = status(err)
			return reply
		}
		reply.Version, reply.Payload = info.Version, data
	default:
		reply.Type, reply.Status = replyType(f.Type), dataproto.StatusInvalid
		reply.Payload = []byte("unexpected frame type " + f.Type.String())
	}
	return reply
}

func replyType(t dataproto.Type) dataproto.Type {
	switch t {
	case dataproto.TypeWrite:
		return dataproto.TypeWriteReply
	case dataproto.TypeAppend:
		return dataproto.TypeAppendReply
	default:
		return dataproto.TypeReadReply
	}
}

// status maps a store error to a reply status and a message payload.
func status(err error) (dataproto.Status, []byte) {
	var ce *chunkstore.CorruptError
	switch {
	case err == nil:
		return dataproto.StatusOK, nil
	case errors.As(err, &ce):
		return dataproto.StatusCorrupt, []byte(err.Error())
	case errors.Is(err, chunkstore.ErrStaleVersion):
		return dataproto.StatusStaleVersion, []byte(err.Error())
	case errors.Is(err, chunkstore.ErrNotFound):
		return dataproto.StatusNotFound, []byte(err.Error())
	case errors.Is(err, chunkstore.ErrChunkFull):
		return dataproto.StatusChunkFull, []byte(err.Error())
	case errors.Is(err, syscall.ENOSPC):
		return dataproto.StatusNoSpace, []byte(err.Error())
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EFBIG):
		return dataproto.StatusInvalid, []byte(err.Error())
	default:
		return dataproto.StatusInternal, []byte(err.Error())
	}
}
