// Package certsync copies the webhook serving certificate from a Secret into
// the directory the webhook server reads, on every manager replica.
//
// In self-signed mode cert-controller keeps the certificate in a Secret
// (docs/operations.md, Certificates). Mounting that Secret would leave each
// replica waiting for the kubelet to project a change, up to a minute or
// more, and cert-controller checks for the files with a doubling backoff, so
// a fresh install could take minutes to serve. The replica copies the files
// itself instead: it watches the one Secret (by name, in the manager's own
// namespace) and copies each change as it comes, with a read every Interval
// as a backstop; controller-runtime's certificate watcher reloads them without
// a restart. A renewal written by the leader therefore reaches every replica
// within a second, while the CA bundles the API server trusts still hold the
// CA that signed both (docs/operations.md#certificates).
package certsync

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Writer is a manager Runnable that runs on every replica (not only the
// leader). Its zero Interval means one minute.
type Writer struct {
	// Reader reads the Secret; the manager's API reader (uncached).
	Reader client.Reader
	// Watch, if set, watches the Secret alone (a field selector on its name)
	// so that a change is copied at once; without it the Secret is read
	// every Interval only.
	Watch  kubernetes.Interface
	Secret types.NamespacedName
	// Dir receives CertName and KeyName, the Secret's keys of the same names,
	// and CAName when set (the CA the quota lease endpoint's clients trust,
	// docs/quota.md#trust).
	Dir, CertName, KeyName, CAName string
	// Interval between reads once the files are written; before that, 1 s.
	Interval time.Duration
	// Written, if set, is closed once the files hold a certificate: the
	// webhook server can start.
	Written chan struct{}

	once sync.Once
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
	changes := w.watch(ctx)
	written := false
	for {
		changed, err := w.Sync(ctx)
		switch {
		case err != nil:
			log.Info("cannot copy the webhook certificate yet", "error", err.Error())
		case changed:
			log.Info("webhook certificate written")
			fallthrough
		default:
			written = true
			w.once.Do(func() {
				if w.Written != nil {
					close(w.Written)
				}
			})
		}
		wait := time.Second
		if written {
			wait = interval
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-time.After(wait):
		}
	}
}

// watch returns a channel that receives when the Secret changes, nil (never)
// without Watch.
func (w *Writer) watch(ctx context.Context) <-chan struct{} {
	if w.Watch == nil {
		return nil
	}
	changes := make(chan struct{}, 1)
	notify := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	lw := toolscache.NewListWatchFromClient(w.Watch.CoreV1().RESTClient(), "secrets", w.Secret.Namespace,
		fields.OneTermEqualSelector("metadata.name", w.Secret.Name))
	inf := toolscache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, toolscache.Indexers{})
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	})
	go inf.RunWithContext(ctx)
	return changes
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
	caPath, ca := "", []byte(nil)
	if w.CAName != "" && len(s.Data[w.CAName]) > 0 {
		caPath, ca = filepath.Join(w.Dir, w.CAName), s.Data[w.CAName]
	}
	if same(certPath, cert) && same(keyPath, key) && (caPath == "" || same(caPath, ca)) {
		return false, nil
	}
	// The CA first, then the key: whoever sees the new certificate finds
	// its key, and its CA already rendered for the clients.
	if caPath != "" {
		if err := writeAtomic(caPath, ca); err != nil {
			return false, err
		}
	}
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
