package leaseserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/quota"
	"github.com/retrydev/retry-operator/internal/quota/leaseserver"
	"github.com/retrydev/retry-operator/internal/quota/redisstore"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
)

// The tokens of the tests: two pods of namespace shop (a consumer of the
// quota partner), one of search (not a consumer) and one of a namespace that
// does not exist.
var tokens = leaseserver.StaticTokens{
	"tok-shop-a":  {Namespace: "shop", Pod: "a", PodUID: "uid-shop-a"},
	"tok-shop-b":  {Namespace: "shop", Pod: "b", PodUID: "uid-shop-b"},
	"tok-search":  {Namespace: "search", Pod: "c", PodUID: "uid-search-c"},
	"tok-deleted": {Namespace: "gone", Pod: "d", PodUID: "uid-gone-d"},
}

// partner is a quota of 10/s, burst 5, for the namespaces labelled
// team=payments.
func partner(addr string) *v1alpha1.SharedQuota {
	q := &v1alpha1.SharedQuota{Spec: v1alpha1.SharedQuotaSpec{
		RequestsPerSecond: ptr.To[int32](10), Burst: ptr.To[int32](5), Concurrency: ptr.To[int32](2),
		Consumers: &v1alpha1.QuotaConsumers{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}},
		Store:     v1alpha1.QuotaStore{Redis: v1alpha1.RedisStore{Address: addr}},
	}}
	q.Name = "partner"
	return q
}

// endpoint is a lease endpoint over a real redis-server, served over HTTPS
// on loopback, and a client that trusts its certificate.
type endpoint struct {
	url     string
	client  *http.Client
	store   *redisstore.Store
	quotas  leaseserver.StaticQuotas
	clock   *fixedClock
	forgets *int
}

type fixedClock struct{ t time.Time }

func (c *fixedClock) now() time.Time { return c.t }

// countingStore counts Forget calls.
type countingStore struct {
	*redisstore.Store
	forgets *int
}

func (s countingStore) Forget(ctx context.Context, spec quota.Spec, ns string) error {
	*s.forgets++
	return s.Store.Forget(ctx, spec, ns)
}

func startEndpoint(t *testing.T) *endpoint {
	t.Helper()
	srv := redistest.Start(t)
	store := redisstore.New(redisstore.Options{Address: srv.Addr, KeyPrefix: v1alpha1.QuotaKeys})
	t.Cleanup(func() { store.Close() })
	e := &endpoint{store: store, clock: &fixedClock{t: time.Now()}, forgets: new(int),
		quotas: leaseserver.StaticQuotas{
			Quotas:     map[string]*v1alpha1.SharedQuota{"partner": partner(srv.Addr)},
			Namespaces: map[string]map[string]string{"shop": {"team": "payments"}, "search": {"team": "search"}},
		}}
	stores := leaseserver.StoresFunc(func(context.Context, v1alpha1.RedisStore) (leaseserver.Store, error) {
		return countingStore{Store: store, forgets: e.forgets}, nil
	})
	h := leaseserver.New(tokens, e.quotas, stores, logr.Discard(), e.clock.now)
	ts := httptest.NewTLSServer(h)
	t.Cleanup(ts.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	e.url = ts.URL
	e.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return e
}

// call sends one request and returns its status and Retry-After.
func (e *endpoint) call(t *testing.T, method, path, token, body string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), b.Bytes()
}

