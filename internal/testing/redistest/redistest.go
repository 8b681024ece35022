// Package redistest starts Debian's redis-server for a test, on a free
// loopback port, with no persistence: the real store, never the system
// service and never a mock (docs/quota.md). It is shared by the manager's
// tests (StoreReachable, the lease endpoint, the users of earlier releases)
// and the sidecar's quota client tests.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the server started; the test is skipped when it is not installed
// (apt-get install -y redis-server).
const Binary = "redis-server"

// startTimeout bounds waiting for "Ready to accept connections".
const startTimeout = 15 * time.Second

// Server is one redis-server process. Addr stays the same across Stop and
// Start, so clients configured with it reconnect after a restart.
type Server struct {
	// Addr is 127.0.0.1:port.
	Addr string
	// Password is the default user's password ("" for none): the admin
	// credentials of the tests.
	Password string

	t   testing.TB
	dir string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Option configures Start.
type Option func(*Server)

// WithPassword makes the default user require password (requirepass).
func WithPassword(password string) Option {
	return func(s *Server) { s.Password = password }
}

// Start starts a redis-server on a free loopback port and stops it when the
// test ends. It returns once the server accepts connections.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		if os.Getenv("RETRY_REQUIRE_TOOLS") != "" { // .ci/run: a skip would hide what is not tested
			t.Fatalf("%s is not installed (apt-get install -y redis-server) and RETRY_REQUIRE_TOOLS is set: %v", Binary, err)
		}
		t.Skipf("%s is not installed (apt-get install -y redis-server): %v", Binary, err)
	}
	s := &Server{t: t, dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	// A port found free may be taken before the server binds it: try again
	// on another one.
	var err error
	for range 5 {
		s.Addr, err = freePort()
		if err == nil {
			if err = s.start(); err == nil {
				break
			}
		}
	}
	if err != nil {
		t.Fatalf("starting %s: %v", Binary, err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again on the same address after Stop: an empty
// server (no persistence), as after a crash that lost its memory. Scripts
// loaded before are gone too.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatalf("restarting %s on %s: %v", Binary, s.Addr, err)
	}
}

// Stop stops the server (SIGKILL: a store that disappears) and waits for the
// process to end. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Client returns a go-redis client of the default user, closed when the test
// ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) start() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", "", "--loglevel", "notice",
	}
	if s.Password != "" {
		args = append(args, "--requirepass", s.Password)
	}
	// Stopped by Stop or the test's cleanup, never by a context.
	cmd := exec.CommandContext(context.Background(), Binary, args...)
	setParentDeathSignal(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	var log strings.Builder
	var logMu sync.Mutex
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			logMu.Lock()
			if log.Len() < 4096 {
				log.WriteString(sc.Text() + "\n")
			}
			logMu.Unlock()
			if !signalled && strings.Contains(sc.Text(), "Ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	select {
	case <-ready:
	case <-done:
		logMu.Lock()
		defer logMu.Unlock()
		return fmt.Errorf("%s exited before it was ready:\n%s", Binary, log.String())
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s was not ready within %s", Binary, startTimeout)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Ping checks the server answers the default user.
func (s *Server) Ping(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password, MaxRetries: -1})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// freePort returns 127.0.0.1:port of a port that was free a moment ago.
func freePort() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if port <= 0 {
		return "", errors.New("no free port")
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
