package redisstore

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server the test started on a free loopback port with its
// own directory (never the system service).
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install -y redis-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &server{t: t, port: port, dir: t.TempDir()}
	s.args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}, extra...)
	_ = path
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not start: %v", s.addr(), err)
		}
		time.Sleep(10 * time.Millisecond) // nothing to await but the port
	}
}

func (s *server) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// admin is a client of the server's default user.
func (s *server) admin(password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), Password: password, Protocol: 2, DisableIdentity: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

func (s *server) do(password string, args ...any) {
	s.t.Helper()
	if err := s.admin(password).Do(context.Background(), args...).Err(); err != nil {
		s.t.Fatalf("%v: %v", fmt.Sprint(args[:2]...), err)
	}
}
