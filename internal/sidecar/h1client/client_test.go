package h1client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// server is an httptest server that counts the TCP connections it accepted.
type server struct {
	*httptest.Server
	conns atomic.Int32
	reqs  atomic.Int32
}

func newServer(t *testing.T, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.reqs.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func newTransport(t *testing.T) *Transport {
	tr := &Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func do(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	resp.Body.Close()
	return resp, string(b)
}

func newReq(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// opaque hides a body's type so http.NewRequest sets neither ContentLength nor GetBody.
type opaque struct{ io.Reader }

// exchangeCase is one exchange, sent n times in sequence on one transport:
// the response every request must get and the connections the server sees.
type exchangeCase struct {
	name      string
	handler   http.HandlerFunc
	method    string
	body      func() io.Reader
	header    http.Header
	n         int // requests in sequence
	wantBody  string
	wantCode  int
	wantConns int32
	check     func(t *testing.T, resp *http.Response)
}

// exchangeCases are the cases of TestExchanges, in the order they run. The
// handlers report what the server saw on t.
func exchangeCases(t *testing.T) []exchangeCase {
	return slices.Concat(connectionCases(t), bodyCases(t), bodilessResponseCases(), headerCases())
}

// connectionCases are the exchanges that keep a connection alive or close it, from either side.
func connectionCases(t *testing.T) []exchangeCase {
	return []exchangeCase{
		{name: "keep-alive reuse", method: "GET", n: 5, wantBody: "ok", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }},
		{name: "server Connection: close", method: "GET", n: 3, wantBody: "bye", wantCode: 200, wantConns: 3,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				io.WriteString(w, "bye")
			}},
		{name: "client Connection: close", method: "GET", n: 3, wantBody: "ok", wantCode: 200, wantConns: 3,
			header: http.Header{"Connection": {"close"}},
			handler: func(w http.ResponseWriter, r *http.Request) {
				if !r.Close {
					t.Error("server did not see Connection: close")
				}
				io.WriteString(w, "ok")
			}},
	}
}

// bodyCases are the exchanges that carry a body: chunked or sized, either way, with trailers.
func bodyCases(t *testing.T) []exchangeCase {
	big := strings.Repeat("x", 200<<10)
	return []exchangeCase{
		{name: "chunked response", method: "GET", n: 3, wantBody: "a" + big + "b", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "a")
				w.(http.Flusher).Flush()
				io.WriteString(w, big)
				io.WriteString(w, "b")
			},
			check: func(t *testing.T, resp *http.Response) {
				if resp.ContentLength != -1 || len(resp.TransferEncoding) == 0 {
					t.Errorf("not chunked: %d %v", resp.ContentLength, resp.TransferEncoding)
				}
			}},
		{name: "trailers", method: "GET", n: 2, wantBody: "body", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "X-Sum")
				io.WriteString(w, "body")
				w.Header().Set("X-Sum", "42")
			},
			check: func(t *testing.T, resp *http.Response) {
				if got := resp.Trailer.Get("X-Sum"); got != "42" {
					t.Errorf("trailer X-Sum = %q", got)
				}
			}},
		{name: "chunked request (unknown length)", method: "POST", n: 3, wantBody: "echo:hello, chunked", wantCode: 200, wantConns: 1,
			body: func() io.Reader { return opaque{strings.NewReader("hello, chunked")} },
			handler: func(w http.ResponseWriter, r *http.Request) {
				if len(r.TransferEncoding) == 0 || r.TransferEncoding[0] != "chunked" {
					t.Errorf("request not chunked: %v", r.TransferEncoding)
				}
				b, _ := io.ReadAll(r.Body)
				io.WriteString(w, "echo:"+string(b))
			}},
		{name: "sized request body", method: "PUT", n: 3, wantBody: "echo:12345", wantCode: 200, wantConns: 1,
			body: func() io.Reader { return strings.NewReader("12345") },
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.ContentLength != 5 {
					t.Errorf("ContentLength %d", r.ContentLength)
				}
				b, _ := io.ReadAll(r.Body)
				io.WriteString(w, "echo:"+string(b))
			}},
		{name: "empty POST sends Content-Length: 0", method: "POST", n: 2, wantBody: "0", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, r.Header.Get("Content-Length"))
			}},
	}
}

