package main

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"
)

// named listens on loopback and answers every connection with name, then
// closes it.
func named(t *testing.T, name string) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// through dials the balancer and reads what comes back until it closes (a
// reset may come before the dial returns).
func through(t *testing.T, b *balancer) (string, error) {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", b.addr())
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	return string(got), err
}

func TestTheBalancerSendsEachConnectionToTheNextReplica(t *testing.T) {
	b, err := startBalancer([]string{named(t, "a"), named(t, "b")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	var got []string
	for range 4 {
		s, err := through(t, b)
		if err != nil {
			t.Fatalf("connection %d: %v", len(got), err)
		}
		got = append(got, s)
	}
	if want := []string{"a", "b", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("connections went to %v, want %v", got, want)
	}
}

func TestAConnectionToAStoppedReplicaIsReset(t *testing.T) {
	stopped, err := freeAddr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	b, err := startBalancer([]string{stopped, named(t, "live")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if got, err := through(t, b); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the connection sent to the stopped replica read %q, %v; want a reset", got, err)
	}
	if got, err := through(t, b); got != "live" || err != nil {
		t.Errorf("the next connection read %q, %v; want %q from the live replica", got, err, "live")
	}
}
