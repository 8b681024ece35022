package h1client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// Under pkg/retryhttp.Transport, a connect failure of this client is a
// connect failure (retried for a streamed POST, R4), and a post-write failure
// of a non-replayable request is not.
func TestRetryPolicyClassification(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	p, err := retrypolicy.Compile(retrypolicy.Config{
		Name: "t", Hosts: []string{dead}, MaxAttempts: 3, Deadline: 10 * time.Second,
		Backoff:       retrypolicy.Backoff{Base: time.Millisecond, Max: time.Millisecond, Jitter: retrypolicy.JitterNone},
		RetryOnStatus: []int{503}, RetryOn: retrypolicy.RetryConnectFailure, ReplayableMethods: []string{"GET"},
		MaxReplayBodyBytes: 1 << 10, RetryAfterMaxWait: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int32
	var classes []retrypolicy.ErrorClass
	rt := &retryhttp.Transport{Inner: newTransport(t), Route: retryhttp.Static(p),
		Observer: retrypolicyObserver(func(e retryhttp.Event) {
			if e.Kind == retryhttp.EventAttempt {
				attempts.Add(1)
				classes = append(classes, e.ErrorClass)
			}
		})}
	// A POST with an unknown-length body: not replayable, but a connect failure
	// provably sent nothing, so it is retried up to maxAttempts.
	req, _ := http.NewRequestWithContext(context.Background(), "POST", "http://"+dead+"/", io.NopCloser(strings.NewReader("x")))
	req.ContentLength = 1
	_, err = rt.RoundTrip(req)
	var re *retryhttp.Error
	if !errors.As(err, &re) || re.Attempts != 3 {
		t.Fatalf("err = %v, want 3 attempts", err)
	}
	for _, c := range classes {
		if c != retrypolicy.ConnectFailure {
			t.Errorf("class %v, want ConnectFailure", c)
		}
	}
}

type retrypolicyObserver func(retryhttp.Event)

func (f retrypolicyObserver) Observe(e retryhttp.Event) { f(e) }

func TestCanceledBeforeSendClosesBody(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	tr := newTransport(t)
	do(t, tr, newReq(t, "GET", s.URL, nil)) // a pooled connection
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	body := &closeTracker{Reader: strings.NewReader("x")}
	req := newReq(t, "POST", s.URL, body).WithContext(ctx)
	req.ContentLength = 1
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if !body.closed.Load() {
		t.Error("body not closed")
	}
}