// bodilessResponseCases are the responses without a body (HEAD, 204, 304) and a 1xx before a response.
func bodilessResponseCases() []exchangeCase {
	return []exchangeCase{
		{name: "HEAD", method: "HEAD", n: 3, wantBody: "", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000")
			},
			check: func(t *testing.T, resp *http.Response) {
				if resp.ContentLength != 1000 {
					t.Errorf("ContentLength %d", resp.ContentLength)
				}
			}},
		{name: "204", method: "GET", n: 3, wantBody: "", wantCode: 204, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }},
		{name: "304", method: "GET", n: 3, wantBody: "", wantCode: 304, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) }},
		{name: "1xx before the response", method: "GET", n: 2, wantBody: "late", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Link", "</a.css>; rel=preload")
				w.WriteHeader(http.StatusEarlyHints)
				io.WriteString(w, "late")
			}},
	}
}

// headerCases are the exchanges whose request head must reach the server as sent.
func headerCases() []exchangeCase {
	return []exchangeCase{
		{name: "headers pass through", method: "GET", n: 2, wantBody: "v1,v2|agent|", wantCode: 200, wantConns: 1,
			header: http.Header{"X-Multi": {"v1", "v2"}, "User-Agent": {"agent"}},
			handler: func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s|%s|%s", strings.Join(r.Header.Values("X-Multi"), ","), r.UserAgent(), r.Header.Get("Accept-Encoding"))
			}},
		{name: "query string", method: "GET", n: 1, wantBody: "/p/a%20b?q=1&r=2", wantCode: 200, wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.RequestURI) }},
	}
}

func TestExchanges(t *testing.T) {
	for _, tc := range exchangeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, tc.handler)
			tr := newTransport(t)
			path := "/"
			if tc.name == "query string" {
				path = "/p/a%20b?q=1&r=2"
			}
			for i := 0; i < tc.n; i++ {
				var body io.Reader
				if tc.body != nil {
					body = tc.body()
				}
				req := newReq(t, tc.method, s.URL+path, body)
				for k, v := range tc.header {
					req.Header[k] = v
				}
				resp, got := do(t, tr, req)
				if resp.StatusCode != tc.wantCode || got != tc.wantBody {
					t.Fatalf("request %d: %d %q, want %d %q", i, resp.StatusCode, trunc(got), tc.wantCode, trunc(tc.wantBody))
				}
				if tc.check != nil {
					tc.check(t, resp)
				}
			}
			if got := s.conns.Load(); got != tc.wantConns {
				t.Errorf("server saw %d connections, want %d", got, tc.wantConns)
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func TestEarlyBodyClose(t *testing.T) {
	big := strings.Repeat("y", 1<<20)
	tests := []struct {
		name      string
		body      string
		wantConns int32
	}{
		{"small rest is drained and the connection reused", "0123456789abcdef", 1},
		{"large rest closes the connection", big, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, tc.body) })
			tr := newTransport(t)
			resp, err := tr.RoundTrip(newReq(t, "GET", s.URL, nil))
			if err != nil {
				t.Fatal(err)
			}
			var b [4]byte
			if _, err := io.ReadFull(resp.Body, b[:]); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if _, err := resp.Body.Read(b[:]); err == nil {
				t.Error("read after Close succeeded")
			}
			_, got := do(t, tr, newReq(t, "GET", s.URL, nil))
			if got != tc.body {
				t.Fatalf("second response %q", trunc(got))
			}
			if n := s.conns.Load(); n != tc.wantConns {
				t.Errorf("connections %d, want %d", n, tc.wantConns)
			}
		})
	}
}

func TestContextCancellation(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tests := []struct {
		name    string
		path    string
		cancel  func(cancel context.CancelFunc)
		deadln  time.Duration
		inBody  bool
		wantErr error
	}{
		{name: "cancel while waiting for headers", path: "/hang", wantErr: context.Canceled,
			cancel: func(c context.CancelFunc) { time.AfterFunc(50*time.Millisecond, c) }},
		{name: "deadline while waiting for headers", path: "/hang", deadln: 50 * time.Millisecond, wantErr: context.DeadlineExceeded},
		{name: "cancel while reading the body", path: "/stream", inBody: true, wantErr: context.Canceled,
			cancel: func(c context.CancelFunc) { time.AfterFunc(50*time.Millisecond, c) }},
		{name: "already canceled", path: "/hang", wantErr: context.Canceled, cancel: func(c context.CancelFunc) { c() }},
	}
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fast" {
			return
		}
		if r.URL.Path == "/stream" {
			io.WriteString(w, "head")
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	tr := newTransport(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tc.deadln > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.deadln)
			}
			defer cancel()
			if tc.cancel != nil {
				tc.cancel(cancel)
			}
			start := time.Now()
			req := newReq(t, "GET", s.URL+tc.path, nil).WithContext(ctx)
			resp, err := tr.RoundTrip(req)
			if tc.inBody {
				if err != nil {
					t.Fatal(err)
				}
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
	// The transport still works, and a poisoned connection was not pooled.
	if _, got := do(t, tr, newReq(t, "GET", s.URL+"/fast", nil)); got != "" {
		t.Fatalf("after cancellations: %q", got)
	}
}

