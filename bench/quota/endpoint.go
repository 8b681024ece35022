package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// leaseHost is the name the lease URL and the replicas' certificate carry:
// the webhook Service's, as in a cluster. The sidecars never resolve it:
// they dial the balancer (the lease entry's address).
const leaseHost = "retry-operator-webhook-service.retry-operator-system.svc"

// replicaCount is how many replicas serve the lease endpoint, as the chart's
// manager Deployment runs.
const replicaCount = 2

// endpoint is the manager's lease endpoint as this benchmark runs it:
// replicaCount processes of this program (serveReplica), each the real
// leaseserver handler and listener over the one redis-server, behind a
// balancer process that plays the Service (serveBalancer). The balancer is
// a process of its own, not a part of the load generator's: a lease would
// otherwise wait for the load generator's goroutines on a loaded machine.
type endpoint struct {
	replicas []*child
	lb       *child
	// gone are the answers of replica processes stopped, read before they were.
	gone map[string]float64
}

// child is a process of this program in another role (replicaCommand,
// balancerCommand); it is started again on the same arguments after a stop.
type child struct {
	bin, dir, name string
	args           []string
	ready          childReady
	cmd            *exec.Cmd
	exited         chan struct{}
	cpu            time.Duration // of its processes stopped
}

// childReady is what a child writes into its ready file once it listens.
type childReady struct {
	Addr    string // the balancer's
	Metrics string // a replica's /metrics, host:port
}

// startEndpoint starts the replicas for the scenario's SharedQuotas (a JSON
// file) and their balancer.
func (e *env) startEndpoint(scenario, quotas string, pods int) (*endpoint, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ep := &endpoint{gone: map[string]float64{}}
	var addrs []string
	for i := range replicaCount {
		addr, err := freeAddr()
		if err != nil {
			ep.stop()
			return nil, err
		}
		r := &child{bin: bin, dir: e.dir, name: fmt.Sprintf("%s-replica-%d", scenario, i),
			args: []string{replicaCommand, "-listen=" + addr, "-redis=" + e.redis.addr, "-quotas=" + quotas,
				"-cert=" + e.cert.certFile, "-key=" + e.cert.keyFile, "-pods=" + strconv.Itoa(pods)}}
		if err := r.start(); err != nil {
			ep.stop()
			return nil, err
		}
		ep.replicas = append(ep.replicas, r)
		addrs = append(addrs, addr)
	}
	ep.lb = &child{bin: bin, dir: e.dir, name: scenario + "-balancer",
		args: []string{balancerCommand, "-backends=" + strings.Join(addrs, ",")}}
	if err := ep.lb.start(); err != nil {
		ep.stop()
		return nil, err
	}
	return ep, nil
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start runs the child's process and waits for its ready file.
func (r *child) start() error {
	ready := filepath.Join(r.dir, r.name+".ready")
	_ = os.Remove(ready)
	logf, err := os.OpenFile(filepath.Join(r.dir, r.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.cmd = exec.CommandContext(context.Background(), r.bin, append(r.args, "-ready="+ready)...)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	r.cmd.SysProcAttr = dieWithParent()
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	r.exited = exited
	cmd := r.cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil {
			return json.Unmarshal(b, &r.ready)
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited (log: %s)", r.name, logf.Name())
		default:
		}
	}
	return fmt.Errorf("%s not ready after 10 s", r.name)
}

// kill stops the child's process at once (SIGKILL, as a killed pod),
// keeping its CPU time; false if it was not running.
func (r *child) kill() bool {
	if r.cmd == nil {
		return false
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	if ps := r.cmd.ProcessState; ps != nil {
		r.cpu += ps.UserTime() + ps.SystemTime()
	}
	r.cmd = nil
	return true
}

// cpuTime is the CPU time of the child's processes so far.
func (r *child) cpuTime() time.Duration {
	if r.cmd == nil {
		return r.cpu
	}
	return r.cpu + cpuTime(r.cmd.Process.Pid)
}

// answers are a replica's retry_manager_quota_lease_requests_total by
// code (empty if it does not answer).
func (r *child) answers() map[string]float64 {
	out := map[string]float64{}
	if r.cmd == nil {
		return out
	}
	var b strings.Builder
	if err := get("http://"+r.ready.Metrics+"/metrics", 5*time.Second, &b); err != nil {
		return out
	}
	const prefix = `retry_manager_quota_lease_requests_total{code="`
	for line := range strings.Lines(b.String()) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			code, v, _ := strings.Cut(rest, `"} `)
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				out[code] += f
			}
		}
	}
	return out
}

// stopReplica kills replica i, its answers counted first.
func (ep *endpoint) stopReplica(i int) {
	for code, n := range ep.replicas[i].answers() {
		ep.gone[code] += n
	}
	ep.replicas[i].kill()
}

// answers are the endpoint's answers by code so far, of every replica
// process, stopped or running.
func (ep *endpoint) answers() map[string]float64 {
	out := map[string]float64{}
	for code, n := range ep.gone {
		out[code] += n
	}
	for _, r := range ep.replicas {
		for code, n := range r.answers() {
			out[code] += n
		}
	}
	return out
}

// cpuTime is the CPU time of every replica process so far (the balancer's
// is its own).
func (ep *endpoint) cpuTime() time.Duration {
	var total time.Duration
	for _, r := range ep.replicas {
		total += r.cpuTime()
	}
	return total
}

// stop kills the replicas and closes the balancer.
func (ep *endpoint) stop() {
	for _, r := range ep.replicas {
		r.kill()
	}
	if ep.lb != nil {
		ep.lb.kill()
	}
}

// cert is the replicas' serving certificate: self-signed for leaseHost, so
// it is its own CA bundle.
type cert struct {
	certFile, keyFile string
	pem               string
}

func newCert(dir string) (cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return cert{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: leaseHost},
		DNSNames: []string{leaseHost}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return cert{}, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return cert{}, err
	}
	c := cert{certFile: filepath.Join(dir, "lease.crt"), keyFile: filepath.Join(dir, "lease.key"),
		pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
	if err := os.WriteFile(c.certFile, []byte(c.pem), 0o600); err != nil {
		return cert{}, err
	}
	return c, os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}
