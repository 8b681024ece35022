package grpctest

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Refusing is a raw HTTP/2 server that refuses the first stream of each
// case (its CaseKey metadata; "" for a call without) with RST_STREAM
// REFUSED_STREAM, as a server at its stream limit does, and answers every
// later one, once the client's side ended, with one message ("ok") and OK.
// It keeps the DATA bytes of each stream it answered and counts the streams
// of each case.
type Refusing struct {
	Addr    string
	mu      sync.Mutex
	streams map[string]int
	data    map[string][]byte // the bytes of the case's last answered stream
}

// CaseKey is the metadata that names a call's case to Refusing.
const CaseKey = "x-case"

// NewRefusing starts a Refusing server on 127.0.0.1 until the test ends.
func NewRefusing(t testing.TB) *Refusing {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := &Refusing{Addr: ln.Addr().String(), streams: map[string]int{}, data: map[string][]byte{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serveConn(c)
		}
	}()
	return u
}

func (u *Refusing) serveConn(c net.Conn) {
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil { // what a client sends first
		return
	}
	fr := http2.NewFramer(c, c)
	dec := hpack.NewDecoder(4096, nil)
	cases := map[uint32]string{}  // the case of each stream answered
	bodies := map[uint32][]byte{} // what each has sent
	_ = fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.HeadersFrame:
			id, refuse := u.open(dec, f)
			if refuse {
				_ = fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
				continue
			}
			cases[f.StreamID] = id
			if f.StreamEnded() {
				u.answer(fr, f.StreamID, id, nil)
			}
		case *http2.DataFrame:
			if n := uint32(len(f.Data())); n > 0 {
				_ = fr.WriteWindowUpdate(0, n)
				if _, ok := cases[f.StreamID]; ok {
					_ = fr.WriteWindowUpdate(f.StreamID, n)
				}
			}
			id, ok := cases[f.StreamID]
			if !ok {
				continue // a refused stream's
			}
			bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
			if f.StreamEnded() {
				u.answer(fr, f.StreamID, id, bodies[f.StreamID])
			}
		}
	}
}

// open counts a new stream of its case and returns the case; refuse for
// the case's first stream.
func (u *Refusing) open(dec *hpack.Decoder, f *http2.HeadersFrame) (id string, refuse bool) {
	fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
	for _, hf := range fields {
		if hf.Name == CaseKey {
			id = hf.Value
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.streams[id]++
	return id, u.streams[id] == 1
}

// answer records body as the case's and answers the stream with "ok", OK.
func (u *Refusing) answer(fr *http2.Framer, stream uint32, id string, body []byte) {
	u.mu.Lock()
	u.data[id] = body
	u.mu.Unlock()
	block := func(kv ...string) []byte {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for i := 0; i < len(kv); i += 2 {
			_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return buf.Bytes()
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, EndHeaders: true,
		BlockFragment: block(":status", "200", "content-type", "application/grpc")})
	_ = fr.WriteData(stream, false, Frame([]byte("ok")))
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, EndHeaders: true, EndStream: true,
		BlockFragment: block("grpc-status", "0")})
}

// Streams is how many streams of case key the server saw.
func (u *Refusing) Streams(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.streams[key]
}

// Data is the DATA bytes of the last stream of case key the server
// answered.
func (u *Refusing) Data(key string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.data[key]
}
