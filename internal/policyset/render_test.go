package policyset

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// update refreshes golden files. Defined here once for the package: a second
// definition in another _test.go file of this package would panic.
var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestPodShare(t *testing.T) {
	tests := map[string]struct {
		rpm, pods int32
		want      float64
	}{
		"four pods split the quota evenly":           {rpm: 90, pods: 4, want: 22.5},
		"one pod gets the whole quota":               {rpm: 90, pods: 1, want: 90},
		"no ready pod yet gives the whole quota":     {rpm: 90, pods: 0, want: 90},
		"a negative count is treated as no pod":      {rpm: 90, pods: -3, want: 90},
		"a share below one per minute is kept exact": {rpm: 1, pods: 4, want: 0.25},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := PodShare(tc.rpm, tc.pods); got != tc.want {
				t.Fatalf("PodShare(%d, %d) = %v, want %v", tc.rpm, tc.pods, got, tc.want)
			}
		})
	}
}

func TestCompileUpstreamAppliesDefaultsWithoutTouchingInput(t *testing.T) {
	in := v1alpha1.Upstream{Name: "api", Hosts: []string{"api.shop.svc"},
		RateLimit: &v1alpha1.RateLimit{RequestsPerMinute: 90}}
	got := mustRender(t, in, 3)
	if in.MaxAttempts != nil || in.RateLimit.Burst != nil {
		t.Fatalf("input was modified: %+v", in)
	}
	if *got.MaxAttempts != v1alpha1.DefaultMaxAttempts || *got.RateLimit.Burst != v1alpha1.DefaultBurst ||
		*got.Deadline != 10*time.Second || got.PodRequestsPerMinute != 30 {
		t.Fatalf("defaults not applied or share wrong: maxAttempts=%d burst=%d deadline=%s share=%v",
			*got.MaxAttempts, *got.RateLimit.Burst, *got.Deadline, got.PodRequestsPerMinute)
	}
}

// TestPacingIsRenderedWithDefaultsAndReadBack: the sidecar gets both pacing
// fields spelled out, and they reach the compiled policy.
func TestPacingIsRenderedWithDefaultsAndReadBack(t *testing.T) {
	up := mustRender(t, v1alpha1.Upstream{Name: "partner", Hosts: []string{"api.partner.example"},
		Pacing: &v1alpha1.Pacing{RateLimitHeaders: ptr.To(true)}}, 1)
	data, err := Marshal(Document{Policies: []Policy{{Namespace: "shop", Name: "p", Upstreams: []Upstream{up}}}})
	if err != nil {
		t.Fatal(err)
	}
	const want = `"pacing": {
            "rateLimitHeaders": true,
            "holdOnDeferral": false
          }`
	if !bytes.Contains(data, []byte(want)) {
		t.Fatalf("policies.json lacks %s:\n%s", want, data)
	}
	cfg := firstUpstreamConfig(t, data)
	if !cfg.Pacing.RateLimitHeaders || cfg.Pacing.HoldOnDeferral {
		t.Fatalf("compiled pacing = %+v, want rateLimitHeaders only", cfg.Pacing)
	}
	noPacing, _ := ToConfig(mustRender(t, v1alpha1.Upstream{Name: "x", Hosts: []string{"x.svc"}}, 1))
	if noPacing.Pacing.Enabled() {
		t.Fatalf("an upstream without pacing compiled to %+v, want off", noPacing.Pacing)
	}
}

