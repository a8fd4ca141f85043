package chunkserver

import (
	"sync"
	"time"

	"github.com/govfs/govfs/internal/dataproto"
)

// loadMeter counts the bytes a server is serving now and has served
// since the last heartbeat, for the president (admin status) and replica
// selection.
type loadMeter struct {
	mu       sync.Mutex
	inFlight int64
	read     int64
	written  int64
	since    time.Time
}

// requestBytes is the payload a request moves: what it carries, or for a
// read what it asks for.
func requestBytes(f *dataproto.Frame) int64 {
	if f.Type == dataproto.TypeRead && len(f.Payload) == 4 {
		return int64(uint32(f.Payload[0])<<24 | uint32(f.Payload[1])<<16 | uint32(f.Payload[2])<<8 | uint32(f.Payload[3]))
	}
	return int64(len(f.Payload))
}

func (l *loadMeter) begin(f *dataproto.Frame) {
	l.mu.Lock()
	l.inFlight += requestBytes(f)
	l.mu.Unlock()
}

func (l *loadMeter) end(f *dataproto.Frame, reply *dataproto.Frame) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight -= requestBytes(f)
	if reply.Status != dataproto.StatusOK {
		return
	}
	switch f.Type {
	case dataproto.TypeRead:
		l.read += int64(len(reply.Payload))
	case dataproto.TypeWrite, dataproto.TypeAppend, dataproto.TypeReplicate, dataproto.TypeInstall:
		l.written += int64(len(f.Payload))
	}
}

// sample returns the bytes in flight and the read and write rates since
// the previous sample.
func (l *loadMeter) sample() (inFlight, readRate, writeRate int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.since.IsZero() {
		if secs := now.Sub(l.since).Seconds(); secs > 0 {
			readRate, writeRate = int64(float64(l.read)/secs), int64(float64(l.written)/secs)
		}
	}
	l.read, l.written, l.since = 0, 0, now
	return l.inFlight, readRate, writeRate
}
