package h1client_test

// The differential test: scripted upstream byte streams, served by a raw TCP
// listener, are read through h1client.Transport and through net/http.Transport,
// and must give the same verdict (same status and body bytes, or both an error;
// an error reading the body counts as an error). Where net/http is lenient and
// h1client is stricter, the table says so and why. Over two requests on one
// keep-alive connection, the second request must never be given bytes that
// belong to the first exchange, and h1client never transmits a request twice on
// its own (a resend is the retry policy's decision, not the client's).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/sidecar/h1client"
)

// script is one scripted exchange. The server answers the first request on its
// first connection with first (and later, 30ms after); a second request on that
// connection gets "reused:<path>" (or is dropped), a request on any other
// connection gets "fresh:<path>".
type script struct {
	name   string
	method string // of the first request; GET if empty
	first  string
	later  string
	// closeAfter: the server closes the first connection once the script is written.
	closeAfter bool
	// linger: how long the server keeps the first connection open after the
	// script, before closing it (with closeAfter).
	linger time.Duration
	// dropSecond: a second request on the first connection is read, then the
	// connection is closed without an answer.
	dropSecond bool
	// noReuse: the first connection must not carry the second request (its
	// framing has no body but bytes followed, a framing error, Connection: close…):
	// the second request goes on a fresh connection and gets "fresh:/two".
	noReuse bool
	// wantSecond, if set, is the body the second request must get from both
	// clients (e.g. "fresh:/two": a closed idle connection never fails a request).
	wantSecond string
	// stricter, if set, allows h1client to fail the first exchange where
	// net/http accepts it, and says why.
	stricter string
}

func resp(status, headers, body string) string {
	return "HTTP/1.1 " + status + "\r\n" + headers + "\r\n" + body
}

func cl(body string) string { return "Content-Length: " + strconv.Itoa(len(body)) + "\r\n" }

