package main_test

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrydev/retry-operator/internal/testing/otlpreceiver"
	"github.com/retrydev/retry-operator/internal/testing/redistest"
)

// A request that waits for admission has one retry.wait event on its SERVER
// span per gate that made it wait, named by the gate: rate_limit for a start
// token of the policy's rateLimit, quota for a token of its SharedQuota (on
// Debian's redis-server), queue for a slot of its concurrency gate. The first
// request, admitted at once, has none (but may wait for the quota's first
// lease).
func TestTracingAdmissionWaitsNameTheirGate(t *testing.T) {
	t.Parallel()
	for name, tc := range admissionWaitCases {
		t.Run("waiting for "+name, func(t *testing.T) {
			t.Parallel()
			col := startCollector(t, "http/protobuf", nil)
			release := make(chan struct{})
			up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					<-release // the first request holds its slot until the second waits
				}
			})
			var once sync.Once
			releaseFirst := func() { once.Do(func() { close(release) }) }
			t.Cleanup(releaseFirst) // before the upstream closes, should the test stop early
			s := startSidecarEnv(t, col.env, "--policy-file="+tc.policy(t, up.host()))
			if tc.reason == "quota" {
				s.waitMetric(`retry_sidecar_quota_store_state{quota="partner",state="reachable"}`, 1)
			}
			traces := []string{"11111111111111111111111111111111", "22222222222222222222222222222222"}
			results := sendTheSecondWhileTheFirstHolds(t, s, up, traces)
			if tc.reason == "queue" {
				s.waitMetric(`retry_sidecar_queued_requests{upstream="up"}`, 1)
			}
			releaseFirst()
			for _, ch := range results {
				assertOutcome(t, <-ch, 200, "success", "1")
			}

			spans := col.waitSpans(t, 4)
			t.Logf("the collector received:\n%s", otlpreceiver.Tree(spans))
			for i, trace := range traces {
				reasons := serverSpanWaitReasons(t, spans, trace, i+1)
				want := [][]string{nil, {tc.reason}}[i]
				if i == 0 && tc.firstMayWait && slices.Equal(reasons, []string{tc.reason}) {
					want = reasons
				}
				if !slices.Equal(reasons, want) {
					t.Errorf("request %d: retry.wait reasons %q, want %q", i+1, reasons, want)
				}
			}
		})
	}
}

// admissionWaitCase is a policy with one admission gate, and the reason its
// wait is named by.
type admissionWaitCase struct {
	policy func(t *testing.T, host string) string
	reason string
	// firstMayWait: the first request may wait for the quota's first
	// lease (the client leases as demand comes).
	firstMayWait bool
}

var admissionWaitCases = map[string]admissionWaitCase{
	"a start token of the rateLimit": {reason: "rate_limit", policy: func(t *testing.T, host string) string {
		return policyFile(t, host, fields("deadline: 20s", "rateLimit: {requestsPerMinute: 120, burst: 1}")...)
	}},
	"a token of the SharedQuota": {reason: "quota", firstMayWait: true, policy: func(t *testing.T, host string) string {
		return quotaFile(t, host, redistest.Start(t).Addr, 2, 1, fields("deadline: 20s")...)
	}},
	"a slot of the concurrency gate": {reason: "queue", policy: func(t *testing.T, host string) string {
		return policyFile(t, host, fields("deadline: 20s", "concurrency: {maxInFlight: 1, maxQueued: 4, queueTimeout: 15s}")...)
	}},
}

// sendTheSecondWhileTheFirstHolds sends one request per trace, each in its
// own trace, the second once the first has reached the upstream (which holds
// it). It returns where each request's result will arrive.
func sendTheSecondWhileTheFirstHolds(t *testing.T, s *sidecar, up *upstream, traces []string) []<-chan result {
	t.Helper()
	results := make([]<-chan result, len(traces))
	for i, trace := range traces {
		req, _ := http.NewRequest(http.MethodGet, up.url(fmt.Sprintf("/%d", i+1)), nil)
		req.Header.Set("Traceparent", "00-"+trace+"-"+appSpanID+"-01")
		ch := make(chan result, 1)
		go func() {
			r, err := s.try(req)
			if err != nil {
				r.body = err.Error()
			}
			ch <- r
		}()
		results[i] = ch
		if i == 0 {
			up.waitForArrivals(t, 1)
		}
	}
	return results
}

// serverSpanWaitReasons are the retry.reason attributes of the retry.wait
// events on trace's SERVER spans, in order; each wait must have lasted.
func serverSpanWaitReasons(t *testing.T, spans []otlpreceiver.Span, trace string, request int) []string {
	t.Helper()
	var reasons []string
	for _, sp := range spans {
		if hex.EncodeToString(sp.GetTraceId()) != trace || sp.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			continue
		}
		for _, e := range eventsNamed(sp.Span, "retry.wait") {
			reasons = append(reasons, attrOf(e.GetAttributes(), "retry.reason"))
			if d := doubleOf(e.GetAttributes(), "retry.delay"); d <= 0 {
				t.Errorf("request %d: a wait of %v s, want > 0", request, d)
			}
		}
	}
	return reasons
}
