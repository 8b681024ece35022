package sidecar

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// Metrics are the sidecar's Prometheus series, all prefixed retry_sidecar_. It
// implements retryhttp.Observer: the Transport reports every attempt decision
// and every outcome here. Series of an upstream are resolved once and cached, so
// observing an event does not allocate on the request path.
//
//	retry_sidecar_requests_total{upstream,outcome}              logical requests by outcome (docs/retry-semantics.md#outcomes)
//	retry_sidecar_request_duration_seconds{upstream,outcome}    start of a logical request to its response head
//	retry_sidecar_in_flight_attempts{upstream}                  attempts sent and not finished, now
//	retry_sidecar_queued_requests{upstream}                     requests waiting for admission, now
//	retry_sidecar_attempts_total{upstream,status}               transmissions by status (100–999, else other; a gRPC code's name), or error class
//	retry_sidecar_retry_delay_seconds{upstream}                 planned wait before each retry
//	retry_sidecar_budget_exhausted_total{upstream}              requests stopped by the outage budget (R6)
//	retry_sidecar_shed_total{upstream}                          requests shed by admission (R7)
//	retry_sidecar_retry_after_parse_failures_total{upstream,reason}  malformed Retry-After (R1)
//	retry_sidecar_clock_skew_seconds{upstream}                  last observed local receipt time − Date
//	retry_sidecar_held_requests_total{upstream,result}          requests that met a pacing hold: waited / answered (docs/pacing.md)
//	retry_sidecar_hold_end_seconds{upstream}                    end of the hold in force, Unix seconds; 0 = none
//	retry_sidecar_ratelimit_header_parse_failures_total{upstream,header,reason}  malformed rate-limit headers, ignored
//	retry_sidecar_passthrough_requests_total{result}            requests to hosts without a policy
//	retry_sidecar_config_reloads_total                          configurations loaded (the first included)
//	retry_sidecar_config_reload_errors_total                    configurations refused
//	retry_sidecar_config_info{hash}                             1 for the configuration in force
//	retry_sidecar_config_upstreams                              upstreams selected for this pod
//	retry_sidecar_config_revision                               policies.json revision in force (docs/fleet.md)
//	retry_sidecar_config_stale_total{source}                    deliveries refused for an older revision
//	retry_sidecar_config_api_up                                 1 while the API watch of retry-policies runs
//	retry_sidecar_config_api_fallbacks_total{reason}            API watch losses (forbidden, unreachable): the file is followed
//	retry_sidecar_connect_tunnels_total / _active               CONNECT tunnels opened / open now
//	retry_sidecar_timeouts_total{upstream,phase}                timeouts by phase: queue, connect, tls, headers
//	retry_sidecar_truncated_responses_total                     upstream bodies cut off before their end (response aborted)
//	retry_sidecar_malformed_request_bodies_total{attempt}       app request bodies that could not be read, answered 400: attempt aborted upstream / unsent
//	retry_sidecar_replay_memory_bytes                           bytes reserved by replay buffers now (cap: --max-replay-memory)
//	retry_sidecar_stats_connections                             connections open on the stats port now (cap: --stats-max-connections)
//	retry_sidecar_stats_connections_refused_total               stats connections reset because the cap was reached
//	retry_sidecar_trace_spans_exported_total                    spans the OTLP collector took (docs/observability.md#tracing)
//	retry_sidecar_trace_spans_dropped_total{reason}             spans lost: queue_full (collector slow or down), export_failed
//	retry_sidecar_quota_…{quota,…}                              shared quotas (quotametrics.go, docs/quota.md#metrics)
//
// plus the Go runtime and process collectors (process_resident_memory_bytes).
type Metrics struct {
	Registry *prometheus.Registry

	requests           *prometheus.CounterVec
	duration           *prometheus.HistogramVec
	attempts           *prometheus.CounterVec
	delay              *prometheus.HistogramVec
	budgetExhausted    *prometheus.CounterVec
	shed               *prometheus.CounterVec
	retryAfterFailures *prometheus.CounterVec
	skew               *prometheus.GaugeVec
	held               *prometheus.CounterVec
	holdEnd            *prometheus.GaugeVec
	rateLimitFailures  *prometheus.CounterVec

	passthroughOK, passthroughErr prometheus.Counter
	reloads, reloadErrors         prometheus.Counter
	configInfo                    *prometheus.GaugeVec
	configUpstreams               prometheus.Gauge
	configRevision                prometheus.Gauge
	configStale                   *prometheus.CounterVec
	apiUp                         prometheus.Gauge
	apiFallbacks                  *prometheus.CounterVec
	tunnels                       prometheus.Counter
	tunnelsActive                 prometheus.Gauge
	truncated                     prometheus.Counter
	malformedBodies               *prometheus.CounterVec
	timeouts                      *prometheus.CounterVec
	spansExported                 prometheus.Counter
	spansDropped                  *prometheus.CounterVec

	limits atomic.Pointer[EachLimits] // feeds the occupancy gauges

	replayMemory  atomic.Pointer[retryhttp.ReplayMemory] // feeds replay_memory_bytes
	statsListener atomic.Pointer[cappedListener]         // feeds the stats port series
	upstreams     sync.Map                               // upstream name -> *upstreamMetrics
	quota         *quotaSeries
	quotaClients  sync.Map // *quota.Client -> struct{}
	infoMu        sync.Mutex
	infoHash      string
}

