package manager

import (
	"context"
	"errors"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// fakeServer is a webhook.Server whose Start serves until its context ends,
// or fails at once with fail.
type fakeServer struct {
	webhook.Server
	fail    error
	stopped chan time.Time
}

func (f fakeServer) Start(ctx context.Context) error {
	if f.fail != nil {
		return f.fail
	}
	<-ctx.Done()
	f.stopped <- time.Now()
	return nil
}

// The server goes on serving for the drain after the manager stops it, and a
// server that fails returns its error at once.
func TestDrainingWebhookServerServesForTheDrainAfterStop(t *testing.T) {
	f := fakeServer{stopped: make(chan time.Time, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- DrainingWebhookServer(f, 300*time.Millisecond).Start(ctx) }()
	stopAt := time.Now()
	cancel()
	served := (<-f.stopped).Sub(stopAt)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if served < 300*time.Millisecond || served > 3*time.Second {
		t.Errorf("served %s after the stop, want the 300ms drain", served.Round(time.Millisecond))
	}

	boom := errors.New("listen tcp :9443: address already in use")
	start := time.Now()
	err := DrainingWebhookServer(fakeServer{fail: boom}, time.Hour).Start(context.Background())
	if !errors.Is(err, boom) || time.Since(start) > time.Second {
		t.Errorf("a failing server: %v after %s, want its error at once", err, time.Since(start).Round(time.Millisecond))
	}
}
