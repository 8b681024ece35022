package main_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// ---- the app as a raw socket ----

// rawApp is an app connection to the sidecar written byte for byte: it can
// send part of a head or of a body, pipeline requests, and hang up at any
// point. Whatever it does is bounded: every read and write has a deadline.
type rawApp struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dialApp connects to addr (the sidecar's --listen or --transparent-listen).
func dialApp(t *testing.T, addr string) *rawApp {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return &rawApp{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes raw bytes: heads, bodies or parts of them.
func (a *rawApp) send(raw string) {
	a.t.Helper()
	if _, err := io.WriteString(a.c, raw); err != nil {
		a.t.Fatalf("app write: %v", err)
	}
}

// hangUp closes the connection (FIN), as an app whose client gave up does.
func (a *rawApp) hangUp() { a.c.Close() }

// response reads one response, body included.
func (a *rawApp) response() (*http.Response, string) {
	a.t.Helper()
	resp, err := http.ReadResponse(a.br, nil)
	if err != nil {
		a.t.Fatalf("app read: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("app read body: %v", err)
	}
	return resp, string(b)
}

// closedBySidecar waits (at most within) for the sidecar to close the
// connection, reading and dropping what comes first, and reports whether it
// did.
func (a *rawApp) closedBySidecar(within time.Duration) bool {
	_ = a.c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, a.br)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout() // EOF (nil from Copy) or a reset
}

// ---- the sidecar's exit ----

// terminate sends SIGTERM and returns how long the sidecar took to exit
// (at most within; then it fails the test).
func (s *sidecar) terminate(within time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case <-s.exited:
		return time.Since(start)
	case <-time.After(within):
		s.t.Fatalf("the sidecar did not exit within %v of SIGTERM", within)
		return 0
	}
}