func TestDialFailureIsAConnectError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tr := newTransport(t)
	body := &closeTracker{Reader: strings.NewReader("data")}
	req := newReq(t, "POST", "http://"+addr+"/", body)
	req.ContentLength = 4
	_, err = tr.RoundTrip(req)
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		t.Fatalf("err = %#v, want a *net.OpError with Op dial", err)
	}
	if !body.closed.Load() {
		t.Error("request body not closed")
	}
}

type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// A pooled connection the server has closed must not make the next request
// fail: it is detected (non-replayable requests) or the request is resent on a
// fresh connection (replayable ones), as net/http does.
func TestServerClosedIdleConnection(t *testing.T) {
	tests := []struct {
		name   string
		method string
		body   func() io.Reader
		opaque bool
	}{
		{name: "GET", method: "GET"},
		{name: "HEAD", method: "HEAD"},
		{name: "POST with GetBody", method: "POST", body: func() io.Reader { return strings.NewReader("payload") }},
		{name: "POST without GetBody", method: "POST", body: func() io.Reader { return opaque{strings.NewReader("payload")} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("X-Got", string(b))
			})
			tr := newTransport(t)
			for i := 0; i < 3; i++ {
				var body io.Reader
				if tc.body != nil {
					body = tc.body()
				}
				resp, _ := do(t, tr, newReq(t, tc.method, s.URL, body))
				if tc.body != nil && resp.Header.Get("X-Got") != "payload" {
					t.Fatalf("request %d: body %q", i, resp.Header.Get("X-Got"))
				}
				s.CloseClientConnections() // the server drops the idle connection
				polltest.UntilTrue(t, time.Second, func() bool { return s.conns.Load() == int32(i+1) && closedIdle(s) })
			}
			if got := s.reqs.Load(); got != 3 {
				t.Errorf("server handled %d requests, want 3 (no duplicate)", got)
			}
		})
	}
}

// closedIdle gives the server's close a moment to reach the client socket.
func closedIdle(*server) bool { time.Sleep(5 * time.Millisecond); return true }

// A reused connection that dies after the request was written is ambiguous for
// a non-idempotent request: it is reported, never resent.
func TestAmbiguousFailureIsNotResent(t *testing.T) {
	url, got := dropsTheSecondRequest(t)
	tr := newTransport(t)
	do(t, tr, newReq(t, "POST", url, opaque{strings.NewReader("one")}))
	_, err := tr.RoundTrip(newReq(t, "POST", url, opaque{strings.NewReader("two")}))
	if err == nil {
		t.Fatal("no error")
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		t.Fatalf("post-write failure reported as a connect failure: %v", err)
	}
	if n := got.Load(); n != 2 {
		t.Fatalf("server read %d requests, want 2", n)
	}
	// An idempotent request in the same situation is not resent either: it was
	// written, so it is a transmission, and only the retry policy decides
	// whether another one is made.
	got.Store(0)
	tr2 := newTransport(t)
	do(t, tr2, newReq(t, "GET", url, nil))
	if _, err := tr2.RoundTrip(newReq(t, "GET", url, nil)); err == nil {
		t.Fatal("GET: no error")
	}
	if n := got.Load(); n != 2 {
		t.Fatalf("GET: server read %d requests, want 2", n)
	}
}

