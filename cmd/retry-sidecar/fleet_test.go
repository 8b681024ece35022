package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// renderedDoc is policies.json as the manager renders it: one policy for
// host with maxAttempts, at revision rev.
func renderedDoc(t *testing.T, host string, maxAttempts int, rev int64) string {
	t.Helper()
	return policysettest.Rendered(t, policyYAML("p", "up", host, fields("maxAttempts: "+itoa(maxAttempts))...), rev)
}

// config reads GET /config from the stats port (the pod-IP one).
func (s *sidecar) config() (int, policyset.ConfigStatus) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.stats + "/config")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var c policyset.ConfigStatus
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &c); err != nil {
			s.t.Fatalf("/config %q: %v", b, err)
		}
	}
	return resp.StatusCode, c
}

// waitConfig waits until /config reports revision rev from source.
func (s *sidecar) waitConfig(rev int64, source string, within time.Duration) policyset.ConfigStatus {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, c := s.config()
		if code == 200 && c.Revision == rev && c.Source == source {
			return c
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("/config = %d %+v after %s, want revision %d from %s", code, c, within, rev, source)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfigRevisionNeverGoesBack(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, status(503))
	dir := t.TempDir()
	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, up.host(), 2, 5)})
	s := startSidecar(t, "--config-dir="+dir)
	c := s.waitConfig(5, "file", 5*time.Second)
	if want := policyset.Hash([]byte(renderedDoc(t, up.host(), 2, 5))); c.Hash != want {
		t.Errorf("/config hash = %s, want %s (the hash of policies.json)", c.Hash, want)
	}
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "2")

	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, up.host(), 3, 4)})
	s.waitMetric(`retry_sidecar_config_stale_total{source="file"}`, 1)
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "2")
	if _, c := s.config(); c.Revision != 5 {
		t.Fatalf("/config revision = %d after an older document, want 5", c.Revision)
	}
	if n := strings.Count(s.logs.String(), "older revision refused"); n != 1 {
		t.Errorf("%d log lines about the older revision, want 1", n)
	}

	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, up.host(), 4, 6)})
	s.waitConfig(6, "file", 5*time.Second)
	assertOutcome(t, s.get(up.url("/")), 503, "exhausted", "4")
	if v := s.metric("retry_sidecar_config_revision"); v != 6 {
		t.Errorf("retry_sidecar_config_revision = %v, want 6", v)
	}
}

func TestConfigEndpointAnswersOnlyGETAndWaitsForAConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kubeletWrite(t, dir, map[string]string{"policies.json": "{not json"})
	s := startSidecar(t, "--config-dir="+dir)
	if code, _ := s.config(); code != http.StatusServiceUnavailable {
		t.Fatalf("/config before any configuration: %d, want 503", code)
	}
	resp, err := http.Post("http://"+s.stats+"/config", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST /config: %d, want 405", resp.StatusCode)
	}
}

// apiFixture is a real kube-apiserver with the sidecars' ClusterRole, and a
// credentials directory laid out as the injector's projected volume.
type apiFixture struct {
	cfg *rest.Config
	cs  *kubernetes.Clientset
}

func startAPI(t *testing.T) *apiFixture {
	t.Helper()
	cfg := testenv.Start(t, nil)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(context.Background(), testenv.SidecarClusterRole(t, "retry-operator-sidecar"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &apiFixture{cfg: cfg, cs: cs}
}

// namespace creates ns, with the RoleBinding the manager would create when bind.
func (a *apiFixture) namespace(t *testing.T, ns string, bind bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bind {
		return
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "retry-sidecar", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "retry-operator-sidecar"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}}}
	if _, err := a.cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// credentials writes token, ca.crt and namespace for service account ns/default.
func (a *apiFixture) credentials(t *testing.T, ns string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"token":     testenv.ServiceAccountToken(t, a.cfg, ns, "default"),
		"ca.crt":    string(a.cfg.CAData),
		"namespace": ns,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func (a *apiFixture) putConfigMap(t *testing.T, ns, data string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "retry-policies", Namespace: ns}, Data: map[string]string{"policies.json": data}}
	if _, err := a.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := a.cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestAPIWatch runs sidecars against a real kube-apiserver: an edit of
// retry-policies reaches a sidecar through the watch while its mounted file
// still holds the old revision, and a sidecar whose token may not read the
// ConfigMap follows the mounted file, ready, with one log line and a metric.
func TestAPIWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	w := apiWatchRig{a: startAPI(t), up: newUpstream(t, status(503))}
	t.Run("an edit reaches the sidecar through the API server before the mounted file", w.anEditArrivesThroughTheAPIServer)
	t.Run("without a RoleBinding the sidecar follows the mounted file and stays ready", w.aForbiddenTokenFollowsTheMountedFile)
	t.Run("after an API server restart the watch resumes within 5 s and delivers the edit", w.theWatchResumesAfterARestart)
	// After the case without a RoleBinding: it reuses its namespace.
	t.Run("an unreachable API server is a fallback too", w.anUnreachableAPIServerIsAFallback)
}

