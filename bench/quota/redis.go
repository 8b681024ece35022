package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

// The store's ACL user: the sidecars read it from --quota-credentials-file.
const (
	redisUser     = "bench"
	redisPassword = "bench-quota-secret"
)

// redis is a redis-server (Debian's) this program started on loopback, with
// its own directory, no persistence and one ACL user for the sidecars.
type redis struct {
	addr, dir string
	cmd       *exec.Cmd
	cpu       time.Duration // of its processes stopped
}

func startRedis(dir string) (*redis, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &redis{addr: addr, dir: dir}
	return s, s.start()
}

// start runs the server (again, after stop: a restart without persistence,
// so the quota's state and scripts are gone, as after a real restart).
func (s *redis) start() error {
	_, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.CommandContext(context.Background(), "redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--loglevel", "warning",
		"--user", "default", "off", "--user", redisUser, "on", ">"+redisPassword, "~retry:quota:*", "+@all")
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	s.cmd.SysProcAttr = dieWithParent()
	if err := s.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", s.addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("not listening on %s after 5 s", s.addr)
}

func (s *redis) stop() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cpu += s.cmd.ProcessState.UserTime() + s.cmd.ProcessState.SystemTime()
		s.cmd = nil
	}
}

// cpuTime is the CPU time of the server's processes so far.
func (s *redis) cpuTime() time.Duration {
	if s.cmd == nil {
		return s.cpu
	}
	return s.cpu + cpuTime(s.cmd.Process.Pid)
}
