package certsync

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// TestSyncCopiesTheSecretAndEachRenewal steps one Writer through the life of
// the certificate Secret on a real API server.
func TestSyncCopiesTheSecretAndEachRenewal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	c, err := client.New(testenv.Start(t, nil), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "webhook-server-cert"}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	w := &Writer{Reader: c, Secret: types.NamespacedName{Namespace: "default", Name: s.Name}, Dir: dir, CertName: "tls.crt", KeyName: "tls.key", CAName: "ca.crt"}
	files := func() string {
		crt, _ := os.ReadFile(filepath.Join(dir, "tls.crt"))
		key, _ := os.ReadFile(filepath.Join(dir, "tls.key"))
		ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
		return string(crt) + "|" + string(key) + "|" + string(ca)
	}
	fill := func(crt, key, ca string) {
		s.Data = map[string][]byte{"tls.crt": []byte(crt), "tls.key": []byte(key), "ca.crt": []byte(ca)}
		if err := c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		name        string
		before      func()
		wantChanged bool
		wantErr     bool
		wantFiles   string
	}{
		{name: "an empty Secret (not filled yet) is an error and writes nothing", wantErr: true, wantFiles: "||"},
		{name: "the filled Secret is copied, its CA too", before: func() { fill("cert-1", "key-1", "ca-1") }, wantChanged: true, wantFiles: "cert-1|key-1|ca-1"},
		{name: "an unchanged Secret writes nothing", wantFiles: "cert-1|key-1|ca-1"},
		{name: "a renewal is copied", before: func() { fill("cert-2", "key-2", "ca-1") }, wantChanged: true, wantFiles: "cert-2|key-2|ca-1"},
		{name: "a new CA alone is copied", before: func() { fill("cert-2", "key-2", "ca-2") }, wantChanged: true, wantFiles: "cert-2|key-2|ca-2"},
	}
	for _, st := range steps {
		if st.before != nil {
			st.before()
		}
		changed, err := w.Sync(ctx)
		if changed != st.wantChanged || (err != nil) != st.wantErr || files() != st.wantFiles {
			t.Errorf("%s: changed %v, err %v, files %q; want %v, error %v, %q", st.name, changed, err, files(), st.wantChanged, st.wantErr, st.wantFiles)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "tls.key")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("tls.key mode = %v, want 0600", fi.Mode().Perm())
	}
}
