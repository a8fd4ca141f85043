package dataproto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand"
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	var stream bytes.Buffer
	var sent []*Frame
	for i := 0; i < 200; i++ {
		p := make([]byte, rnd.Intn(100000))
		rnd.Read(p)
		f := &Frame{Type: Type(1 + rnd.Intn(int(typeEnd)-1)), RequestID: rnd.Uint64(), Handle: rnd.Uint64(), Group: rnd.Uint64(),
			Version: rnd.Uint64(), Epoch: rnd.Uint64(), Offset: rnd.Int63(), Status: Status(rnd.Intn(10)), Payload: p}
		if rnd.Intn(2) == 0 {
			f.Token = make([]byte, TokenSize)
			rnd.Read(f.Token)
		}
		if err := WriteFrame(&stream, f); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, f)
	}
	r := NewReader(bufio.NewReader(&stream), 0)
	for i, want := range sent {
		got, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestTokenSize(t *testing.T) {
	if _, err := AppendFrame(nil, &Frame{Type: TypeRead, Token: []byte("short")}); err == nil {
		t.Fatal("a 5-byte token was encoded")
	}
	// A stream cut inside the token is an unexpected end, not a frame.
	b := encode(t, &Frame{Type: TypeRead, Token: make([]byte, TokenSize), Payload: []byte{0, 0, 0, 1}})
	if _, err := NewReader(bytes.NewReader(b[:HeaderSize+10]), 0).Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut token: %v", err)
	}
}

func encode(t *testing.T, f *Frame) []byte {
	b, err := AppendFrame(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRejectsBadFrames(t *testing.T) {
	good := encode(t, &Frame{Type: TypeWrite, RequestID: 7, Handle: 9, Offset: 4096, Payload: []byte("hello chunk")})
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x01
		return b
	}
	cases := []struct {
		name string
		in   []byte
		max  uint32
		want error
	}{
		{"magic", flip(0), 0, ErrBadMagic},
		{"version", flip(4), 0, ErrBadVersion},
		{"header byte", flip(20), 0, ErrBadHeader},
		{"header crc", flip(69), 0, ErrBadHeader},
		{"payload byte", flip(HeaderSize + 3), 0, ErrBadPayload},
		{"too large", good, 5, ErrTooLarge},
		{"truncated payload", good[:len(good)-2], 0, io.ErrUnexpectedEOF},
		{"truncated header", good[:10], 0, io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		_, err := NewReader(bytes.NewReader(tc.in), tc.max).Next()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := AppendFrame(nil, &Frame{Type: 99}); err == nil {
		t.Error("unknown type encoded")
	}
	if _, err := AppendFrame(nil, &Frame{Type: TypeRead, Offset: -1}); err == nil {
		t.Error("negative offset encoded")
	}
	// A header that claims a huge payload is refused before allocating it.
	b := bytes.Clone(good[:HeaderSize])
	b[56], b[57], b[58], b[59] = 0xff, 0xff, 0xff, 0xff
	if _, _, _, err := ParseHeader(b, DefaultMaxPayload); !errors.Is(err, ErrBadHeader) && !errors.Is(err, ErrTooLarge) {
		t.Errorf("huge length: %v", err)
	}
}

// FuzzReader: any byte string decodes to frames or a clean error, never a
// panic or an allocation beyond the limit.
func FuzzReader(f *testing.F) {
	good, _ := AppendFrame(nil, &Frame{Type: TypeAppend, RequestID: 1, Payload: []byte("x")})
	f.Add(good)
	f.Add([]byte("GVFD"))
	f.Add(bytes.Repeat([]byte{0xff}, 80))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in), 1<<16)
		for i := 0; i < 4; i++ {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if len(fr.Payload) > 1<<16 {
				t.Fatalf("payload of %d bytes past the limit", len(fr.Payload))
			}
			again, err := AppendFrame(nil, fr)
			if err != nil {
				t.Fatalf("decoded frame does not re-encode: %v", err)
			}
			if _, err := NewReader(bytes.NewReader(again), 1<<16).Next(); err != nil {
				t.Fatalf("re-encoded frame does not decode: %v", err)
			}
		}
	})
}

func BenchmarkWriteRead1MiB(b *testing.B) {
	p := make([]byte, 1<<20)
	var buf bytes.Buffer
	b.SetBytes(int64(len(p)))
	for i := 0; i < b.N; i++ {
		buf.Reset()
		_ = WriteFrame(&buf, &Frame{Type: TypeWrite, Payload: p})
		if _, err := NewReader(&buf, 0).Next(); err != nil {
			b.Fatal(err)
		}
	}
}

// The payload CRC computed once is reused only for the same payload.
func TestPayloadCRCReuse(t *testing.T) {
	f := &Frame{Type: TypeWrite, Payload: []byte("hello")}
	f.SealPayload()
	var a bytes.Buffer
	if err := WriteFrame(&a, f); err != nil {
		t.Fatal(err)
	}
	g := *f
	g.Payload = []byte("other")
	var b bytes.Buffer
	if err := WriteFrame(&b, &g); err != nil {
		t.Fatal(err)
	}
	for _, buf := range []*bytes.Buffer{&a, &b} {
		if _, err := NewReader(buf, 0).Next(); err != nil {
			t.Fatalf("a frame with a changed payload carries a stale CRC: %v", err)
		}
	}
}
