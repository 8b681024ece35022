package leaseserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// MaxConns bounds the connections one replica keeps open: each sidecar keeps
// one per lease endpoint, whatever the number of its quotas.
const MaxConns = 8192

// Listener serves a handler over HTTPS with the manager's serving
// certificate (the webhook's: the webhook Service's name is in it in both
// certificate modes), reloaded when its files change. It is a manager
// Runnable that runs on every replica, not only the leader.
type Listener struct {
	// Addr is the listen address (--quota-lease-bind-address).
	Addr string
	// Listener, when not nil, is listened on instead of Addr (tests).
	Listener net.Listener
	// CertFile and KeyFile are the certificate and its key. Until both
	// exist (a self-signed certificate not written yet) nothing listens.
	CertFile, KeyFile string
	Handler           http.Handler
	Log               logr.Logger
}

// NeedLeaderElection is false: every replica serves leases.
func (l *Listener) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (l *Listener) Start(ctx context.Context) error {
	if err := waitForFiles(ctx, l.CertFile, l.KeyFile); err != nil {
		return nil // stopped before the certificate came
	}
	cw, err := certwatcher.New(l.CertFile, l.KeyFile)
	if err != nil {
		return fmt.Errorf("lease endpoint certificate: %w", err)
	}
	go func() { _ = cw.Start(ctx) }()
	ln := l.Listener
	if ln == nil {
		if ln, err = (&net.ListenConfig{}).Listen(ctx, "tcp", l.Addr); err != nil {
			return fmt.Errorf("lease endpoint: %w", err)
		}
	}
	srv := &http.Server{
		Handler: l.Handler,
		TLSConfig: &tls.Config{GetCertificate: cw.GetCertificate, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxTokenBytes + 4<<10,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	l.Log.Info("serving quota leases", "address", ln.Addr().String())
	if err := srv.ServeTLS(netutil.LimitListener(ln, MaxConns), "", ""); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("lease endpoint: %w", err)
	}
	return nil
}

// waitForFiles returns once every file exists, or ctx's error.
func waitForFiles(ctx context.Context, files ...string) error {
	for {
		missing := false
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				missing = true
			}
		}
		if !missing {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
