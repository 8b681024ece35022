package policyset

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/retrydev/retry-operator/internal/gatewayroute"
)

// The version skews a rolling upgrade creates (docs/operations.md#version-skew):
// a sidecar reads what an older manager wrote, and a manager reads the
// ConfigMap an older manager wrote. testdata/policies.v1.json is
// testdata/policies.json as the manager wrote it before durations were parsed
// (version 1): the same policy.

// TestASidecarReadsAnOlderManagersDocument: a version 1 document compiles to
// the same configuration as the version 3 rendering of the same policy.
func TestASidecarReadsAnOlderManagersDocument(t *testing.T) {
	old := readTestdata(t, "policies.v1.json")
	current := readTestdata(t, "policies.json")
	if diff := cmp.Diff(firstUpstreamConfig(t, current), firstUpstreamConfig(t, old)); diff != "" {
		t.Fatalf("version 1 compiles to another config than version 3 (-v3 +v1):\n%s", diff)
	}
	if got := firstUpstreamConfig(t, old); got.Deadline != 10*time.Second || got.Backoff.Base != 100*time.Millisecond || got.RetryAfterMaxWait != 30*time.Second {
		t.Fatalf("durations of version 1 read as deadline %s, backoff.base %s, retryAfter.maxWait %s; want 10s, 100ms, 30s",
			got.Deadline, got.Backoff.Base, got.RetryAfterMaxWait)
	}
}

