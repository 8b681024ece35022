// Package policysettest generates RetryPolicy upstreams and asks the Go layers
// for their verdict on them, for the differential tests of the API server,
// v1alpha1.Validate and the sidecar (docs/policy.md#where-the-rules-live).
package policysettest

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// This file generates RetryPolicy specs for the differential tests that ask the
// API server, v1alpha1.Validate and the sidecar's compilation for a verdict on
// the same input (docs/policy.md#where-the-rules-live): valid-looking values,
// every bound ±1, empty, huge, odd hosts, statuses, methods and durations,
// optionals missing.

// VerdictSeeds are hand-picked patches of a valid upstream (JSON merged into
// {"name":"u","hosts":["u.svc"]}): each bound and its neighbours, and the
// rules that relate two fields.
var VerdictSeeds = []string{
	`{}`,
	`{"maxAttempts":0}`, `{"maxAttempts":1}`, `{"maxAttempts":10}`, `{"maxAttempts":11}`,
	`{"maxReplayBodyBytes":-1}`, `{"maxReplayBodyBytes":0}`, `{"maxReplayBodyBytes":16777216}`, `{"maxReplayBodyBytes":16777217}`,
	`{"budget":{"retryPercent":-1}}`, `{"budget":{"retryPercent":100}}`, `{"budget":{"retryPercent":101}}`,
	`{"budget":{"minRetriesPerSecond":10000}}`, `{"budget":{"minRetriesPerSecond":10001}}`, `{"budget":{"minRetriesPerSecond":-1}}`,
	`{"rateLimit":{"requestsPerMinute":0}}`, `{"rateLimit":{"requestsPerMinute":1}}`,
	`{"rateLimit":{"requestsPerMinute":6000000}}`, `{"rateLimit":{"requestsPerMinute":6000001}}`,
	`{"rateLimit":{"requestsPerMinute":60,"burst":0}}`, `{"rateLimit":{"requestsPerMinute":60,"burst":10000}}`, `{"rateLimit":{"requestsPerMinute":60,"burst":10001}}`,
	`{"concurrency":{"maxInFlight":0}}`, `{"concurrency":{"maxInFlight":10000}}`, `{"concurrency":{"maxInFlight":10001}}`,
	`{"concurrency":{"maxInFlight":1,"maxQueued":-1}}`, `{"concurrency":{"maxInFlight":1,"maxQueued":100000}}`, `{"concurrency":{"maxInFlight":1,"maxQueued":100001}}`,
	`{"concurrency":{"maxInFlight":1,"queueTimeout":"0s"}}`,
	`{"deadline":"0.5ns"}`, `{"deadline":"1ns"}`, `{"deadline":"2562047h"}`, `{"deadline":"2562048h"}`, `{"deadline":"1µs"}`,
	`{"deadline":"10000000000000000000000000000s"}`, `{"deadline":"1000000000000000000000000000000s"}`,
	`{"deadline":"2s","perTryTimeout":"2s"}`, `{"deadline":"2s","perTryTimeout":"1999999999ns"}`,
	`{"deadline":"2s","connectTimeout":"2s"}`, `{"deadline":"2s","connectTimeout":"2000000001ns"}`,
	`{"backoff":{"base":"2s","max":"1999ms"}}`, `{"backoff":{"max":"100ms"}}`, `{"backoff":{"max":"99ms"}}`, `{"backoff":{"jitter":"full"}}`,
	`{"retryAfter":{"maxWait":"0s"}}`, `{"retryAfter":{"spread":"-1s"}}`,
	`{"retryOn":{"statusCodes":[]}}`, `{"retryOn":{"statusCodes":[503,503]}}`, `{"retryOn":{"statusCodes":[404]}}`,
	`{"replayableMethods":[]}`, `{"replayableMethods":["GET","GET"]}`, `{"replayableMethods":["POST"]}`, `{"replayableMethods":["get"]}`,
	`{"replayableMethods":["ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEF"]}`, `{"replayableMethods":["ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFG"]}`,
	`{"idempotencyKey":{"header":""}}`, `{"idempotencyKey":{"header":"Idempotency Key"}}`,
	`{"retryOn":{"grpcStatusCodes":["UNAVAILABLE","RESOURCE_EXHAUSTED"]}}`, `{"retryOn":{"grpcStatusCodes":["OK"]}}`,
	`{"retryOn":{"grpcStatusCodes":["Unavailable"]}}`, `{"retryOn":{"grpcStatusCodes":["ABORTED","ABORTED"]}}`,
	`{"retryOn":{"grpcStatusCodes":[]}}`,
	`{"replayableMethods":["GET","/shop.v1.Payments/Get","/shop.v1.Catalogue/*","/Greeter/SayHello"]}`,
	`{"replayableMethods":["/shop.v1.*/Get"]}`, `{"replayableMethods":["/shop.v1.Payments"]}`, `{"replayableMethods":["/shop.v1.Payments/Get*"]}`,
	`{"replayableMethods":["/` + strings.Repeat("a", 251) + `.S/M"]}`, `{"replayableMethods":["/` + strings.Repeat("a", 252) + `.S/M"]}`,
	`{"pacing":{"holdOnDeferral":true}}`, `{"maxAttempts":1,"pacing":{"holdOnDeferral":true}}`,
	`{"retryOn":{"statusCodes":[]},"pacing":{"holdOnDeferral":true}}`,
	`{"name":"a23456789012345678901234567890123456789012345678901234567890123"}`,
	`{"name":"a234567890123456789012345678901234567890123456789012345678901234"}`, `{"name":"U"}`, `{"name":""}`,
	`{"hosts":[]}`, `{"hosts":["a.svc","a.svc"]}`, `{"hosts":["a.svc:+80"]}`, `{"hosts":["[fe80::1%eth0]:80"]}`, `{"hosts":["a.svc:65535"]}`, `{"hosts":["a.svc:65536"]}`,
	`{"tls":{"port":0}}`, `{"tls":{"port":65535}}`, `{"tls":{"port":65536}}`, `{"tls":{"hostname":"API.example"}}`,
	`{"tls":{"wellKnownCACertificates":"System","caCertificateRefs":[{"name":"ca"}]}}`, `{"tls":{"wellKnownCACertificates":"Mozilla"}}`,
}