func TestTheEndpointAnswersEachRequestWithItsStatus(t *testing.T) {
	e := startEndpoint(t)
	lease := v1alpha1.QuotaLeasePath("partner")
	for name, tc := range map[string]struct {
		method, path, token, body string
		want                      int
	}{
		"a consumer's pod leases":                              {path: lease, token: "tok-shop-a", body: `{"want":2,"due":1,"demand":3}`, want: 200},
		"no token is 401":                                      {path: lease, body: `{"want":1}`, want: 401},
		"a token no one issued is 401":                         {path: lease, token: "forged", body: `{"want":1}`, want: 401},
		"a pod of a namespace the quota does not admit is 403": {path: lease, token: "tok-search", body: `{"want":1}`, want: 403},
		"a pod of a namespace that no longer exists is 403":    {path: lease, token: "tok-deleted", body: `{"want":1}`, want: 403},
		"a quota that does not exist is 403":                   {path: v1alpha1.QuotaLeasePath("someone-else"), token: "tok-shop-a", body: `{"want":1}`, want: 403},
		"a body naming a namespace is 400 (it is the token's)": {path: lease, token: "tok-shop-a", body: `{"want":1,"namespace":"search"}`, want: 400},
		"a body naming a pod is 400 (it is the token's)":       {path: lease, token: "tok-shop-a", body: `{"want":1,"pod":"c"}`, want: 400},
		"a body that is not JSON is 400":                       {path: lease, token: "tok-shop-a", body: `want=1`, want: 400},
		"two lease requests in one body are 400":               {path: lease, token: "tok-shop-a", body: `{"want":1}{"want":1}`, want: 400},
		"a number JSON cannot hold as an int64 is 400":         {path: lease, token: "tok-shop-a", body: `{"want":1e30}`, want: 400},
		"a body over 4 KiB is 413":                             {path: lease, token: "tok-shop-a", body: `{"want":1,"demand":1` + strings.Repeat("0", 5000) + `}`, want: 413},
		"GET is 405":                                           {method: http.MethodGet, path: lease, token: "tok-shop-a", want: 405},
		"another path is 404":                                  {path: "/v1/quotas/partner", token: "tok-shop-a", body: `{}`, want: 404},
		"a token is checked before the body is read":           {path: lease, token: "forged", body: `garbage`, want: 401},
	} {
		t.Run(name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			if code, _, body := e.call(t, method, tc.path, tc.token, tc.body); code != tc.want {
				t.Errorf("%s %s = %d (%s), want %d", method, tc.path, code, body, tc.want)
			}
		})
	}
}

func TestThePodIsTheTokensNeverTheRequests(t *testing.T) {
	e := startEndpoint(t)
	code, _, body := e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), "tok-shop-a", `{"want":3,"demand":4,"slots":1}`)
	if code != 200 {
		t.Fatalf("lease = %d (%s), want 200", code, body)
	}
	var reply quota.LeaseReply
	if err := json.Unmarshal(body, &reply); err != nil {
		t.Fatal(err)
	}
	// The quota's 10/s with burst 5: send times 100 ms apart, each good for
	// 400 ms; a pod's first lease gets its share (all of the rate: it alone
	// draws) for the next 100 ms, one send time, from now.
	want := quota.LeaseReply{Granted: 1, Spacing: 100 * time.Millisecond, Lateness: 400 * time.Millisecond, Rate: 10,
		Slots: 1, FleetDemand: 4, Pods: 1}
	if reply != want {
		t.Errorf("reply = %+v,\nwant %+v", reply, want)
	}
	if pods := e.pods(t); !slices.Equal(pods, []string{"shop/a"}) {
		t.Errorf("the store records pods %v, want [shop/a]: the namespace and pod of the token", pods)
	}
}

// pods are the pods the store records for partner.
func (e *endpoint) pods(t *testing.T) []string {
	t.Helper()
	pods, err := e.store.Pods(t.Context(), quota.Spec{Name: "partner"})
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func TestAFloodIsLimitedPerPod(t *testing.T) {
	e := startEndpoint(t) // a clock that stands still: no call rate refills
	ok, limited := 0, 0
	for range leaseserver.PodBurst + 5 {
		switch code, retryAfter, body := e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), "tok-shop-a", `{"want":0}`); code {
		case 200:
			ok++
		case 429:
			limited++
			if retryAfter != "1" {
				t.Errorf("429 with Retry-After %q, want 1", retryAfter)
			}
		default:
			t.Fatalf("lease = %d (%s), want 200 or 429", code, body)
		}
	}
	if ok != leaseserver.PodBurst || limited != 5 {
		t.Errorf("%d calls at once: %d answered 200 and %d 429, want %d and 5", leaseserver.PodBurst+5, ok, limited, leaseserver.PodBurst)
	}
	if code, _, _ := e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), "tok-shop-b", `{"want":0}`); code != 200 {
		t.Errorf("another pod of the namespace = %d, want 200: the bound is per pod", code)
	}
	e.clock.t = e.clock.t.Add(time.Second)
	if code, _, _ := e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), "tok-shop-a", `{"want":0}`); code != 200 {
		t.Errorf("the flooding pod a second later = %d, want 200", code)
	}
}