func TestMaxConnsPerHost(t *testing.T) {
	var inflight, peak atomic.Int32
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		inflight.Add(-1)
		io.WriteString(w, "ok")
	})
	tr := &Transport{MaxConnsPerHost: 2, MaxIdleConnsPerHost: 2}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				resp, err := tr.RoundTrip(newReq(t, "GET", s.URL, nil))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("peak concurrency %d > MaxConnsPerHost 2", p)
	}
	if c := s.conns.Load(); c > 2 {
		t.Errorf("%d connections > MaxConnsPerHost 2", c)
	}
	// A waiter gives up with its context.
	hold, err := tr.RoundTrip(newReq(t, "GET", s.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	hold2, err := tr.RoundTrip(newReq(t, "GET", s.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := tr.RoundTrip(newReq(t, "GET", s.URL, nil).WithContext(ctx)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiter: %v", err)
	}
	hold.Body.Close()
	hold2.Body.Close()
	do(t, tr, newReq(t, "GET", s.URL, nil))
}

func TestIdleTimeoutAndPoolBounds(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tr := &Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: 50 * time.Millisecond}
	defer tr.CloseIdleConnections()
	a, _ := tr.RoundTrip(newReq(t, "GET", s.URL, nil))
	b, _ := tr.RoundTrip(newReq(t, "GET", s.URL, nil))
	io.ReadAll(a.Body)
	io.ReadAll(b.Body)
	a.Body.Close()
	b.Body.Close()
	if n := tr.idleCount(); n != 1 {
		t.Fatalf("idle %d, want 1 (MaxIdleConnsPerHost)", n)
	}
	polltest.UntilTrue(t, time.Second, func() bool { return tr.idleCount() == 0 })
	do(t, tr, newReq(t, "GET", s.URL, nil))
	if n := s.conns.Load(); n != 3 {
		t.Errorf("connections %d, want 3", n)
	}
}

type recordingRT struct{ n atomic.Int32 }

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

func TestFallback(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	big := bytes.Repeat([]byte("z"), 100<<10)
	tests := []struct {
		name string
		req  func() *http.Request
		fb   bool
	}{
		{"plain GET is handled", func() *http.Request { return newReq(t, "GET", s.URL, nil) }, false},
		{"small POST is handled", func() *http.Request { return newReq(t, "POST", s.URL, strings.NewReader("x")) }, false},
		{"large body goes to the fallback", func() *http.Request { return newReq(t, "POST", s.URL, bytes.NewReader(big)) }, true},
		{"unknown length goes to the fallback", func() *http.Request { return newReq(t, "POST", s.URL, opaque{strings.NewReader("x")}) }, true},
		{"Expect goes to the fallback", func() *http.Request {
			r := newReq(t, "POST", s.URL, strings.NewReader("x"))
			r.Header.Set("Expect", "100-continue")
			return r
		}, true},
		{"Upgrade goes to the fallback", func() *http.Request {
			r := newReq(t, "GET", s.URL, nil)
			r.Header.Set("Upgrade", "websocket")
			return r
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fb := &recordingRT{}
			tr := &Transport{Fallback: fb, FallbackNoReuse: fb}
			defer tr.CloseIdleConnections()
			do(t, tr, tc.req())
			if got := fb.n.Load() == 1; got != tc.fb {
				t.Errorf("fallback used: %v, want %v", got, tc.fb)
			}
		})
	}
	// https with no fallback is an error, not a plain-text request.
	tr := &Transport{}
	if _, err := tr.RoundTrip(newReq(t, "GET", "https://127.0.0.1:1/", nil)); err == nil {
		t.Error("https without a fallback: no error")
	}
}

func TestInvalidRequestsAndResponses(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("h", 64<<10))
	})
	tr := &Transport{MaxResponseHeaderBytes: 16 << 10}
	defer tr.CloseIdleConnections()
	if _, err := tr.RoundTrip(newReq(t, "GET", s.URL, nil)); err == nil {
		t.Error("oversized response header accepted")
	}
	req := newReq(t, "GET", s.URL, nil)
	req.Header["X-Bad"] = []string{"a\r\nInjected: yes"}
	if _, err := tr.RoundTrip(req); err == nil {
		t.Error("header injection accepted")
	}
}

func TestHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"http://a.example/":        "a.example:80",
		"http://a.example:8080/":   "a.example:8080",
		"http://a.example:/":       "a.example:80",
		"http://[::1]/":            "[::1]:80",
		"http://[::1]:9/":          "[::1]:9",
		"http://127.0.0.1:18080/x": "127.0.0.1:18080",
	} {
		if got := hostPort(newReq(t, "GET", in, nil).URL); got != want {
			t.Errorf("hostPort(%s) = %s, want %s", in, got, want)
		}
	}
}

// Concurrent use under -race: many goroutines, early closes, cancellations.
func TestConcurrentMixedUse(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(20 * time.Millisecond)
		}
		io.WriteString(w, strings.Repeat("k", 3000))
	})
	tr := &Transport{MaxIdleConnsPerHost: 4, MaxConnsPerHost: 6}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				path := "/"
				if (g+i)%7 == 0 {
					path = "/slow"
					cancel2 := cancel
					ctx, cancel = context.WithTimeout(ctx, 5*time.Millisecond)
					defer cancel2()
				}
				resp, err := tr.RoundTrip(newReq(t, "GET", s.URL+path, nil).WithContext(ctx))
				if err == nil {
					if i%3 == 0 {
						resp.Body.Close()
					} else {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				} else if path != "/slow" {
					t.Error(err)
				}
				cancel()
			}
		}(g)
	}
	wg.Wait()
}