// outcomeIndex maps an outcome to its slot in upstreamMetrics.outcomes.
var outcomeIndex = func() map[retrypolicy.Outcome]int {
	m := map[retrypolicy.Outcome]int{}
	for i, o := range retrypolicy.Outcomes() {
		m[o] = i
	}
	return m
}()

type upstreamMetrics struct {
	outcomes  []prometheus.Counter  // by outcomeIndex
	durations []prometheus.Observer // by outcomeIndex
	delay     prometheus.Observer
	budget    prometheus.Counter
	shed      prometheus.Counter
	skew      prometheus.Gauge
	waited    prometheus.Counter // held requests that waited in line
	answered  prometheus.Counter // held requests answered locally
	holdEnd   prometheus.Gauge

	mu       sync.RWMutex
	statuses map[int]prometheus.Counter // status code, or -ErrorClass
}

// NewMetrics registers every series on a fresh registry.
func NewMetrics() *Metrics {
	const ns = "retry_sidecar"
	m := &Metrics{Registry: prometheus.NewRegistry()}
	var passthrough *prometheus.CounterVec
	for _, spec := range m.specs(&passthrough) {
		m.Registry.MustRegister(spec.register(ns))
	}
	m.passthroughOK, m.passthroughErr = passthrough.WithLabelValues("ok"), passthrough.WithLabelValues("error")
	m.Registry.MustRegister(newOccupancy(m), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.registerWatched(ns)
	m.quota = newQuotaSeries(ns)
	m.Registry.MustRegister(quotaCollector{m})
	return m
}

// metricKind is the Prometheus type of a metricSpec.
type metricKind uint8

const (
	counter metricKind = iota
	gauge
	histogram
)

// metricSpec is one series of the sidecar's registry: its name (after
// retry_sidecar_), help, labels (none: a single series) and kind, and the
// field of Metrics it fills (dst: a **prometheus.CounterVec, *prometheus.Counter,
// **prometheus.GaugeVec, *prometheus.Gauge or **prometheus.HistogramVec, as
// kind and labels say). The names are relied upon outside the repository
// (dashboards, alerts): testdata/metrics.golden lists them.
type metricSpec struct {
	kind    metricKind
	name    string
	help    string
	labels  []string
	buckets []float64 // histograms
	preset  []string  // label values created at zero (one label)
	dst     any
}

// labels is a metricSpec's label list.
func labels(names ...string) []string { return names }

// specs are the series NewMetrics registers from a table; passthrough
// receives the vector of passthrough_requests_total, whose two series are
// kept in Metrics.
func (m *Metrics) specs(passthrough **prometheus.CounterVec) []metricSpec {
	return []metricSpec{
		{counter, "requests_total", "Logical requests to upstreams with a policy, by upstream and outcome (X-Retry-Outcome).",
			labels("upstream", "outcome"), nil, nil, &m.requests},
		{histogram, "request_duration_seconds", "Time from the start of a logical request to the response head the application gets (every attempt and wait included), by upstream and outcome.",
			// From a loopback hit to the default 10s deadline and past it (Retry-After waits up to maxWait).
			labels("upstream", "outcome"), []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, nil, &m.duration},
		{counter, "attempts_total", "Transmissions by upstream and response status (or error class when there was no response).",
			labels("upstream", "status"), nil, nil, &m.attempts},
		{histogram, "retry_delay_seconds", "Planned wait before each retry (local backoff or server Retry-After).",
			labels("upstream"), []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}, nil, &m.delay},
		{counter, "budget_exhausted_total", "Requests whose retry was refused by the outage budget.",
			labels("upstream"), nil, nil, &m.budgetExhausted},
		{counter, "shed_total", "Requests shed by admission (rate limit or full concurrency queue).",
			labels("upstream"), nil, nil, &m.shed},
		{counter, "retry_after_parse_failures_total", "Malformed Retry-After values, by reason; the decision fell back to local backoff.",
			labels("upstream", "reason"), nil, nil, &m.retryAfterFailures},
		{gauge, "clock_skew_seconds", "Last observed local receipt time minus the response Date header, per upstream.",
			labels("upstream"), nil, nil, &m.skew},
		{counter, "held_requests_total", "Requests that met a pacing hold of their upstream: waited in line until it ended, or answered locally with 429.",
			labels("upstream", "result"), nil, nil, &m.held},
		{gauge, "hold_end_seconds", "End of the pacing hold in force per upstream, Unix seconds rounded up; 0 when none.",
			labels("upstream"), nil, nil, &m.holdEnd},
		{counter, "ratelimit_header_parse_failures_total", "Malformed rate-limit response headers, by header and reason; they were ignored.",
			labels("upstream", "header", "reason"), nil, nil, &m.rateLimitFailures},
		{counter, "passthrough_requests_total", "Requests to hosts without a policy, sent once, by result (ok: a response, error: none).",
			labels("result"), nil, nil, passthrough},
		{counter, "config_reloads_total", "Configurations loaded and put in force, the first one included.",
			nil, nil, nil, &m.reloads},
		{counter, "config_reload_errors_total", "Configurations refused because they failed to read, parse or validate; the previous one stayed in force.",
			nil, nil, nil, &m.reloadErrors},
		{gauge, "config_info", "1 for the configuration in force, labelled with the content hash of its policies.",
			labels("hash"), nil, nil, &m.configInfo},
		{gauge, "config_upstreams", "Upstreams with a policy in the configuration in force.",
			nil, nil, nil, &m.configUpstreams},
		{gauge, "config_revision", "Revision of the policies.json in force (0: none, or policy files).",
			nil, nil, nil, &m.configRevision},
		{counter, "config_stale_total", "Deliveries of policies.json refused because their revision is older than the one in force, by source (api, file).",
			labels("source"), nil, nil, &m.configStale},
		{gauge, "config_api_up", "1 while the watch of retry-policies through the API server runs; 0 while the mounted file is followed alone.",
			nil, nil, nil, &m.apiUp},
		{counter, "config_api_fallbacks_total", "Times the API watch of retry-policies was lost and the mounted file followed alone, by reason (forbidden, unreachable, error).",
			labels("reason"), nil, nil, &m.apiFallbacks},
		{counter, "connect_tunnels_total", "CONNECT tunnels opened (relayed unchanged, never retried).",
			nil, nil, nil, &m.tunnels},
		{gauge, "connect_tunnels_active", "CONNECT tunnels open now.",
			nil, nil, nil, &m.tunnelsActive},
		{counter, "timeouts_total", "Attempts (and shed requests) that ran out of time, by phase: queue, connect, tls, headers.",
			labels("upstream", "phase"), nil, nil, &m.timeouts},
		{counter, "trace_spans_exported_total", "Spans the OTLP collector accepted (tracing on: OTEL_EXPORTER_OTLP_ENDPOINT).",
			nil, nil, nil, &m.spansExported},
		{counter, "trace_spans_dropped_total", "Spans lost: queue_full when the export queue was full (collector slow or down), export_failed when the collector refused or timed out.",
			labels("reason"), nil, []string{tracing.DropQueueFull, tracing.DropExportFailed}, &m.spansDropped},
		{counter, "truncated_responses_total", "Upstream response bodies cut off before their announced end; the response to the app was aborted.",
			nil, nil, nil, &m.truncated},
		{counter, "malformed_request_bodies_total", "App request bodies that could not be read (broken chunked framing), answered 400: attempt=aborted when an attempt had gone upstream and was cut before its end, unsent when none had.",
			labels("attempt"), nil, []string{attemptAborted, attemptUnsent}, &m.malformedBodies},
	}
}