// TestAManagerReadsAnOlderManagersConfigMap: the manager re-encodes the
// ConfigMap it finds to decide whether its content changed; an older
// manager's version 1 document of the same policies re-encodes to exactly
// the new rendering, so the upgrade keeps the revision (no sidecar reloads).
func TestAManagerReadsAnOlderManagersConfigMap(t *testing.T) {
	doc, err := Unmarshal(readTestdata(t, "policies.v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if want := readTestdata(t, "policies.json"); !bytes.Equal(got, want) {
		t.Fatalf("version 1 re-encoded:\n%s\nwant the version 3 rendering:\n%s", got, want)
	}
}

// TestAVersion2DocumentKeepsItsQuotas: version 2 (quotas, durations as
// strings) is read with its quotas and its durations.
func TestAVersion2DocumentKeepsItsQuotas(t *testing.T) {
	data := `{"version":2,"revision":5,"policies":[{"namespace":"shop","name":"p","generation":1,
	  "upstreams":[{"name":"u","hosts":["a.svc"],"deadline":"1500ms","quotaRef":{"name":"q"}}]}],
	  "quotas":[{"name":"q","requestsPerSecond":1.5,"burst":5,"onStoreLoss":"Deny","store":{"redis":{"address":"r:6379"}}}]}`
	doc, err := Unmarshal([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := doc.Quota("q"); !ok || q.Burst != 5 || doc.Revision != 5 {
		t.Fatalf("quota q = %+v (found %v), revision %d; want burst 5, revision 5", q, ok, doc.Revision)
	}
	cfg, err := ToConfig(doc.Policies[0].Upstreams[0])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Deadline != 1500*time.Millisecond || cfg.Backoff.Max != 10*time.Second {
		t.Fatalf("deadline %s, backoff.max %s; want 1.5s and the default 10s", cfg.Deadline, cfg.Backoff.Max)
	}
}

// TestAVersion3DocumentWrittenByHand: a duration the API could not say is
// refused with its field path; one left out takes the API's default.
func TestAVersion3DocumentWrittenByHand(t *testing.T) {
	tests := map[string]struct {
		upstream     string
		wantDeadline time.Duration
		wantErr      string
	}{
		"every default left out":          {upstream: `{"name":"u","hosts":["u.svc"]}`, wantDeadline: 10 * time.Second},
		"a deadline of one nanosecond":    {upstream: `{"name":"u","hosts":["u.svc"],"deadline":1}`, wantDeadline: time.Nanosecond},
		"a deadline of zero is refused":   {upstream: `{"name":"u","hosts":["u.svc"],"deadline":0}`, wantErr: "deadline: must be a positive duration such as 100ms, 1.5s or 2m (units ns, us, ms, s, m, h) (got 0)"},
		"a negative spread is refused":    {upstream: `{"name":"u","hosts":["u.svc"],"retryAfter":{"spread":-1}}`, wantErr: "retryAfter.spread: must be a positive duration such as 100ms, 1.5s or 2m (units ns, us, ms, s, m, h) (got -1)"},
		"a zero queue timeout is refused": {upstream: `{"name":"u","hosts":["u.svc"],"concurrency":{"maxInFlight":1,"queueTimeout":0}}`, wantErr: "concurrency.queueTimeout: must be a positive duration such as 100ms, 1.5s or 2m (units ns, us, ms, s, m, h) (got 0)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			doc, err := Unmarshal([]byte(`{"version":3,"policies":[{"namespace":"a","name":"b","generation":1,"upstreams":[` + tc.upstream + `]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := ToConfig(doc.Policies[0].Upstreams[0])
			if got := errString(err); got != tc.wantErr {
				t.Fatalf("error = %q, want %q", got, tc.wantErr)
			}
			if cfg.Deadline != tc.wantDeadline {
				t.Fatalf("deadline = %s, want %s", cfg.Deadline, tc.wantDeadline)
			}
		})
	}
}

// TestDurationsSurviveTheAPINotation: formatDuration is the inverse of the
// manager's parse, also below a millisecond (Go writes "µs", the API "us").
func TestDurationsSurviveTheAPINotation(t *testing.T) {
	for _, d := range []time.Duration{time.Nanosecond, 1500 * time.Nanosecond, 1500 * time.Microsecond, 100 * time.Millisecond,
		1500 * time.Millisecond, 61 * time.Minute, 2562047 * time.Hour} {
		back, err := parseDuration("deadline", formatDuration(&d))
		if err != nil || *back != d {
			t.Errorf("%s: formatted %q, parsed back %v (%v)", d, *formatDuration(&d), back, err)
		}
	}
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestTheNextVersionReadsAsTheWrittenOne: the same rendering written as
// version 3 (what the next release writes, docs/operations.md#version-skew)
// and as WrittenVersion reads back to the same document.
func TestTheNextVersionReadsAsTheWrittenOne(t *testing.T) {
	written, err := Unmarshal(readTestdata(t, "policies.json"))
	if err != nil {
		t.Fatal(err)
	}
	next, err := encode(written, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(next, []byte(`"version": 3`)) || !bytes.Contains(next, []byte(`"deadline": 10000000000`)) {
		t.Fatalf("version 3 encoding has no version 3 or no deadline in nanoseconds:\n%s", next)
	}
	read, err := Unmarshal(next)
	if err != nil {
		t.Fatal(err)
	}
	written.Version, read.Version = 0, 0
	if diff := cmp.Diff(written, read); diff != "" {
		t.Fatalf("version 3 reads back to another document (-version 2 +version 3):\n%s", diff)
	}
}

// TestADocumentWithRoutesIsWrittenInItsOwnVersion: route upstreams
// (docs/operations.md#version-skew) raise the written version to 5, which a
// sidecar of the previous release (versions 1 to 4) refuses, keeping its
// configuration; this release reads version 5 back with its routes, and
// refuses a route in an earlier version (no manager writes one).
func TestADocumentWithRoutesIsWrittenInItsOwnVersion(t *testing.T) {
	route := `{"name":"service/shop/payments","hosts":["payments.shop.svc"],"route":{"kind":"HTTPRoute","namespace":"shop","name":"r","rule":0}}`
	plain := `{"name":"payments","hosts":["payments.shop.svc"]}`
	quota := `,"quotas":[{"name":"q","requestsPerSecond":1,"burst":1,"onStoreLoss":"Deny","lease":{"url":"https://m.svc:9445","caBundle":"x"}}]`
	tests := map[string]struct {
		version     int
		upstreams   string
		quotas      string
		wantWritten int
		wantErr     string
	}{
		"a document without routes or quotas is written in version 2": {version: 5, upstreams: plain, wantWritten: 2},
		"a document with a route is written in version 5":             {version: 5, upstreams: route, wantWritten: 5},
		"a document with a route and a quota is written in version 5": {version: 5, upstreams: route + `,{"name":"u","hosts":["u.svc"],"quotaRef":{"name":"q"}}`, quotas: quota, wantWritten: 5},
		"a route in a version 4 document is refused": {version: 4, upstreams: route,
			wantErr: "decoding policies.json: version 4: an upstream has a route, which needs version 5 (no manager writes it)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			data := fmt.Sprintf(`{"version":%d,"revision":7,"policies":[{"namespace":"shop","name":"r","generation":1,"upstreams":[%s]}]%s}`,
				tc.version, tc.upstreams, tc.quotas)
			doc, err := Unmarshal([]byte(data))
			if got := errString(err); got != tc.wantErr {
				t.Fatalf("Unmarshal error = %q, want %q", got, tc.wantErr)
			}
			if err != nil {
				return
			}
			out, err := Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Unmarshal(out)
			if err != nil {
				t.Fatal(err)
			}
			if back.Version != tc.wantWritten {
				t.Fatalf("written in version %d, want %d:\n%s", back.Version, tc.wantWritten, out)
			}
			routes := func(d Document) (out []*gatewayroute.Route) {
				for _, u := range d.Policies[0].Upstreams {
					out = append(out, u.Route)
				}
				return out
			}
			if diff := cmp.Diff(routes(doc), routes(back)); diff != "" {
				t.Fatalf("the upstreams' routes read back to others (-read +written):\n%s", diff)
			}
		})
	}
}
