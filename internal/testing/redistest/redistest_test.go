package redistest

import (
	"context"
	"testing"
	"time"
)

func TestServerStopsAndRestartsOnItsAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := Start(t, WithPassword("admin-pw"))
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET on a started server: %v", err)
	}
	s.Stop()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("PING on a stopped server succeeded")
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the restart: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after the restart = %d, %v; want 0 (no persistence)", n, err)
	}
}

func TestServerRequiresItsPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := Start(t, WithPassword("admin-pw"))
	wrong := &Server{Addr: s.Addr, Password: "wrong"}
	if err := wrong.Ping(ctx); err == nil {
		t.Fatal("PING with a wrong password succeeded")
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
}