// register builds the collector of s, stores it in s.dst and returns it.
func (s metricSpec) register(ns string) prometheus.Collector {
	switch {
	case s.kind == counter && s.labels == nil:
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: s.name, Help: s.help})
		*s.dst.(*prometheus.Counter) = c
		return c
	case s.kind == counter:
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: s.name, Help: s.help}, s.labels)
		for _, v := range s.preset {
			c.WithLabelValues(v)
		}
		*s.dst.(**prometheus.CounterVec) = c
		return c
	case s.kind == gauge && s.labels == nil:
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: s.name, Help: s.help})
		*s.dst.(*prometheus.Gauge) = g
		return g
	case s.kind == gauge:
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: s.name, Help: s.help}, s.labels)
		*s.dst.(**prometheus.GaugeVec) = g
		return g
	default:
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: s.name, Help: s.help, Buckets: s.buckets}, s.labels)
		*s.dst.(**prometheus.HistogramVec) = h
		return h
	}
}

// The attempt label of retry_sidecar_malformed_request_bodies_total.
const (
	attemptAborted = "aborted" // an attempt had gone upstream: cut before its end
	attemptUnsent  = "unsent"  // the body failed before anything was sent
)

// passthroughTimeout counts a timeout of a request to a host without a policy.
func (m *Metrics) passthroughTimeout(phase retryhttp.Phase) {
	m.timeouts.WithLabelValues("", string(phase)).Inc()
}