var scripts = []script{
	{name: "200 with Content-Length", first: resp("200 OK", cl("hello"), "hello")},
	{name: "chunked", first: resp("200 OK", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n")},
	{name: "chunked with extensions and trailers",
		first: resp("200 OK", "Transfer-Encoding: chunked\r\nTrailer: X-Sum\r\n", "5;ext=1\r\nhello\r\n6;a=\"b\";c\r\n world\r\n0\r\nX-Sum: 42\r\n\r\n")},
	{name: "204 with a stray response in the same write",
		first: resp("204 No Content", "", "") + resp("200 OK", cl("stray"), "stray"), noReuse: true},
	{name: "204 with a stray response 30ms later",
		first: resp("204 No Content", "", ""), later: resp("200 OK", cl("stray"), "stray"), noReuse: true},
	{name: "HEAD answered with a body in the same write", method: "HEAD",
		first: resp("200 OK", cl("hello"), "hello"), noReuse: true},
	{name: "HEAD answered with a stray response 30ms later", method: "HEAD",
		first: resp("200 OK", "Content-Length: 37\r\n", ""), later: resp("200 OK", cl("stray"), "stray"), noReuse: true},
	{name: "304 followed by bytes", first: resp("304 Not Modified", "ETag: \"v1\"\r\n", ""), later: "hello", noReuse: true},
	{name: "100 Continue then 200", first: "HTTP/1.1 100 Continue\r\n\r\n" + resp("200 OK", cl("hello"), "hello")},
	{name: "103 Early Hints and 100 then 200",
		first: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + resp("200 OK", cl("hello"), "hello")},
	{name: "eight 1xx responses then 200", first: strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 8) + resp("200 OK", cl("hello"), "hello")},
	{name: "101 Switching Protocols never asked for", first: resp("101 Switching Protocols", "", ""), later: "upgraded-bytes", noReuse: true,
		stricter: "Upgrade requests go to the fallback, so a 101 here was never asked for and cannot be relayed"},
	{name: "bad status line", first: "HTTP/1.1 OK\r\n\r\n", closeAfter: true, noReuse: true},
	{name: "status 042", first: resp("042 Odd", cl("ok"), "ok"),
		stricter: "a status outside 100-999 cannot be relayed to the app"},
	{name: "status 1000", first: resp("1000 Big", cl("ok"), "ok"), closeAfter: true, noReuse: true},
	{name: "duplicate differing Content-Length", first: resp("200 OK", "Content-Length: 5\r\nContent-Length: 6\r\n", "hello!"), closeAfter: true, noReuse: true},
	{name: "duplicate equal Content-Length", first: resp("200 OK", "Content-Length: 5\r\nContent-Length: 5\r\n", "hello")},
	{name: "Content-Length and chunked Transfer-Encoding",
		first:    resp("200 OK", "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"),
		stricter: "a response with both Content-Length and Transfer-Encoding may be a smuggling attempt"},
	{name: "bare LF line endings", first: "HTTP/1.1 200 OK\nContent-Length: 5\n\nhello"},
	{name: "obs-fold header line", first: resp("200 OK", "X-Folded: a\r\n b\r\n"+cl("hello"), "hello")},
	{name: "2 MiB header", first: resp("200 OK", "X-Huge: "+strings.Repeat("x", 2<<20)+"\r\n"+cl("hello"), "hello"), closeAfter: true,
		stricter: "response heads are bounded to 1 MiB (net/http allows 10 MiB)"},
	{name: "EOF in the middle of a sized body", first: resp("200 OK", "Content-Length: 10\r\n", "hello"), closeAfter: true, noReuse: true},
	{name: "EOF in the middle of a chunk", first: resp("200 OK", "Transfer-Encoding: chunked\r\n", "a\r\nhello"), closeAfter: true, noReuse: true},
	{name: "EOF before the last chunk", first: resp("200 OK", "Transfer-Encoding: chunked\r\n", "5\r\nhello\r\n"), closeAfter: true, noReuse: true},
	{name: "Connection: close kept open by the server", first: resp("200 OK", "Connection: close\r\n"+cl("hello"), "hello"), noReuse: true},
	{name: "HTTP/1.0 without a length", first: "HTTP/1.0 200 OK\r\n\r\nhello", closeAfter: true, noReuse: true},
	{name: "HTTP/1.0 with a length and no keep-alive", first: "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", noReuse: true},
	{name: "HTTP/1.0 keep-alive with a length", first: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello"},
	{name: "two responses in one write", first: resp("200 OK", cl("hello"), "hello") + resp("200 OK", cl("stray"), "stray"), noReuse: true},
	{name: "server closes the idle connection between requests", first: resp("200 OK", cl("hello"), "hello"), closeAfter: true,
		noReuse: true, wantSecond: "fresh:/two"},
	{name: "server reads the second request and closes", first: resp("200 OK", cl("hello"), "hello"), dropSecond: true},
	{name: "Content-Length with a plus sign", first: resp("200 OK", "Content-Length: +5\r\n", "hello"), closeAfter: true, noReuse: true},
	{name: "negative Content-Length", first: resp("200 OK", "Content-Length: -5\r\n", "hello"), closeAfter: true, noReuse: true},
	{name: "Transfer-Encoding gzip then chunked", first: resp("200 OK", "Transfer-Encoding: gzip, chunked\r\n", "5\r\nhello\r\n0\r\n\r\n"), closeAfter: true, noReuse: true},
	{name: "header line without a colon", first: resp("200 OK", "no colon here\r\n"+cl("hello"), "hello"), closeAfter: true, noReuse: true},
	{name: "space before the colon", first: resp("200 OK", "Content-Length : 5\r\n", "hello"), closeAfter: true, noReuse: true},
	{name: "chunk size overflow", first: resp("200 OK", "Transfer-Encoding: chunked\r\n", "fffffffffffffffffff\r\nhello\r\n0\r\n\r\n"), closeAfter: true, noReuse: true},
	{name: "status line without a reason", first: "HTTP/1.1 200\r\n" + cl("hello") + "\r\nhello"},
	{name: "NUL in a header value", first: resp("200 OK", "X-Nul: a\x00b\r\n"+cl("hello"), "hello"), closeAfter: true, noReuse: true},
}

// verdict is what a client made of one exchange.
type verdict struct {
	err    string // "" when status and body were read whole
	status int
	body   string
}

func (v verdict) String() string {
	if v.err != "" {
		return "error (" + v.err + ")"
	}
	return fmt.Sprintf("%d %q", v.status, trim(v.body))
}

func (v verdict) same(w verdict) bool {
	return (v.err != "") == (w.err != "") && (v.err != "" || v.status == w.status && v.body == w.body)
}

func trim(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// scriptServer serves one script on a raw listener and records which
// connection every request arrived on.
type scriptServer struct {
	ln       net.Listener
	scripted chan struct{} // closed once the first response was written
	mu       sync.Mutex
	conns    int
	arrivals []arrival
	open     []net.Conn
	wg       sync.WaitGroup
}

func serveScript(tb testing.TB, sc script) *scriptServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &scriptServer{ln: ln, scripted: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			id := s.conns
			s.open = append(s.open, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				s.serveConn(c, id, sc)
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

type arrival struct {
	conn int
	path string
}

func (s *scriptServer) serveConn(c net.Conn, id int, sc script) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.mu.Lock()
		s.arrivals = append(s.arrivals, arrival{id, req.URL.Path})
		s.mu.Unlock()
		switch {
		case id == 1 && n == 1:
			_, _ = io.WriteString(c, sc.first)
			if sc.later != "" {
				time.Sleep(30 * time.Millisecond)
				_, _ = io.WriteString(c, sc.later)
			}
			if !sc.closeAfter {
				close(s.scripted)
				break
			}
			if sc.linger > 0 { // the second request may arrive while the server lingers
				close(s.scripted)
				time.Sleep(sc.linger)
				return
			}
			c.Close() // closed before the client is told to go on
			close(s.scripted)
			return
		case id == 1:
			if sc.dropSecond {
				return
			}
			body := "reused:" + req.URL.Path
			_, _ = io.WriteString(c, resp("200 OK", cl(body), body))
		default:
			body := "fresh:" + req.URL.Path
			_, _ = io.WriteString(c, resp("200 OK", cl(body), body))
		}
	}
}

func (s *scriptServer) url(path string) string { return "http://" + s.ln.Addr().String() + path }

func (s *scriptServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.arrivals {
		if a.path == path {
			n++
		}
	}
	return n
}

// exchange sends one request and reads the whole response.
func exchange(rt http.RoundTripper, method, url string, timeout time.Duration) verdict {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return verdict{err: err.Error()}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return verdict{err: "round trip: " + err.Error()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return verdict{err: "body: " + err.Error(), status: resp.StatusCode}
	}
	return verdict{status: resp.StatusCode, body: string(b)}
}

// run plays a script through rt: the first request, then (once the script is
// fully written) a second GET /two, normally on the same keep-alive connection.
func run(s *scriptServer, sc script, rt http.RoundTripper, timeout time.Duration) (first, second verdict) {
	method := sc.method
	if method == "" {
		method = http.MethodGet
	}
	first = exchange(rt, method, s.url("/one"), timeout)
	select {
	case <-s.scripted:
	case <-time.After(timeout):
	}
	time.Sleep(30 * time.Millisecond) // the script's last bytes (or its close) have arrived
	second = exchange(rt, http.MethodGet, s.url("/two"), timeout)
	return first, second
}

// netHTTP is the reference client. Transparent gzip is off because the sidecar
// passes Accept-Encoding through untouched, as h1client does.
func netHTTP() *http.Transport { return &http.Transport{DisableCompression: true} }

func TestDifferential(t *testing.T) {
	t.Parallel()
	if len(scripts) < 25 {
		t.Fatalf("%d scripts, want at least 25", len(scripts))
	}
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ours := &h1client.Transport{}
			ref := netHTTP()
			defer ours.CloseIdleConnections()
			defer ref.CloseIdleConnections()
			oursServer, refServer := serveScript(t, sc), serveScript(t, sc)
			var (
				wg             sync.WaitGroup
				o1, o2, r1, r2 verdict
			)
			wg.Add(2)
			go func() { defer wg.Done(); o1, o2 = run(oursServer, sc, ours, 3*time.Second) }()
			go func() { defer wg.Done(); r1, r2 = run(refServer, sc, ref, 3*time.Second) }()
			wg.Wait()

			switch {
			case o1.same(r1):
			case sc.stricter != "" && o1.err != "" && r1.err == "":
				t.Logf("stricter than net/http (%s): h1client %v, net/http %v", sc.stricter, o1, r1)
			default:
				t.Errorf("first exchange: h1client %v, net/http %v; want the same verdict", o1, r1)
			}
			for _, c := range []struct {
				client string
				v      verdict
			}{{"h1client", o2}, {"net/http", r2}} {
				want := sc.wantSecond
				if sc.noReuse {
					want = "fresh:/two"
				}
				switch {
				case c.v.err == "" && (c.v.status != 200 || (c.v.body != "fresh:/two" && c.v.body != "reused:/two")):
					t.Errorf("%s: second request got %v: bytes of another exchange", c.client, c.v)
				case want != "" && (c.v.err != "" || c.v.body != want):
					t.Errorf("%s: second request got %v, want 200 %q (the first connection must not be reused, and a fresh one serves)", c.client, c.v, want)
				}
			}
			if n := oursServer.count("/two"); n > 1 {
				t.Errorf("h1client transmitted the second request %d times; it never resends on its own", n)
			}
		})
	}
}

