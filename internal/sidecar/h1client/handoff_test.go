package h1client

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// countingRT counts the requests a fallback transport is given.
type countingRT struct {
	rt http.RoundTripper
	n  atomic.Int32
}

func (c *countingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(req)
}

// handOffTransport is a HandOffAll Transport with counted fallbacks, as the
// sidecar builds it for --http1-upstream-client=false.
func handOffTransport(t *testing.T) (tr *Transport, pooled, once *countingRT) {
	pooled = &countingRT{rt: &http.Transport{}}
	once = &countingRT{rt: &http.Transport{DisableKeepAlives: true}}
	tr = &Transport{HandOffAll: true, Fallback: pooled, FallbackNoReuse: once}
	t.Cleanup(func() {
		pooled.rt.(*http.Transport).CloseIdleConnections()
		once.rt.(*http.Transport).CloseIdleConnections()
	})
	return tr, pooled, once
}

// TestHandOffAllSendsEveryRequestWithNetHTTPAsItCameIn: each request goes to
// the fallback its body calls for, and the server reads it framed as
// net/http.Transport frames it when given the request unchanged.
func TestHandOffAllSendsEveryRequestWithNetHTTPAsItCameIn(t *testing.T) {
	var head atomic.Value // the last request's framing headers and body
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		head.Store(r.Header.Get("Content-Length") + "|" + strings.Join(r.TransferEncoding, ",") + "|" + string(b))
		io.WriteString(w, "ok")
	})
	tests := map[string]struct {
		method, body string
		wantPooled   bool
	}{
		"a GET goes on a pooled connection":                       {"GET", "", true},
		"a HEAD goes on a pooled connection":                      {"HEAD", "", true},
		"a DELETE goes on a pooled connection":                    {"DELETE", "", true},
		"a POST with a body goes on a pooled connection":          {"POST", "x", true},
		"a POST without a body goes on a connection never reused": {"POST", "", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			send := func(rt http.RoundTripper) string {
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				do(t, rt, newReq(t, tc.method, s.URL, body))
				return head.Load().(string)
			}
			plain := &http.Transport{}
			defer plain.CloseIdleConnections()
			want := send(plain)
			tr, pooled, once := handOffTransport(t)
			if got := send(tr); got != want {
				t.Errorf("server read %q (Content-Length|Transfer-Encoding|body), net/http alone sends %q", got, want)
			}
			if p, o := pooled.n.Load(), once.n.Load(); (p == 1) != tc.wantPooled || p+o != 1 {
				t.Errorf("pooled %d, never reused %d; want pooled: %v", p, o, tc.wantPooled)
			}
		})
	}
}

// TestHandOffAllNeverResendsAWrittenRequest: a GET written on a reused
// connection that the server drops without an answer is not resent by
// net/http (which on its own resends it: the control).
func TestHandOffAllNeverResendsAWrittenRequest(t *testing.T) {
	tests := map[string]struct {
		handOff  bool
		wantRead int32
	}{
		"net/http on its own resends the GET (the control)": {false, 3},
		"HandOffAll sends it once":                          {true, 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			url, got := dropsTheSecondRequest(t)
			var rt http.RoundTripper = &http.Transport{}
			if tc.handOff {
				rt, _, _ = handOffTransport(t)
			}
			do(t, rt, newReq(t, "GET", url, nil))
			if resp, err := rt.RoundTrip(newReq(t, "GET", url, nil)); err == nil {
				resp.Body.Close()
			}
			if n := got.Load(); n != tc.wantRead {
				t.Errorf("server read %d requests, want %d", n, tc.wantRead)
			}
		})
	}
}

// dropsTheSecondRequest is a server (TestAmbiguousFailureIsNotResent, the
// hand-off tests) that answers the first request of each
// connection and drops the connection after reading its second; got counts
// the requests it read.
func dropsTheSecondRequest(t *testing.T) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := &atomic.Int32{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					got.Add(1)
					if n == 1 {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}(c)
		}
	}()
	return "http://" + ln.Addr().String() + "/", got
}
