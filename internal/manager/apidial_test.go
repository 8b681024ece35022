package manager

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// A dial to an API server that is away waits until it listens again (within
// the bound), says that it came back (once, and only after waiting), and
// gives up at once when the caller's context ends.
func TestPatientDialWaitsForTheAPIServerToListen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // the API server is away: connections are refused

	var returned atomic.Int32
	dial := PatientDial(&net.Dialer{Timeout: time.Second}, 20*time.Millisecond, 5*time.Second, func() { returned.Add(1) })
	back := make(chan net.Listener, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		l, err := net.Listen("tcp", addr) // the API server listens again
		if err != nil {
			t.Error(err)
		}
		back <- l
	}()
	start := time.Now()
	conn, err := dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("dial while the API server came back: %v", err)
	}
	conn.Close()
	if n := returned.Load(); n != 1 {
		t.Errorf("returned called %d times after a dial that waited, want 1", n)
	}
	conn, err = dial(context.Background(), "tcp", addr) // listening: connects at once
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if n := returned.Load(); n != 1 {
		t.Errorf("returned called %d times in all after a dial that did not wait, want still 1", n)
	}
	(<-back).Close()
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Errorf("connected after %s; want about 300 ms, when it listened again", took.Round(time.Millisecond))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := dial(ctx, "tcp", addr); err == nil {
		t.Fatal("dial to nothing succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a dial whose context ended after 100 ms returned after %s", took.Round(time.Millisecond))
	}

	short := PatientDial(&net.Dialer{Timeout: time.Second}, 20*time.Millisecond, 200*time.Millisecond, nil)
	start = time.Now()
	if _, err := short(context.Background(), "tcp", addr); err == nil {
		t.Fatal("dial to nothing succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a dial bounded by 200 ms gave up after %s", took.Round(time.Millisecond))
	}
}