// FuzzDifferential builds the first response from the input (mode bit 0: the
// request is a HEAD; bit 1: the server lingers 50ms before closing) and checks
// that h1client never gives a successful second response made of the first
// exchange's bytes, never accepts a head net/http rejects, and agrees with
// net/http whenever both accept.
func FuzzDifferential(f *testing.F) {
	for i, sc := range scripts {
		if len(sc.first)+len(sc.later) > 64<<10 {
			continue
		}
		mode := byte(i % 4 & 2)
		if sc.method == http.MethodHead {
			mode |= 1
		}
		f.Add(mode, []byte(sc.first+sc.later))
	}
	f.Fuzz(func(t *testing.T, mode byte, stream []byte) {
		if len(stream) > 64<<10 {
			return
		}
		sc := script{name: "fuzz", first: string(stream), closeAfter: true}
		if mode&1 != 0 {
			sc.method = http.MethodHead
		}
		if mode&2 != 0 {
			sc.linger = 50 * time.Millisecond
		}
		ours := &h1client.Transport{}
		ref := netHTTP()
		defer ours.CloseIdleConnections()
		defer ref.CloseIdleConnections()
		srv := serveScript(t, sc)
		o1, o2 := run(srv, sc, ours, time.Second)
		r1, _ := run(serveScript(t, sc), sc, ref, time.Second)
		if o1.err == "" && strings.HasPrefix(r1.err, "round trip: ") && !isTimeout(r1.err) {
			t.Fatalf("h1client accepted a head net/http rejects: h1client %v, net/http %v", o1, r1)
		}
		if o1.err == "" && r1.err == "" && !o1.same(r1) {
			t.Fatalf("both accepted, different verdicts: h1client %v, net/http %v", o1, r1)
		}
		if o2.err == "" && (o2.status != 200 || o2.body != "fresh:/two") {
			t.Fatalf("second request got %v: bytes of the first exchange (the first connection was closed)", o2)
		}
		if n := srv.count("/two"); n > 1 {
			t.Fatalf("h1client transmitted the second request %d times", n)
		}
	})
}

func isTimeout(s string) bool {
	return strings.Contains(s, context.DeadlineExceeded.Error()) || strings.Contains(s, "timeout")
}