func TestMarshalIsIndependentOfInputOrder(t *testing.T) {
	a := Policy{Namespace: "shop", Name: "a", Generation: 1, Upstreams: []Upstream{mustRender(t, v1alpha1.Upstream{Name: "x", Hosts: []string{"x.svc"}}, 0)}}
	b := Policy{Namespace: "shop", Name: "b", Generation: 2,
		PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"z": "1", "app": "checkout", "m": "2"}},
		Upstreams:   []Upstream{mustRender(t, v1alpha1.Upstream{Name: "y", Hosts: []string{"y.svc"}}, 0)}}
	one, err := Marshal(Document{Policies: []Policy{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // map iteration order differs between runs; the bytes must not
		two, err := Marshal(Document{Policies: []Policy{b, a}})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(one, two) {
			t.Fatalf("output depends on input order:\n%s\n---\n%s", one, two)
		}
	}
	if Hash(one) != Hash(append([]byte(nil), one...)) || len(Hash(one)) != len("sha256:")+16 {
		t.Fatalf("Hash not stable or wrong length: %s", Hash(one))
	}
}

func TestMarshalEmptyDocument(t *testing.T) {
	got, err := Marshal(Document{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"version\": 2,\n  \"revision\": 0,\n  \"policies\": []\n}\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestUnmarshal(t *testing.T) {
	tests := map[string]struct {
		in      string
		wantErr string
	}{
		"a version 1 document is read":       {in: `{"version":1,"policies":[{"namespace":"a","name":"b","generation":1,"upstreams":[]}]}`},
		"a version 2 document is read":       {in: `{"version":2,"policies":[],"quotas":[{"name":"q","requestsPerSecond":1,"burst":1,"onStoreLoss":"Deny","store":{"redis":{"address":"r:6379"}}}]}`},
		"a version 3 document is read":       {in: `{"version":3,"policies":[{"namespace":"a","name":"b","generation":1,"upstreams":[{"name":"u","hosts":["u.svc"],"deadline":2000000000}]}]}`},
		"a newer version is refused":         {in: `{"version":6,"policies":[]}`, wantErr: "decoding policies.json: version 6 is not supported (supported: 1 to 5)"},
		"a document without version refused": {in: `{"policies":[]}`, wantErr: "decoding policies.json: version 0 is not supported (supported: 1 to 5)"},
		"a version 1 duration that does not parse is refused": {
			in:      `{"version":1,"policies":[{"namespace":"a","name":"b","generation":1,"upstreams":[{"name":"u","hosts":["u.svc"],"deadline":"10"}]}]}`,
			wantErr: `decoding policies.json: RetryPolicy a/b: spec.upstreams[0].deadline: must be a positive duration such as 100ms, 1.5s or 2m (units ns, us, ms, s, m, h) (got "10")`},
		"a version 3 duration given as a string is refused": {
			in:      `{"version":3,"policies":[{"namespace":"a","name":"b","generation":1,"upstreams":[{"name":"u","hosts":["u.svc"],"deadline":"10s"}]}]}`,
			wantErr: `decoding policies.json: json: cannot unmarshal string into Go struct field Upstream.policies.upstreams.UpstreamSpec.deadline of type time.Duration`},
		"malformed JSON is refused": {in: `{`, wantErr: "decoding policies.json: unexpected end of JSON input"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Unmarshal([]byte(tc.in))
			if got := errString(err); got != tc.wantErr {
				t.Fatalf("error = %q, want %q", got, tc.wantErr)
			}
		})
	}
}

// TestGoldenRendering pins the exact bytes of a rendered document: the sidecar
// engineer and any external reader of policies.json rely on this shape.
// Refresh with: go test ./internal/policyset -run TestGoldenRendering -update
func TestGoldenRendering(t *testing.T) {
	doc := Document{Revision: 1796083200, Policies: []Policy{{
		Namespace: "shop", Name: "payments", Generation: 3,
		PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "checkout"}},
		Upstreams: []Upstream{mustRender(t, v1alpha1.Upstream{
			Name: "payments-api", Hosts: []string{"payments.shop.svc", "api.partner.example:8443"},
			MaxAttempts:    ptr.To[int32](4),
			IdempotencyKey: &v1alpha1.IdempotencyKey{Header: "Idempotency-Key"},
			RateLimit:      &v1alpha1.RateLimit{RequestsPerMinute: 90, Burst: ptr.To[int32](3)},
		}, 4)},
	}}}
	got, err := Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, filepath.Join("testdata", "policies.json"), got)
}

func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale (run with -update to refresh); got:\n%s", path, got)
	}
}

