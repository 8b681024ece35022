package h1server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkServe measures a request served on the fast path over loopback:
// on a keep-alive connection (the common case behind an HTTP client's pool)
// and on a connection of its own (where the per-connection costs show).
func BenchmarkServe(b *testing.B) {
	for _, c := range []struct {
		name    string
		perConn bool
	}{{"keep-alive", false}, {"a connection per request", true}} {
		b.Run(c.name, func(b *testing.B) {
			addr := benchServer(b)
			b.ReportAllocs()
			var conn net.Conn
			var br *bufio.Reader
			for b.Loop() {
				if conn == nil {
					var err error
					if conn, err = net.Dial("tcp", addr); err != nil {
						b.Fatal(err)
					}
					br = bufio.NewReader(conn)
				}
				if _, err := io.WriteString(conn, getReq); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				if c.perConn {
					conn.Close()
					conn = nil
				}
			}
			if conn != nil {
				conn.Close()
			}
		})
	}
}

func benchServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		io.WriteString(w, "ok")
	})
	s := &Server{Handler: h, Fallback: &http.Server{Handler: h}, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute}
	go s.Serve(ln)
	b.Cleanup(func() { s.Close() })
	return ln.Addr().String()
}
