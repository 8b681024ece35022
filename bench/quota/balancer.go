package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// balancerCommand, as this program's first argument, makes it the
// balancer of the lease endpoint's replicas (serveBalancer).
const balancerCommand = "lease-balancer"

// serveBalancer runs a balancer in front of -backends until SIGTERM and
// writes its address into -ready.
func serveBalancer(args []string) int {
	fs := flag.NewFlagSet(balancerCommand, flag.ExitOnError)
	backends := fs.String("backends", "", "the replicas, host:port, comma-separated")
	ready := fs.String("ready", "", "written once listening")
	_ = fs.Parse(args)
	b, err := startBalancer(strings.Split(*backends, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer b.close()
	j, _ := json.Marshal(childReady{Addr: b.addr()})
	if err := writeAtomically(*ready, j); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	return 0
}

// balancer plays the Service in front of the lease endpoint's replicas: the
// sidecars dial its one address (the lease entry's address, as they dial
// the Service's cluster IP), and each connection goes to the next replica
// in turn (round-robin per connection, as kube-proxy spreads connections;
// the requests on a kept-alive connection all go to its replica). Bytes are
// copied both ways until either side closes, and then both are closed, so
// a replica's end reaches its clients at once.
//
// A replica that does not answer stays in the rotation: a connection sent
// to it is reset, as a Service resets a connection to a pod whose endpoint
// has not been removed yet (a killed replica's is removed only once the
// kubelet reports the pod not ready). That is the hard case for the
// sidecars; a Service that has dropped the endpoint sends them only to the
// live replica.
type balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startBalancer(backends []string) (*balancer, error) {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	return b, nil
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Go(func() { b.pipe(c) })
	}
}

// pipe connects c to the next replica.
func (b *balancer) pipe(c net.Conn) {
	to := b.backends[(b.next.Add(1)-1)%uint64(len(b.backends))]
	d := net.Dialer{Timeout: time.Second}
	up, err := d.DialContext(context.Background(), "tcp", to)
	if err != nil {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // closed with a reset, as a refused connection
		}
		c.Close()
		return
	}
	if !b.track(c, up) {
		return
	}
	var once sync.Once
	done := func() { once.Do(func() { c.Close(); up.Close() }) }
	go func() { _, _ = io.Copy(up, c); done() }()
	_, _ = io.Copy(c, up)
	done()
	b.untrack(c, up)
}

// track adds the connections to those closed by close, or closes them if
// the balancer is closed.
func (b *balancer) track(conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		b.conns[c] = struct{}{}
	}
	return true
}

func (b *balancer) untrack(conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns, c)
	}
}

// close stops accepting and closes every connection.
func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}