// mustRender is RenderUpstream of a valid upstream.
func mustRender(t testing.TB, u v1alpha1.Upstream, readyPods int32) Upstream {
	t.Helper()
	out, err := RenderUpstream(u, readyPods)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestPodBurst(t *testing.T) {
	tests := map[string]struct {
		burst, pods, want int32
	}{
		"a burst of 3 over 4 pods rounds up to 1 each":   {burst: 3, pods: 4, want: 1},
		"a burst of 5 over 2 pods rounds up to 3 each":   {burst: 5, pods: 2, want: 3},
		"a burst of 10 over 5 pods is exactly 2 each":    {burst: 10, pods: 5, want: 2},
		"no ready pod yet gives the whole burst":         {burst: 3, pods: 0, want: 3},
		"a burst of 1 over 100 pods is still 1 each":     {burst: 1, pods: 100, want: 1},
		"one pod going away raises 3 over 3 to 3 over 2": {burst: 3, pods: 2, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := PodBurst(tc.burst, tc.pods); got != tc.want {
				t.Fatalf("PodBurst(%d, %d) = %d, want %d", tc.burst, tc.pods, got, tc.want)
			}
		})
	}
}

func TestNextRevision(t *testing.T) {
	const t0 = 1796083200
	tests := map[string]struct {
		previous int64
		now      int64
		want     int64
	}{
		"the first rendering takes the clock":                  {previous: 0, now: t0, want: t0},
		"a second edit within the same second adds one":        {previous: t0, now: t0, want: t0 + 1},
		"a later edit takes the clock again":                   {previous: t0 + 1, now: t0 + 60, want: t0 + 60},
		"a clock that stepped back still gives a higher value": {previous: t0 + 60, now: t0, want: t0 + 61},
		"a small hand-written revision is overtaken by time":   {previous: 7, now: t0, want: t0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := NextRevision(tc.previous, time.Unix(tc.now, 0)); got != tc.want {
				t.Fatalf("NextRevision(%d, %d) = %d, want %d", tc.previous, tc.now, got, tc.want)
			}
		})
	}
}

func TestPeekRevision(t *testing.T) {
	tests := map[string]struct {
		data    string
		want    int64
		wantErr bool
	}{
		"a rendered document":                      {data: `{"version":1,"revision":42,"policies":[]}`, want: 42},
		"a document without a revision is 0":       {data: `{"version":1,"policies":[]}`, want: 0},
		"garbage is an error":                      {data: `{"version":`, wantErr: true},
		"a revision of the wrong type is an error": {data: `{"revision":"42"}`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := PeekRevision([]byte(tc.data))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("PeekRevision(%s) = %d, %v; want %d, error %v", tc.data, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// An empty statusCodes or replayableMethods means "none": the ConfigMap keeps
// the empty list, so the sidecar does not fill in the defaults.
func TestEmptyListsSurviveTheDocument(t *testing.T) {
	up := mustRender(t, v1alpha1.Upstream{Name: "x", Hosts: []string{"x.svc"},
		RetryOn: &v1alpha1.RetryOn{StatusCodes: []v1alpha1.StatusCode{}}, ReplayableMethods: []string{},
		IdempotencyKey: &v1alpha1.IdempotencyKey{Header: "Idempotency-Key"}}, 1)
	data, err := Marshal(Document{Policies: []Policy{{Namespace: "shop", Name: "p", Upstreams: []Upstream{up}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"statusCodes": []`, `"replayableMethods": []`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("policies.json lacks %s:\n%s", want, data)
		}
	}
	cfg := firstUpstreamConfig(t, data)
	if len(cfg.RetryOnStatus) != 0 || len(cfg.ReplayableMethods) != 0 {
		t.Fatalf("the sidecar's config retries %v and replays %v; want neither", cfg.RetryOnStatus, cfg.ReplayableMethods)
	}
}

// firstUpstreamConfig reads policies.json as a sidecar does and returns the
// configuration of the first policy's first upstream.
func firstUpstreamConfig(t *testing.T, data []byte) retrypolicy.Config {
	t.Helper()
	doc, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ToConfig(doc.Policies[0].Upstreams[0])
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
