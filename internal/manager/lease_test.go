package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/leaseclient"
	"github.com/retrydev/retry-operator/internal/quota/leaseserver"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/internal/quota/storeadmin"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// leaseQuota creates a SharedQuota of 100/s, burst 20, on a new
// redis-server with an admin password, for the namespaces labelled
// team=<team>, and waits until it is Ready and its store reachable.
func (h *harness) leaseQuota(t *testing.T, name, team string) (*v1alpha1.SharedQuota, *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	store := redistest.Start(t, redistest.WithPassword(name+"-pw"))
	must(t, h.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: name},
		Data: map[string][]byte{storeadmin.SecretPasswordKey: []byte(name + "-pw")}}))
	q := &v1alpha1.SharedQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SharedQuotaSpec{
		RequestsPerSecond: ptr.To[int32](100), Burst: ptr.To[int32](20), OnStoreLoss: ptr.To(v1alpha1.StoreLossLastShare),
		Consumers: &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}},
		Store:     v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: store.Addr, CredentialsSecretRef: &v1alpha1.SecretRef{Name: name}}},
	}}
	must(t, h.c.Create(ctx, q))
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), q) })
	h.waitQuota(t, name, func(st v1alpha1.SharedQuotaStatus) error {
		return quotaConditions(st, "True/Valid", "True/Reachable", "")
	})
	return q, store
}

// podToken creates pod name (and its service account) in ns and returns a
// token the TokenRequest API binds to that pod, for audience (the quota's
// when empty), or bound to no object when unbound: what the kubelet projects
// into the sidecar.
func (h *harness) podToken(t *testing.T, ns, name, audience string, unbound bool) string {
	t.Helper()
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(h.cfg)
	must(t, err)
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		must(t, err)
	}
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		pod, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{{Name: "app", Image: "app"}}}}, metav1.CreateOptions{})
		must(t, err)
	}
	spec := authenticationv1.TokenRequestSpec{Audiences: []string{v1alpha1.QuotaTokenAudience}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	if unbound {
		spec.BoundObjectRef = nil
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	must(t, err)
	return tr.Status.Token
}

// leaseStore is the sidecar's store of the lease endpoint, with token.
func (h *harness) leaseStore(t *testing.T, token string) *leaseclient.Store {
	t.Helper()
	file := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(file, []byte(token), 0o600))
	s, err := leaseclient.New(leaseclient.Options{URL: h.lease.URL, Address: h.lease.Address, CABundle: h.leaseCA, TokenFile: file})
	must(t, err)
	return s
}

// leaseHTTP is an HTTP client of the lease endpoint, kept alive across calls.
var leaseHTTP = sync.OnceValue(func() *http.Client { return &http.Client{Timeout: 10 * time.Second} })