// traceCounters count what the span export queue does.
func (m *Metrics) traceCounters() tracing.Counters {
	return tracing.Counters{
		Dropped:  func(reason string, n int) { m.spansDropped.WithLabelValues(reason).Add(float64(n)) },
		Exported: func(n int) { m.spansExported.Add(float64(n)) },
	}
}

// WatchReplayMemory makes replay_memory_bytes read the bytes rm has reserved.
func (m *Metrics) WatchReplayMemory(rm *retryhttp.ReplayMemory) { m.replayMemory.Store(rm) }

// WatchStatsConnections makes the stats port's series read l's open and
// refused connections.
func (m *Metrics) WatchStatsConnections(l *cappedListener) { m.statsListener.Store(l) }

// registerWatched registers the series read at scrape time from what the
// Watch methods hand over later (zero until then), so every series exists
// from the start: dashboards and docs are checked against NewMetrics alone.
func (m *Metrics) registerWatched(ns string) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "replay_memory_bytes",
			Help: "Bytes reserved by request replay buffers now; capped by --max-replay-memory."},
			func() float64 {
				if rm := m.replayMemory.Load(); rm != nil {
					return float64(rm.InUse())
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "stats_connections",
			Help: "Connections open on the stats port (--stats-listen) now; at most --stats-max-connections."},
			func() float64 {
				if l := m.statsListener.Load(); l != nil {
					return float64(l.Open())
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "stats_connections_refused_total",
			Help: "Connections to the stats port reset on accept because --stats-max-connections were open."},
			func() float64 {
				if l := m.statsListener.Load(); l != nil {
					return float64(l.Refused())
				}
				return 0
			}))
}