func TestANamespaceLeftOutIsForgottenAtOnce(t *testing.T) {
	e := startEndpoint(t)
	for _, tok := range []string{"tok-shop-a", "tok-shop-b"} {
		if code, _, body := e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), tok, `{"want":1,"demand":5}`); code != 200 {
			t.Fatalf("lease as %s = %d (%s), want 200", tok, code, body)
		}
	}
	if pods := e.pods(t); !slices.Equal(pods, []string{"shop/a", "shop/b"}) {
		t.Fatalf("pods before = %v, want [shop/a shop/b]", pods)
	}
	e.quotas.Namespaces["shop"]["team"] = "search" // relabelled out of the consumers
	if code, _, _ := e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), "tok-shop-a", `{"want":1,"demand":5}`); code != 403 {
		t.Fatalf("lease after the relabel = %d, want 403", code)
	}
	if pods := e.pods(t); len(pods) != 0 {
		t.Errorf("pods after the refusal = %v, want none: the namespace's share goes back to the others", pods)
	}
	for range 5 {
		e.call(t, http.MethodPost, v1alpha1.QuotaLeasePath("partner"), "tok-shop-b", `{"want":1}`)
	}
	if *e.forgets != 1 {
		t.Errorf("6 refused calls within a second forgot the namespace %d times, want 1", *e.forgets)
	}
}

func TestClampBoundsEveryNumber(t *testing.T) {
	now := time.Unix(1796083200, 0)
	spec := quota.Spec{Name: "q", RequestsPerSecond: 20, Burst: 10, Concurrency: 3}
	for name, tc := range map[string]struct {
		in, want quota.LeaseRequest
	}{
		"an honest request is left as it is": {
			in:   quota.LeaseRequest{Want: 4, Due: 2, Demand: 35.5, Slots: 2, InUse: 1, Hold: now.Add(time.Minute)},
			want: quota.LeaseRequest{Want: 4, Due: 2, Demand: 35.5, Slots: 2, InUse: 1, Hold: now.Add(time.Minute)}},
		"huge asks are cut to what one lease grants (300 ms of the rate and one), demand to 1000 × the rate, slots to the concurrency": {
			in:   quota.LeaseRequest{Want: 1 << 40, Due: 1 << 40, Demand: 1e300, Slots: 1 << 40, InUse: 1 << 40},
			want: quota.LeaseRequest{Want: 7, Due: 7, Demand: 20000, Slots: 3, InUse: 3}},
		"more due than wanted is as many as wanted": {
			in:   quota.LeaseRequest{Want: 3, Due: 5},
			want: quota.LeaseRequest{Want: 3, Due: 3}},
		"negative numbers are zero": {
			in:   quota.LeaseRequest{Want: -1, Due: -5, Demand: -3, Slots: -1, InUse: -1},
			want: quota.LeaseRequest{}},
		"a hold in the past holds nothing": {
			in:   quota.LeaseRequest{Hold: now.Add(-time.Second)},
			want: quota.LeaseRequest{}},
		"a hold of a year is a day": {
			in:   quota.LeaseRequest{Hold: now.Add(365 * 24 * time.Hour)},
			want: quota.LeaseRequest{Hold: now.Add(leaseserver.MaxHold)}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := leaseserver.Clamp(tc.in, spec, now); got != tc.want {
				t.Errorf("Clamp = %+v, want %+v", got, tc.want)
			}
		})
	}
}
