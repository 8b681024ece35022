// Package certsync copies the webhook serving certificate from a Secret into
// the directory the webhook server reads, on every manager replica.
//
// In self-signed mode cert-controller keeps the certificate in a Secret
// (docs/operations.md, Certificates). Mounting that Secret would leave each
// replica waiting for the kubelet to project a change, up to a minute or
// more, and cert-controller checks for the files with a doubling backoff, so
// a fresh install could take minutes to serve. The replica copies the files
// itself instead: within a second of the Secret being filled, and within
// Interval of each renewal; controller-runtime's certificate watcher reloads
// them without a restart.
package certsync

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Writer is a manager Runnable that runs on every replica (not only the
// leader). Its zero Interval means one minute.
type Writer struct {
	// Reader reads the Secret; the manager's API reader (uncached), so no
	// Secret informer is started for one object.
	Reader client.Reader
	Secret types.NamespacedName
	// Dir receives CertName and KeyName, the Secret's keys of the same names.
	Dir, CertName, KeyName string
	// Interval between reads once the files are written; before that, 1 s.
	Interval time.Duration
}

// NeedLeaderElection is false: every replica serves webhooks.
func (w *Writer) NeedLeaderElection() bool { return false }

// Start copies until ctx ends. Read errors are logged and retried.
func (w *Writer) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("certsync").WithValues("secret", w.Secret.String(), "dir", w.Dir)
	interval := w.Interval
	if interval <= 0 {
		interval = time.Minute
	}
	written := false
	for {
		changed, err := w.Sync(ctx)
		switch {
		case err != nil:
			log.Info("cannot copy the webhook certificate yet", "error", err.Error())
		case changed:
			log.Info("webhook certificate written")
			written = true
		}
		wait := time.Second
		if written {
			wait = interval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Sync writes the Secret's certificate and key into Dir when they differ from
// the files there, and reports whether it wrote. A Secret without both keys
// (not filled yet) is an error.
func (w *Writer) Sync(ctx context.Context) (bool, error) {
	var s corev1.Secret
	if err := w.Reader.Get(ctx, w.Secret, &s); err != nil {
		return false, err
	}
	cert, key := s.Data[w.CertName], s.Data[w.KeyName]
	if len(cert) == 0 || len(key) == 0 {
		return false, fmt.Errorf("secret has no %s and %s yet", w.CertName, w.KeyName)
	}
	certPath, keyPath := filepath.Join(w.Dir, w.CertName), filepath.Join(w.Dir, w.KeyName)
	if same(certPath, cert) && same(keyPath, key) {
		return false, nil
	}
	// The key first: a watcher that sees the new certificate finds its key.
	if err := writeAtomic(keyPath, key); err != nil {
		return false, err
	}
	if err := writeAtomic(certPath, cert); err != nil {
		return false, err
	}
	return true, nil
}

func same(path string, want []byte) bool {
	have, err := os.ReadFile(path)
	return err == nil && bytes.Equal(have, want)
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