// Observe implements retryhttp.Observer.
func (m *Metrics) Observe(e retryhttp.Event) {
	u := m.upstream(e.Upstream)
	switch e.Kind {
	case retryhttp.EventOutcome:
		if i, ok := outcomeIndex[e.Outcome]; ok {
			u.outcomes[i].Inc()
			u.durations[i].Observe(e.Elapsed.Seconds())
		}
		switch e.Outcome {
		case retrypolicy.OutcomeBudgetExhausted:
			u.budget.Inc()
		case retrypolicy.OutcomeShed:
			u.shed.Inc()
		}
	case retryhttp.EventAttempt:
		if e.Phase != "" {
			m.timeouts.WithLabelValues(e.Upstream, string(e.Phase)).Inc()
		}
		if e.Status == 0 && e.ErrorClass == retrypolicy.NoError {
			return // refused by admission before anything was sent
		}
		m.status(u, e.Upstream, statusKey(e)).Inc()
		if e.Action == retrypolicy.Retry {
			u.delay.Observe(e.Delay.Seconds())
		}
		if e.RetryAfter == retryhttp.RetryAfterMalformed {
			m.retryAfterFailures.WithLabelValues(e.Upstream, e.RetryAfterReason).Inc()
		}
		if e.HasSkew {
			u.skew.Set(e.Skew.Seconds())
		}
		if e.RateLimitMalformed != "" {
			m.rateLimitFailures.WithLabelValues(e.Upstream, e.RateLimitMalformed, e.RateLimitReason).Inc()
		}
	case retryhttp.EventHeld:
		if e.Outcome == "" {
			u.waited.Inc()
		} else {
			u.answered.Inc()
		}
	case retryhttp.EventHoldStart:
		u.holdEnd.Set(float64(unixCeil(e.NotBefore)))
	case retryhttp.EventHoldEnd:
		u.holdEnd.Set(0)
	}
}