// RandomUpstream builds an upstream from a stream of choices (a fuzzer's bytes):
// each field is absent or one of a list of values, most of them near a bound.
func RandomUpstream(choices []byte) map[string]any {
	c := &chooser{b: choices}
	u := map[string]any{}
	c.set(u, "name", "u", "payments-api", "", "U", "a-", strings.Repeat("a", 63), strings.Repeat("a", 64))
	c.set(u, "hosts", []any{"u.svc"}, []any{}, c.hosts(), c.hosts(), c.hosts())
	c.set(u, "maxAttempts", 0, 1, 2, 3, 10, 11, -1)
	for _, f := range []string{"deadline", "perTryTimeout", "connectTimeout"} {
		c.set(u, f, c.durations()...)
	}
	c.setObject(u, "backoff", func(o map[string]any) {
		c.set(o, "base", c.durations()...)
		c.set(o, "max", c.durations()...)
		c.set(o, "jitter", "Full", "Equal", "None", "full", "")
	})
	c.setObject(u, "retryOn", func(o map[string]any) {
		c.set(o, "statusCodes", []any{}, []any{503}, []any{429, 503}, []any{408, 425, 429, 500, 502, 503, 504},
			[]any{404}, []any{503, 503}, []any{0}, []any{599})
		c.set(o, "connectFailure", true, false)
	})
	c.set(u, "replayableMethods", []any{}, []any{"GET"}, []any{"GET", "HEAD", "OPTIONS"}, []any{"PUT", "DELETE"},
		[]any{"POST"}, []any{"PATCH"}, []any{"get"}, []any{"GET", "GET"}, []any{"GET /"}, []any{""},
		[]any{strings.Repeat("M", 32)}, []any{strings.Repeat("M", 33)}, methods(16), methods(17))
	c.setObject(u, "idempotencyKey", func(o map[string]any) {
		c.set(o, "header", "Idempotency-Key", "", "Idempotency Key", strings.Repeat("h", 128), strings.Repeat("h", 129), "x_key")
	})
	c.set(u, "maxReplayBodyBytes", 0, 65536, 16777216, 16777217, -1)
	c.setObject(u, "retryAfter", func(o map[string]any) {
		c.set(o, "maxWait", c.durations()...)
		c.set(o, "spread", c.durations()...)
	})
	c.setObject(u, "budget", func(o map[string]any) {
		c.set(o, "retryPercent", 0, 20, 100, 101, -1)
		c.set(o, "minRetriesPerSecond", 0, 10, 10000, 10001, -1)
	})
	c.setObject(u, "rateLimit", func(o map[string]any) {
		c.set(o, "requestsPerMinute", 1, 60, 90, 6000000, 6000001, 0, -1)
		c.set(o, "burst", 1, 3, 10000, 10001, 0, -1)
	})
	c.setObject(u, "concurrency", func(o map[string]any) {
		c.set(o, "maxInFlight", 1, 3, 10000, 10001, 0, -1)
		c.set(o, "maxQueued", 0, 10, 100000, 100001, -1)
		c.set(o, "queueTimeout", c.durations()...)
	})
	c.setObject(u, "pacing", func(o map[string]any) {
		c.set(o, "rateLimitHeaders", true, false)
		c.set(o, "holdOnDeferral", true, false)
	})
	c.setObject(u, "tls", func(o map[string]any) {
		c.set(o, "hostname", "api.partner.example", "", "API.example", "a..b", strings.Repeat("a", 64)+".example", "*.example")
		c.set(o, "port", 1, 443, 65535, 0, 65536)
		c.set(o, "caCertificateRefs", []any{}, []any{map[string]any{"name": "ca"}}, []any{map[string]any{"name": "Bad_CA"}})
		c.set(o, "wellKnownCACertificates", "System", "Mozilla")
	})
	return u
}

