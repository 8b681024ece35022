package sidecar

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retrydev/retry-operator/internal/quota"
)

// The series of the shared quotas (docs/quota.md#metrics), per SharedQuota:
//
//	retry_sidecar_quota_admissions_total{quota}            attempts that took a token
//	retry_sidecar_quota_admission_wait_seconds{quota}      the time each waited for it (0: one was on hand)
//	retry_sidecar_quota_denials_total{quota,reason}        quota: no token on hand (waited or shed); store-loss: refused by onStoreLoss Deny
//	retry_sidecar_quota_tokens_leased_total{quota}         tokens the store granted this pod
//	retry_sidecar_quota_tokens{quota}                      tokens on hand now
//	retry_sidecar_quota_store_operations_total{quota}      lease operations (≤ 10/s)
//	retry_sidecar_quota_store_operation_seconds{quota}     their latency
//	retry_sidecar_quota_store_errors_total{quota,state}    failed ones: unreachable, refused or revoked
//	retry_sidecar_quota_store_state{quota,state}           1 for the store's state now: connecting, reachable, unreachable, refused, revoked
type quotaSeries struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec

	admissions, denials, leased, tokens, ops, state, waits *prometheus.Desc
}

func newQuotaSeries(ns string) *quotaSeries {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(ns+"_quota_"+name, help, append([]string{"quota"}, labels...), nil)
	}
	return &quotaSeries{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "quota_store_operation_seconds",
			Help: "Time of each lease operation on a shared quota's store.", Buckets: quotaLeaseBuckets}, []string{"quota"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "quota_store_errors_total",
			Help: "Failed lease operations on a shared quota's store, by the state they put it in (unreachable, refused, revoked)."}, []string{"quota", "state"}),
		admissions: d("admissions_total", "Attempts that took a token of a shared quota (locally)."),
		waits:      d("admission_wait_seconds", "Time an attempt waited in the sidecar for a token of a shared quota before it took one (0: one was on hand)."),
		denials:    d("denials_total", "Attempts of a shared quota that found no token on hand (reason quota: they waited for the next lease or were shed) or were refused while the store is lost (reason store-loss, onStoreLoss Deny).", "reason"),
		leased:     d("tokens_leased_total", "Tokens of a shared quota the store granted this pod."),
		tokens:     d("tokens", "Tokens of a shared quota on hand now."),
		ops:        d("store_operations_total", "Lease operations on a shared quota's store (at most 10 per second)."),
		state:      d("store_state", "1 for the state of a shared quota's store as this pod sees it: connecting, reachable, unreachable, refused or revoked.", "state"),
	}
}

// Describe implements prometheus.Collector.
func (s *quotaSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.admissions, s.denials, s.leased, s.tokens, s.ops, s.state, s.waits} {
		ch <- d
	}
	s.latency.Describe(ch)
	s.errors.Describe(ch)
}

// collect reads the counters of every watched client.
func (m *Metrics) collectQuotas(ch chan<- prometheus.Metric) {
	s := m.quota
	m.quotaClients.Range(func(k, _ any) bool {
		c := k.(*quota.Client)
		st, name := c.Stats(), c.Spec().Name
		ch <- prometheus.MustNewConstMetric(s.admissions, prometheus.CounterValue, float64(st.Admitted), name)
		ch <- waitHistogram(s.waits, c, name)
		ch <- prometheus.MustNewConstMetric(s.denials, prometheus.CounterValue, float64(st.Waited), name, "quota")
		ch <- prometheus.MustNewConstMetric(s.denials, prometheus.CounterValue, float64(st.Denied), name, "store-loss")
		ch <- prometheus.MustNewConstMetric(s.leased, prometheus.CounterValue, float64(st.Leased), name)
		ch <- prometheus.MustNewConstMetric(s.tokens, prometheus.GaugeValue, float64(st.Tokens), name)
		ch <- prometheus.MustNewConstMetric(s.ops, prometheus.CounterValue, float64(st.Operations), name)
		for _, state := range quota.States() {
			v := 0.0
			if state == st.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(s.state, prometheus.GaugeValue, v, name, state.String())
		}
		return true
	})
	s.latency.Collect(ch)
	s.errors.Collect(ch)
}

type quotaCollector struct{ m *Metrics }

func (c quotaCollector) Describe(ch chan<- *prometheus.Desc) { c.m.quota.Describe(ch) }
func (c quotaCollector) Collect(ch chan<- prometheus.Metric) { c.m.collectQuotas(ch) }

// QuotaObserver feeds the latency and error series from a client's lease
// operations.
func (m *Metrics) QuotaObserver() quota.Observer {
	return quota.Observer{Lease: func(name string, took time.Duration, _ int64, err error) {
		m.quota.latency.WithLabelValues(name).Observe(took.Seconds())
		if err != nil && !errors.Is(err, quota.ErrLate) { // a lease put off is no failure
			state := quota.StateUnreachable
			switch {
			case errors.Is(err, quota.ErrRevoked):
				state = quota.StateRevoked
			case errors.Is(err, quota.ErrRefused):
				state = quota.StateRefused
			}
			m.quota.errors.WithLabelValues(name, state.String()).Inc()
		}
	}}
}

// WatchQuota and UnwatchQuota add and remove a client read at scrape time
// (config.Metrics).
func (m *Metrics) WatchQuota(c *quota.Client)   { m.quotaClients.Store(c, struct{}{}) }
func (m *Metrics) UnwatchQuota(c *quota.Client) { m.quotaClients.Delete(c) }

// waitHistogram is the admission-wait histogram of c, read from its counters.
func waitHistogram(d *prometheus.Desc, c *quota.Client, name string) prometheus.Metric {
	counts, sum := c.AdmissionWaits()
	buckets := make(map[float64]uint64, len(quota.WaitBuckets))
	var n uint64
	for i, le := range quota.WaitBuckets {
		n += counts[i]
		buckets[le.Seconds()] = n
	}
	n += counts[len(quota.WaitBuckets)]
	return prometheus.MustNewConstHistogram(d, n, sum.Seconds(), buckets, name)
}

// quotaLeaseBuckets: a lease operation on loopback takes ~100 µs; the store
// timeout is quota.StoreTimeout.
var quotaLeaseBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25}