// unixCeil is t in Unix seconds, rounded up.
func unixCeil(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

func (m *Metrics) upstream(name string) *upstreamMetrics {
	if v, ok := m.upstreams.Load(name); ok {
		return v.(*upstreamMetrics)
	}
	u := &upstreamMetrics{
		delay:    m.delay.WithLabelValues(name),
		budget:   m.budgetExhausted.WithLabelValues(name),
		shed:     m.shed.WithLabelValues(name),
		skew:     m.skew.WithLabelValues(name),
		waited:   m.held.WithLabelValues(name, "waited"),
		answered: m.held.WithLabelValues(name, "answered"),
		holdEnd:  m.holdEnd.WithLabelValues(name),
		statuses: map[int]prometheus.Counter{},
	}
	for _, o := range retrypolicy.Outcomes() {
		u.outcomes = append(u.outcomes, m.requests.WithLabelValues(name, string(o)))
		u.durations = append(u.durations, m.duration.WithLabelValues(name, string(o)))
	}
	v, _ := m.upstreams.LoadOrStore(name, u)
	return v.(*upstreamMetrics)
}

// statusOther is the status key of every status outside 100–999: the status
// label takes its values from the network, so it is bounded to those 900 and
// "other" (an HTTP/2 upstream may send any integer).
const statusOther = 1000

// statusKey is the key of attempts_total's status label for e: the status,
// statusOther, or minus the error class when there was no response.
func statusKey(e retryhttp.Event) int {
	switch {
	case e.Status == 0:
		return -int(e.ErrorClass)
	case e.Status < 100 || e.Status > 999:
		return statusOther
	}
	return e.Status
}

func (m *Metrics) status(u *upstreamMetrics, name string, key int) prometheus.Counter {
	u.mu.RLock()
	c := u.statuses[key]
	u.mu.RUnlock()
	if c != nil {
		return c
	}
	label := strconv.Itoa(key)
	switch {
	case key >= grpcStatusKeyBase:
		label = grpcStatusLabel(key) // grpcmetrics.go
	case key == statusOther:
		label = "other"
	case key <= 0:
		label = retrypolicy.ErrorClass(-key).String()
	}
	c = m.attempts.WithLabelValues(name, label)
	u.mu.Lock()
	u.statuses[key] = c
	u.mu.Unlock()
	return c
}

// occupancy is the collector of the in-flight and queued gauges, read from
// the admission state of each upstream in force when Prometheus scrapes:
// nothing is counted twice on the request path.
type occupancy struct {
	m                *Metrics
	inFlight, queued *prometheus.Desc
}

func newOccupancy(m *Metrics) *occupancy {
	return &occupancy{
		m: m,
		inFlight: prometheus.NewDesc("retry_sidecar_in_flight_attempts",
			"Attempts sent to the upstream and not finished yet (response body open), now.", []string{"upstream"}, nil),
		queued: prometheus.NewDesc("retry_sidecar_queued_requests",
			"Requests waiting for admission to the upstream (a rate-limit start token or a concurrency slot), now.", []string{"upstream"}, nil),
	}
}

func (o *occupancy) Describe(ch chan<- *prometheus.Desc) { ch <- o.inFlight; ch <- o.queued }

func (o *occupancy) Collect(ch chan<- prometheus.Metric) {
	each := o.m.limits.Load()
	if each == nil {
		return
	}
	(*each)(func(name string, l *limits.State) {
		ch <- prometheus.MustNewConstMetric(o.inFlight, prometheus.GaugeValue, float64(l.InFlight()), name)
		ch <- prometheus.MustNewConstMetric(o.queued, prometheus.GaugeValue, float64(l.Queued()), name)
	})
}

// EachLimits visits the admission state of every upstream in force.
type EachLimits func(yield func(upstream string, l *limits.State))

// WatchLimits makes the in-flight and queued gauges read from each at every
// scrape (the Reloader's upstreams in force); until then they are empty.
func (m *Metrics) WatchLimits(each EachLimits) { m.limits.Store(&each) }

// ConfigLoaded records a configuration put in force (config.Metrics). The
// series of each of its upstreams are created now, at zero, so dashboards and
// scrapes see them before the first request.
func (m *Metrics) ConfigLoaded(hash string, upstreams []string, revision int64) {
	for _, name := range upstreams {
		m.upstream(name)
	}
	m.configRevision.Set(float64(revision))
	m.infoMu.Lock()
	defer m.infoMu.Unlock()
	if m.infoHash != "" && m.infoHash != hash {
		m.configInfo.DeleteLabelValues(m.infoHash)
	}
	m.infoHash = hash
	m.configInfo.WithLabelValues(hash).Set(1)
	m.configUpstreams.Set(float64(len(upstreams)))
	m.reloads.Inc()
}

// ConfigRefused counts a configuration refused (config.Metrics).
func (m *Metrics) ConfigRefused() { m.reloadErrors.Inc() }

// ConfigStale counts a delivery refused as older than the revision in force
// (config.Metrics).
func (m *Metrics) ConfigStale(source string) { m.configStale.WithLabelValues(source).Inc() }

// APIWatchUp sets retry_sidecar_config_api_up (config.Metrics).
func (m *Metrics) APIWatchUp(up bool) {
	if up {
		m.apiUp.Set(1)
	} else {
		m.apiUp.Set(0)
	}
}

// APIWatchFallback counts a fallback to the mounted file (config.Metrics).
func (m *Metrics) APIWatchFallback(reason string) { m.apiFallbacks.WithLabelValues(reason).Inc() }