// Upstream returns the valid base upstream with patch (a JSON object) merged
// into it, then the choices' fields on top; ok is false when patch is not a
// JSON object.
func Upstream(patch string, choices []byte) (u map[string]any, ok bool) {
	u = map[string]any{"name": "u", "hosts": []any{"u.svc"}}
	var p map[string]any
	if err := json.Unmarshal([]byte(patch), &p); err != nil || p == nil {
		return nil, false
	}
	for k, v := range p {
		u[k] = v
	}
	if len(choices) > 0 {
		for k, v := range RandomUpstream(choices) {
			u[k] = v
		}
	}
	return u, true
}

// Upstreams returns the upstreams of a policy: first, then more shaped by
// shape: shape&0x1f (mod 18) more valid upstreams u1, u2, … (so the policy has
// up to 18, two beyond the limit); with shape&0x40 the second takes the first's
// name, with shape&0x80 it claims the first's first host.
func Upstreams(first map[string]any, shape uint8) []map[string]any {
	out := []map[string]any{first}
	for i := range int(shape&0x1f) % 18 {
		out = append(out, map[string]any{"name": "u" + strconv.Itoa(i+1), "hosts": []any{"u" + strconv.Itoa(i+1) + ".svc"}})
	}
	if len(out) < 2 {
		return out
	}
	if shape&0x40 != 0 {
		out[1]["name"] = first["name"]
	}
	if hosts, ok := first["hosts"].([]any); ok && len(hosts) > 0 && shape&0x80 != 0 {
		out[1]["hosts"] = []any{hosts[0]}
	}
	return out
}

// ShapeSeeds are shapes for Upstreams: one upstream, the limit and one beyond,
// a name used twice, a host claimed twice.
var ShapeSeeds = []uint8{0, 1, 15, 16, 0x41, 0x81}

type chooser struct {
	b []byte
	i int
}

func (c *chooser) next() int {
	if c.i >= len(c.b) {
		return 0
	}
	c.i++
	return int(c.b[c.i-1])
}

// set leaves key absent (choice 0, and when the choices run out) or sets one
// of values.
func (c *chooser) set(o map[string]any, key string, values ...any) {
	n := c.next() % (len(values) + 1)
	if n > 0 {
		o[key] = values[n-1]
	}
}

func (c *chooser) setObject(o map[string]any, key string, fill func(map[string]any)) {
	if c.next()%2 == 1 {
		sub := map[string]any{}
		fill(sub)
		o[key] = sub
	}
}

func (c *chooser) durations() []any {
	return []any{"1ns", "100ms", "1s", "2s", "10s", "1m", "1h1m", "0s", "0.5ns", "-1s", "1.5s", "10", "", "1µs",
		"2562047h", "2562048h", strings.Repeat("1", 31) + "s", strings.Repeat("1", 32) + "s"}
}

func (c *chooser) hosts() []any {
	pool := []string{"a.svc", "b.svc:8080", "*.example", "10.0.0.7", "[fd00::7]:8080", "A.svc", "a.svc:0", "a.svc:65536",
		"a.svc:+80", "a.svc:08080", "fd00::7", "[fe80::1%eth0]", "*.", "*", "a_b.svc", "http://a", "a..b", "-a.svc",
		strings.Repeat("a", 63) + ".svc", strings.Repeat("a", 64) + ".svc", "a.svc"}
	n := 1 + c.next()%3
	out := make([]any, 0, n)
	for range n {
		out = append(out, pool[c.next()%len(pool)])
	}
	return out
}

func methods(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = "M" + string(rune('A'+i))
	}
	return out
}

// AddSeeds adds the seed corpus of a verdict fuzz target whose arguments are
// (patch string, choices []byte, readyPods, shape, selector uint8): every
// VerdictSeeds patch, every selector, every shape and two choice streams.
func AddSeeds(f *testing.F) {
	for _, s := range VerdictSeeds {
		f.Add(s, []byte(nil), uint8(0), uint8(0), uint8(0))
	}
	for i := range Selectors {
		f.Add(`{}`, []byte(nil), uint8(0), uint8(0), uint8(i+1))
	}
	for _, shape := range ShapeSeeds {
		f.Add(`{}`, []byte(nil), uint8(0), shape, uint8(0))
	}
	f.Add(`{}`, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, uint8(3), uint8(0), uint8(0))
	f.Add(`{}`, []byte{255, 254, 253, 252, 251, 250, 249, 248, 247, 246, 245, 244, 243, 242, 241, 240, 239, 238}, uint8(1), uint8(0), uint8(0))
}

// Object is the RetryPolicy ns/p of a fuzz input (see AddSeeds); ok is false
// when patch is not a JSON object.
func Object(ns, patch string, choices []byte, shape, selector uint8) (obj map[string]any, ok bool) {
	u, ok := Upstream(patch, choices)
	if !ok {
		return nil, false
	}
	return WithSelector(PolicyObject(ns, "p", Upstreams(u, shape)...), int(selector)), true
}
