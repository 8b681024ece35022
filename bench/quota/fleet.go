package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// build compiles cmd/retry-sidecar once into dir.
func build(dir string) (string, error) {
	bin := filepath.Join(dir, "retry-sidecar")
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", bin, "./cmd/retry-sidecar")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return bin, cmd.Run()
}

// sidecar is one retry-sidecar process this program started.
type sidecar struct {
	cmd    *exec.Cmd
	proxy  string // its forward proxy, host:port
	admin  string // its /metrics
	client *proxyClient
	exited chan struct{}
}

// startSidecar runs the binary on ephemeral loopback ports with GOMAXPROCS=1
// (50 processes share 2 cores), configured by config (its flags: the
// policy file or the configuration directory), and waits for its ready
// file.
func startSidecar(bin, dir, name string, config []string) (*sidecar, error) {
	ready := filepath.Join(dir, name+".ready")
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	s := &sidecar{exited: make(chan struct{})}
	s.cmd = exec.CommandContext(context.Background(), bin, "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0",
		"--stats-listen=127.0.0.1:0", "--ready-file="+ready, "--log-level=warn", "--drain-timeout=1s")
	s.cmd.Args = append(s.cmd.Args, config...)
	if profileDir != "" {
		s.cmd.Args = append(s.cmd.Args, "--enable-pprof")
	}
	s.cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	s.cmd.SysProcAttr = dieWithParent()
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); logf.Close(); close(s.exited) }()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(ready); err == nil {
			var r struct{ Listen, Admin string }
			if err := json.Unmarshal(b, &r); err != nil {
				s.kill()
				return nil, err
			}
			s.proxy, s.admin = r.Listen, r.Admin
			s.client = &proxyClient{addr: s.proxy}
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("sidecar %s exited before listening (log: %s)", name, logf.Name())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("sidecar %s not ready after 30 s", name)
		}
	}
}

func (s *sidecar) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	if s.client != nil {
		s.client.close()
	}
}

// startSidecars starts sidecars first to first+n−1 at once, each configured
// by config(i, its name).
func startSidecars(bin, dir, prefix string, first, n int, config func(i int, name string) ([]string, error)) ([]*sidecar, error) {
	out := make([]*sidecar, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			name := prefix + "-" + strconv.Itoa(first+i)
			args, err := config(first+i, name)
			if err != nil {
				errs[i] = err
				return
			}
			out[i], errs[i] = startSidecar(bin, dir, name, args)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, s := range out {
				if s != nil {
					s.kill()
				}
			}
			return nil, fmt.Errorf("sidecar %d: %w", i, err)
		}
	}
	return out, nil
}

// metrics is the body of the sidecar's /metrics.
func (s *sidecar) metrics() ([]byte, error) {
	var b bytes.Buffer
	err := s.get("/metrics", 5*time.Second, &b)
	return b.Bytes(), err
}

// get copies the body of GET path on the sidecar's admin port to w, within
// timeout.
func (s *sidecar) get(path string, timeout time.Duration, w io.Writer) error {
	return get("http://"+s.admin+path, timeout, w)
}

// get copies the body of GET url to w, within timeout.
func get(url string, timeout time.Duration, w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// scrapeConcurrency is how many sidecars' /metrics are read at once.
const scrapeConcurrency = 4

// scrape reads every sidecar's /metrics, a few at a time, and returns the
// bodies (nil where unreadable) with the middle of the time the reads took.
func scrape(fleet []*sidecar) ([][]byte, time.Time) {
	t0 := time.Now()
	bodies := make([][]byte, len(fleet))
	sem := make(chan struct{}, scrapeConcurrency)
	var wg sync.WaitGroup
	for i, s := range fleet {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			bodies[i], _ = s.metrics()
		})
	}
	wg.Wait()
	return bodies, t0.Add(time.Since(t0) / 2)
}

// value is one series (name with labels, exactly as exposed) in a /metrics
// body; ok is false if it is absent.
func value(body []byte, series string) (float64, bool) {
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// values is series in each body (0 where absent).
func values(bodies [][]byte, series string) []float64 {
	vals := make([]float64, len(bodies))
	for i, b := range bodies {
		vals[i], _ = value(b, series)
	}
	return vals
}

func cpus() int { return runtime.NumCPU() }

// profile writes a CPU profile of d of the sidecar to path.
func (s *sidecar) profile(path string, d time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return s.get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(d.Seconds())), d+10*time.Second, f)
}

// fleetCPU is the CPU time the fleet's processes have used.
func fleetCPU(fleet []*sidecar) time.Duration {
	var total time.Duration
	for _, s := range fleet {
		total += cpuTime(s.cmd.Process.Pid)
	}
	return total
}