// apiWatchRig is the API server and the upstream (503 always) that
// TestAPIWatch's sidecars share.
type apiWatchRig struct {
	a  *apiFixture
	up *upstream
}

// The revisions of TestAPIWatch's renderings: every mounted file starts at
// watchR1, and the edits are watchR2.
const watchR1, watchR2 = 1796083200, 1796083201

// startMounted starts a sidecar of namespace ns that reaches the API server
// at server and whose mounted file (dir) holds revision watchR1 (2 attempts).
func (w apiWatchRig) startMounted(t *testing.T, ns, server string) (s *sidecar, dir string) {
	t.Helper()
	dir = t.TempDir()
	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, w.up.host(), 2, watchR1)})
	return startSidecar(t, "--config-dir="+dir, "--api-credentials-dir="+w.a.credentials(t, ns), "--api-server="+server), dir
}

func (w apiWatchRig) anEditArrivesThroughTheAPIServer(t *testing.T) {
	w.a.namespace(t, "watched", true)
	w.a.putConfigMap(t, "watched", renderedDoc(t, w.up.host(), 2, watchR1))
	s, dir := w.startMounted(t, "watched", w.a.cfg.Host)
	s.waitMetric("retry_sidecar_config_api_up", 1)
	s.waitConfig(watchR1, "api", 5*time.Second)

	edited := time.Now()
	w.a.putConfigMap(t, "watched", renderedDoc(t, w.up.host(), 3, watchR2))
	s.waitConfig(watchR2, "api", 2*time.Second)
	t.Logf("edit to /config revision %d: %s", watchR2, time.Since(edited).Round(time.Millisecond))
	assertOutcome(t, s.get(w.up.url("/")), 503, "exhausted", "3")

	// The kubelet's copy catches up later with the same revision: no change.
	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, w.up.host(), 3, watchR2)})
	time.Sleep(200 * time.Millisecond)
	if _, c := s.config(); c.Revision != watchR2 || c.Source != "api" {
		t.Fatalf("/config = %+v after the file caught up, want revision %d from api", c, watchR2)
	}
	if n := strings.Count(s.logs.String(), "following retry-policies through the API server"); n != 1 {
		t.Errorf("%d log lines about following the API server, want 1", n)
	}

	// Deleting the ConfigMap (its last policy gone) empties the configuration
	// at once, although the file still has revision watchR2.
	if err := w.a.cs.CoreV1().ConfigMaps("watched").Delete(context.Background(), "retry-policies", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitMetric("retry_sidecar_config_upstreams", 0)
	if r := s.get(w.up.url("/")); r.header.Get("X-Retry-Outcome") != "" {
		t.Fatalf("outcome %q after the ConfigMap was deleted, want a plain pass-through", r.header.Get("X-Retry-Outcome"))
	}
}