// post sends body to the lease endpoint of quota name with token, as a
// hostile pod would, and returns the status code.
func (h *harness) post(t *testing.T, name, token, body string) int {
	t.Helper()
	c := leaseHTTP()
	if c.Transport == nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(h.leaseCA)
		c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	req, err := http.NewRequest(http.MethodPost, h.lease.URL+v1alpha1.QuotaLeasePath(name), strings.NewReader(body))
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	must(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// storedPods are the pods the store records for quota name.
func storedPods(t *testing.T, store *redistest.Server, name string) []string {
	t.Helper()
	s := redisstore.New(redisstore.Options{Address: store.Addr, Password: store.Password, KeyPrefix: v1alpha1.QuotaKeys})
	defer s.Close()
	pods, err := s.Pods(context.Background(), quota.Spec{Name: name})
	must(t, err)
	return pods
}

func lease(s *leaseclient.Store, spec quota.Spec) (quota.LeaseReply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Lease(ctx, spec, quota.LeaseRequest{Want: 1000, Demand: 10})
}

// testQuotaLease: the endpoint verifies each pod's projected token with a
// real TokenReview and takes the namespace and pod from it.
func (h *harness) testQuotaLease(t *testing.T) {
	q, store := h.leaseQuota(t, "lease-partner", "lease")
	a := h.namespace(t, "lease-a", map[string]string{"team": "lease"})
	b := h.namespace(t, "lease-b", map[string]string{"team": "other"})
	// The rate, burst and onStoreLoss the client claims are not the quota's:
	// the endpoint uses the SharedQuota's.
	claimed := quota.Spec{Name: q.Name, RequestsPerSecond: 1e6, Burst: 1e6, OnStoreLoss: quota.StoreLossLastShare}

	t.Run("a pod of a consumer leases, as itself, at the quota's rate and burst", func(t *testing.T) {
		reply, err := lease(h.leaseStore(t, h.podToken(t, a, "app", "", false)), claimed)
		// 100/s with burst 20: send times 10 ms apart, each good for 190 ms;
		// the pod alone draws, so its first lease gets the whole rate for the
		// next 100 ms, 10 of the 1,000 asked for, from now.
		want := quota.LeaseReply{Granted: 10, Spacing: 10 * time.Millisecond, Lateness: 190 * time.Millisecond, Rate: 100, FleetDemand: 10, Pods: 1}
		if err != nil || reply != want {
			t.Fatalf("Lease of 1000 send times = %+v, %v;\nwant the quota's %+v", reply, err, want)
		}
		if pods := storedPods(t, store, q.Name); !slices.Equal(pods, []string{a + "/app"}) {
			t.Errorf("the store records %v, want [%s/app]: the token's namespace and pod", pods, a)
		}
	})
	t.Run("a pod of a namespace outside the consumers is refused (403), and its client revoked whatever onStoreLoss says", func(t *testing.T) {
		s := h.leaseStore(t, h.podToken(t, b, "app", "", false))
		if _, err := lease(s, claimed); !errors.Is(err, quota.ErrRevoked) {
			t.Fatalf("Lease = %v, want ErrRevoked", err)
		}
		c := quota.New(claimed, s, clock.Real{}, quota.Pod{Name: "b"}, nil, quota.Observer{})
		defer c.Close()
		_ = c.Start()
		if st := c.Stats().State; st != quota.StateRevoked {
			t.Errorf("client state = %s, want revoked", st)
		}
		if _, v := c.TakeAt(time.Now(), 0, 0); v != limits.QuotaDenied {
			t.Errorf("an attempt of the revoked client: verdict %d, want denied", v)
		}
		if code := h.post(t, q.Name, h.podToken(t, b, "app", "", false), `{"want":1}`); code != http.StatusForbidden {
			t.Errorf("POST = %d, want 403", code)
		}
	})
	t.Run("tokens that are not a consumer pod's for the quota's audience are refused (401)", func(t *testing.T) {
		h.refusesTokensOfNoConsumerPod(t, q, a)
	})
	t.Run("a namespace or pod in the body is refused (400); the store records only the token's", func(t *testing.T) {
		token := h.podToken(t, a, "app", "", false)
		for _, body := range []string{`{"want":1,"namespace":"` + b + `"}`, `{"want":1,"pod":"other"}`, `{"want":1,"Namespace":"x"}`} {
			if code := h.post(t, q.Name, token, body); code != http.StatusBadRequest {
				t.Errorf("POST %s = %d, want 400", body, code)
			}
		}
		if pods := storedPods(t, store, q.Name); !slices.Equal(pods, []string{a + "/app"}) {
			t.Errorf("the store records %v, want [%s/app]", pods, a)
		}
	})
	t.Run("a flood of lease calls from one pod is answered 429 beyond 20 a second", func(t *testing.T) {
		h.rateLimitsLeaseCallsOfOnePod(t, q, a)
	})
}

// refusesTokensOfNoConsumerPod posts a lease of q with tokens that are not
// a pod's of namespace a for the quota's audience: each is refused with 401.
func (h *harness) refusesTokensOfNoConsumerPod(t *testing.T, q *v1alpha1.SharedQuota, a string) {
	enc := base64.RawURLEncoding.EncodeToString
	forged := enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"exp":4102444800,"aud":["quota.retry.dev"],"sub":"system:serviceaccount:`+a+`:app"}`)) + "." + enc([]byte("sig"))
	for name, token := range map[string]string{
		"garbage":                             "garbage",
		"a forged JWT":                        forged,
		"the pod's token for the API server":  h.podToken(t, a, "app", "https://kubernetes.default.svc.cluster.local", false),
		"a service account's token of no pod": h.podToken(t, a, "app", "", true),
		"the token of a pod that was deleted": h.deletedPodToken(t, a),
	} {
		if code := h.post(t, q.Name, token, `{"want":1}`); code != http.StatusUnauthorized {
			t.Errorf("%s: POST = %d, want 401", name, code)
		}
	}
}

// rateLimitsLeaseCallsOfOnePod posts 60 leases of q at once from one pod of
// namespace a: beyond the pod's burst and rate they are answered 429.
func (h *harness) rateLimitsLeaseCallsOfOnePod(t *testing.T, q *v1alpha1.SharedQuota, a string) {
	token := h.podToken(t, a, "flood", "", false)
	count := map[int]int{}
	start := time.Now()
	for range 60 {
		count[h.post(t, q.Name, token, `{"want":0}`)]++
	}
	elapsed := time.Since(start)
	// Burst 20, then 20 a second: the calls answered 200 are bounded by
	// the time the 60 took.
	most := leaseserver.PodBurst + int(math.Ceil(leaseserver.PodRate*elapsed.Seconds()))
	if count[http.StatusOK] > most || count[http.StatusTooManyRequests] == 0 || count[http.StatusOK]+count[http.StatusTooManyRequests] != 60 {
		t.Errorf("60 calls in %s: %v; want at most %d answered 200, the others 429", elapsed, count, most)
	}
	t.Logf("60 calls in %s: %d answered 200, %d 429", elapsed.Round(time.Millisecond), count[http.StatusOK], count[http.StatusTooManyRequests])
}

// deletedPodToken is a token bound to a pod of ns that no longer exists.
func (h *harness) deletedPodToken(t *testing.T, ns string) string {
	t.Helper()
	token := h.podToken(t, ns, "gone", "", false)
	cs, err := kubernetes.NewForConfig(h.cfg)
	must(t, err)
	must(t, cs.CoreV1().Pods(ns).Delete(context.Background(), "gone", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	polltest.Until(t, 10*time.Second, func() error {
		if _, err := cs.CoreV1().Pods(ns).Get(context.Background(), "gone", metav1.GetOptions{}); err == nil {
			return errors.New("pod gone still exists")
		}
		return nil
	})
	return token
}

// testQuotaRevoked: a namespace relabelled out of the consumers is refused
// by its next lease (the endpoint reads the namespace's labels from the
// manager's cache), which makes its client deny at once and the store forget
// its pods, so the other namespace's next lease sees a fleet without them.
func (h *harness) testQuotaRevoked(t *testing.T) {
	q, store := h.leaseQuota(t, "revoke-partner", "revoke")
	a := h.namespace(t, "revoke-a", map[string]string{"team": "revoke"})
	b := h.namespace(t, "revoke-b", map[string]string{"team": "revoke"})
	spec := quota.Spec{Name: q.Name, RequestsPerSecond: 100, Burst: 20, OnStoreLoss: quota.StoreLossLastShare}
	clientOf := func(ns string, obs quota.Observer) *quota.Client {
		c := quota.New(spec, h.leaseStore(t, h.podToken(t, ns, "app", "", false)), clock.Real{}, quota.Pod{Namespace: ns, Name: "app"}, nil, obs)
		t.Cleanup(c.Close)
		must(t, c.Start())
		return c
	}
	stay := clientOf(a, quota.Observer{})
	leave := clientOf(b, quota.Observer{})
	busy := func(c *quota.Client) { c.TakeAt(time.Now(), 0, 0) } // demand keeps it leasing every interval
	polltest.Until(t, 10*time.Second, func() error {
		busy(stay)
		busy(leave)
		if pods := storedPods(t, store, q.Name); !slices.Equal(pods, []string{a + "/app", b + "/app"}) {
			return fmt.Errorf("pods %v, want both namespaces'", pods)
		}
		return nil
	})

	var ns corev1.Namespace
	must(t, h.c.Get(context.Background(), types.NamespacedName{Name: b}, &ns))
	ns.Labels["team"] = "elsewhere"
	must(t, h.c.Update(context.Background(), &ns))
	relabelled := time.Now()
	// The promise is one lease interval (100 ms) after the manager's cache
	// has the new labels; a loaded machine gets 5 s.
	polltest.Until(t, 5*time.Second, func() error {
		busy(stay)
		busy(leave)
		if st := leave.Stats().State; st != quota.StateRevoked {
			return fmt.Errorf("the relabelled namespace's client is %s, want revoked", st)
		}
		return nil
	})
	revokedAfter := time.Since(relabelled)
	if _, v := leave.TakeAt(time.Now(), 0, 0); v != limits.QuotaDenied {
		t.Errorf("an attempt of the revoked namespace: verdict %d, want denied (onStoreLoss LastShare does not apply)", v)
	}
	if pods := storedPods(t, store, q.Name); !slices.Equal(pods, []string{a + "/app"}) {
		t.Errorf("pods once revoked: %v, want [%s/app]: the revoked namespace's share goes back at once", pods, a)
	}
	if st := stay.Stats().State; st != quota.StateReachable {
		t.Errorf("the remaining namespace's client is %s, want reachable", st)
	}
	t.Logf("revoked %s after the relabel", revokedAfter.Round(time.Millisecond))
}

// testNoTenantAddress: a tenant writes the Secret earlier releases used, with
// the annotation that recorded the stores its namespace's user lived on,
// naming an address of its own. The manager reads no Secret outside its
// namespace and dials no address a tenant names: the listener there sees no
// connection after two reconciles of the namespace. The users earlier
// releases created on a store are deleted once its quota is reconciled.
func (h *harness) testNoTenantAddress(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	var dialled atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()

	ns := h.namespace(t, "tenant-trap", map[string]string{"team": "trap"})
	must(t, h.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v1alpha1.LegacyQuotaCredentialsSecretName,
		Annotations: map[string]string{"retry.dev/quota-stores": fmt.Sprintf(`[{"address":%q,"credentialsSecretRef":{"name":"trap-partner"}}]`, ln.Addr().String())}},
		StringData: map[string]string{"credentials": "username: retry-operator:ns:" + ns + "\npassword: x\n"}}))
	// A user an earlier release created for some namespace, on the store of
	// the quota below (created before the quota, so its first check sees it).
	store := redistest.Start(t, redistest.WithPassword("trap-partner-pw"))
	must(t, store.Client().Do(ctx, "ACL", "SETUSER", v1alpha1.LegacyQuotaUserPrefix+"old-shop", "on", ">pw", "~*", "+@all").Err())
	must(t, h.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNamespace, Name: "trap-partner"},
		Data: map[string][]byte{storeadmin.SecretPasswordKey: []byte("trap-partner-pw")}}))
	q := &v1alpha1.SharedQuota{ObjectMeta: metav1.ObjectMeta{Name: "trap-partner"}, Spec: v1alpha1.SharedQuotaSpec{
		RequestsPerSecond: ptr.To[int32](10),
		Consumers:         &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "trap"}}},
		Store:             v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: store.Addr, CredentialsSecretRef: &v1alpha1.SecretRef{Name: "trap-partner"}}},
	}}
	must(t, h.c.Create(ctx, q))
	t.Cleanup(func() { _ = h.c.Delete(context.Background(), q) })

	partner := v1alpha1.Upstream{Name: "partner", Hosts: []string{"api.partner.example"}, QuotaRef: &v1alpha1.QuotaRef{Name: q.Name}}
	h.createPolicy(t, ns, "first", nil, partner)
	h.waitAcceptedMessage(t, ns, "first", metav1.ConditionTrue, v1alpha1.ReasonValid, "1 upstream(s) accepted")
	second := partner
	second.Name, second.Hosts = "second", []string{"api2.partner.example"}
	h.createPolicy(t, ns, "second", nil, second)
	h.waitAcceptedMessage(t, ns, "second", metav1.ConditionTrue, v1alpha1.ReasonValid, "1 upstream(s) accepted")
	if n := dialled.Load(); n != 0 {
		t.Errorf("the manager opened %d connection(s) to the address a tenant's Secret names, want 0", n)
	}

	polltest.Until(t, 10*time.Second, func() error {
		users, err := store.Client().Do(ctx, "ACL", "USERS").StringSlice()
		if err != nil {
			return err
		}
		if slices.ContainsFunc(users, func(u string) bool { return strings.HasPrefix(u, v1alpha1.LegacyQuotaUserPrefix) }) {
			return fmt.Errorf("users %v: the per-namespace user of an earlier release is still there", users)
		}
		return nil
	})
}
