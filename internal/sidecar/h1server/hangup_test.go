package h1server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// servers runs h on the fast path and on net/http behind it (HandOffAll),
// and returns their addresses by name.
func servers(t *testing.T, h http.Handler, readHeader, idle time.Duration) map[string]string {
	t.Helper()
	addrs := map[string]string{}
	for name, all := range map[string]bool{"the fast path": false, "net/http": true} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{Handler: h, HandOffAll: all, ReadHeaderTimeout: readHeader, IdleTimeout: idle,
			Fallback: &http.Server{Handler: h, ReadHeaderTimeout: readHeader, IdleTimeout: idle}}
		go s.Serve(ln)
		t.Cleanup(func() { s.Close() })
		addrs[name] = ln.Addr().String()
	}
	return addrs
}

// The request's context ends when the app hangs up, whatever the handler is
// doing: waiting with the body unread, half of it still to come, or read.
func TestAnAppThatHangsUpCancelsTheRequestWhateverItsBody(t *testing.T) {
	cancelled := make(chan string, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/read" {
			io.ReadAll(r.Body)
		}
		select {
		case <-r.Context().Done():
			cancelled <- r.URL.Path
		case <-time.After(5 * time.Second):
			cancelled <- "not cancelled"
		}
	})
	cases := map[string]string{
		"a GET":                            "GET /get HTTP/1.1\r\nHost: a\r\n\r\n",
		"a POST whose body was read":       "POST /read HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
		"a POST whose body is unread":      "POST /unread HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi",
		"a POST with half its body":        "POST /half HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\nhi",
		"a chunked POST, body unread":      "POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n",
		"a POST that expects 100-continue": "POST /expect HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
	}
	for server, addr := range servers(t, h, time.Minute, time.Minute) {
		for name, req := range cases {
			t.Run(server+": "+name, func(t *testing.T) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				io.WriteString(c, req)
				time.Sleep(50 * time.Millisecond) // the handler waits: no signal to await
				start := time.Now()
				c.Close()
				path := strings.Fields(req)[1]
				if got := <-cancelled; got != path || time.Since(start) > time.Second {
					t.Fatalf("handler saw %q %v after the hang-up; want %s cancelled within 1s", got, time.Since(start), path)
				}
			})
		}
	}
}

// A request pipelined behind one whose app hung up never reaches the handler.
func TestARequestPipelinedBehindAnAbandonedOneIsDropped(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	first := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		if r.URL.Path == "/wait" {
			first <- struct{}{}
			<-r.Context().Done()
		}
	})
	for server, addr := range servers(t, h, time.Minute, time.Minute) {
		t.Run(server, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\nPOST /orders HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
			<-first
			c.Close()
			time.Sleep(200 * time.Millisecond) // a dropped request: nothing to await
			mu.Lock()
			defer mu.Unlock()
			if strings.Join(seen, ", ") != "GET /wait" {
				t.Fatalf("handler saw %q; want only GET /wait", seen)
			}
		})
	}
}

// With no request in flight, Shutdown closes every connection at once,
// whatever it holds; an idle one is also closed after the idle timeout.
func TestShutdownClosesConnectionsInEveryIdleStateAtOnce(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.ReadAll(r.Body) })
	states := map[string]string{
		"nothing sent":              "",
		"idle after a request":      "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"a head half sent":          "GET / HTTP/1.1\r\nHost: a\r\n",
		"a stray CRLF after a POST": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\r\n",
		"a stray CR after a POST":   "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\r",
	}
	for _, all := range []bool{false, true} {
		for name, in := range states {
			t.Run(map[bool]string{false: "the fast path", true: "net/http"}[all]+": "+name, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				s := &Server{Handler: h, HandOffAll: all, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute,
					Fallback: &http.Server{Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute}}
				go s.Serve(ln)
				defer s.Close()
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, in)
				time.Sleep(100 * time.Millisecond) // the server reads it: no signal to await
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				defer cancel()
				start := time.Now()
				if err := s.Shutdown(ctx); err != nil || time.Since(start) > time.Second {
					t.Fatalf("Shutdown returned %v after %v; want nil within 1s", err, time.Since(start))
				}
			})
		}
	}
}

func TestAStrayCRLFAfterAPOSTStillHasTheIdleTimeout(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.ReadAll(r.Body) })
	for server, addr := range servers(t, h, time.Minute, 200*time.Millisecond) {
		t.Run(server, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\r\n")
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			start := time.Now()
			io.ReadAll(c) // the response, then the close
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("the connection closed after %v, want after the 200ms idle timeout", took)
			}
		})
	}
}