func (w apiWatchRig) aForbiddenTokenFollowsTheMountedFile(t *testing.T) {
	w.a.namespace(t, "unbound", false)
	w.a.putConfigMap(t, "unbound", renderedDoc(t, w.up.host(), 4, watchR2))
	s, dir := w.startMounted(t, "unbound", w.a.cfg.Host)
	s.waitMetric(`retry_sidecar_config_api_fallbacks_total{reason="forbidden"}`, 1)
	if code, _ := s.adminGet("/readyz"); code != 200 {
		t.Fatalf("readyz %d while the API refuses the token; want 200", code)
	}
	s.waitConfig(watchR1, "file", 2*time.Second)
	assertOutcome(t, s.get(w.up.url("/")), 503, "exhausted", "2")

	kubeletWrite(t, dir, map[string]string{"policies.json": renderedDoc(t, w.up.host(), 3, watchR2)})
	s.waitConfig(watchR2, "file", 5*time.Second)
	assertOutcome(t, s.get(w.up.url("/")), 503, "exhausted", "3")
	time.Sleep(1500 * time.Millisecond) // a few more failed attempts of the watch
	if n := strings.Count(s.logs.String(), "following the mounted file"); n != 1 {
		t.Errorf("%d log lines about the fallback, want 1 (one per state change)", n)
	}
	if v := s.metric("retry_sidecar_config_api_up"); v != 0 {
		t.Errorf("retry_sidecar_config_api_up = %v, want 0", v)
	}
}

func (w apiWatchRig) theWatchResumesAfterARestart(t *testing.T) {
	w.a.namespace(t, "restarted", true)
	w.a.putConfigMap(t, "restarted", renderedDoc(t, w.up.host(), 2, watchR1))
	api, err := url.Parse(w.a.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	front := newRestartableFront(t, api.Host)
	s, _ := w.startMounted(t, "restarted", "https://"+front.addr)
	s.waitMetric("retry_sidecar_config_api_up", 1)
	s.waitConfig(watchR1, "api", 5*time.Second)

	down := time.Now()
	front.stop()
	s.waitMetric("retry_sidecar_config_api_up", 0)
	assertOutcome(t, s.get(w.up.url("/")), 503, "exhausted", "2") // the configuration in force stays
	w.a.putConfigMap(t, "restarted", renderedDoc(t, w.up.host(), 3, watchR2))
	// An outage long enough for a doubling backoff to pass 5 s.
	time.Sleep(time.Until(down.Add(9 * time.Second)))
	front.start(t)
	back := time.Now()
	s.waitConfig(watchR2, "api", 5*time.Second)
	t.Logf("API server away %s; the edit arrived %s after its return", back.Sub(down).Round(100*time.Millisecond), time.Since(back).Round(time.Millisecond))
	assertOutcome(t, s.get(w.up.url("/")), 503, "exhausted", "3")
}

func (w apiWatchRig) anUnreachableAPIServerIsAFallback(t *testing.T) {
	s, _ := w.startMounted(t, "unbound", "https://"+freePort(t))
	s.waitMetric(`retry_sidecar_config_api_fallbacks_total{reason="unreachable"}`, 1)
	s.waitConfig(watchR1, "file", 2*time.Second)
	if code, _ := s.adminGet("/readyz"); code != 200 {
		t.Fatalf("readyz %d while the API server is unreachable; want 200", code)
	}
}

// restartableFront forwards TCP to the API server at backend and can be taken
// away and brought back on the same address: a restart as its clients see it
// (connections cut, then refused, then accepted again).
type restartableFront struct {
	addr, backend string
	mu            sync.Mutex
	ln            net.Listener
	conns         map[net.Conn]bool
}

func newRestartableFront(t *testing.T, backend string) *restartableFront {
	t.Helper()
	f := &restartableFront{backend: backend, conns: map[net.Conn]bool{}}
	f.listen(t, "127.0.0.1:0")
	t.Cleanup(f.stop)
	return f
}

func (f *restartableFront) listen(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.ln, f.addr = ln, ln.Addr().String()
	f.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.forward(c)
		}
	}()
}

func (f *restartableFront) forward(c net.Conn) {
	b, err := net.Dial("tcp", f.backend)
	if err != nil {
		c.Close()
		return
	}
	if !f.track(c, b) {
		return
	}
	go func() { _, _ = io.Copy(b, c); b.Close() }()
	_, _ = io.Copy(c, b)
	c.Close()
}

// track records both ends, or closes them when the front went away meanwhile.
func (f *restartableFront) track(c, b net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln == nil {
		c.Close()
		b.Close()
		return false
	}
	f.conns[c], f.conns[b] = true, true
	return true
}

// stop closes the listener and every connection through it.
func (f *restartableFront) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ln != nil {
		f.ln.Close()
		f.ln = nil
	}
	for c := range f.conns {
		c.Close()
		delete(f.conns, c)
	}
}

// start listens again on the address it had.
func (f *restartableFront) start(t *testing.T) { f.listen(t, f.addr) }
