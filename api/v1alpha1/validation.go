/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retrydev/retry-operator/internal/rules"
)

// Every bound, enum and grammar below is internal/rules', the
// ones Compile applies in every sidecar. The schema markers of
// retrypolicy_types.go cannot reference Go constants: TestCRDMarkersEqualRules
// reads the generated CRD and requires each marker to equal the Go value.

// Validate checks a RetryPolicy against every rule of the API: the ones the CRD
// schema and CEL enforce (repeated here so a policy file given to the sidecar, or an
// object that reached etcd while the webhook was down, is judged the same way) and
// the ones they cannot express (host and header syntax, hosts claimed twice). It
// expects defaults to be applied (see SetDefaults) but tolerates nil optionals.
//
// Messages name the field path first and the allowed values, for example
//
//	spec.upstreams[1].backoff.max: Invalid value: "1s": must be >= backoff.base (2s)
func Validate(p *RetryPolicy) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if p.Spec.PodSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(p.Spec.PodSelector,
			metav1validation.LabelSelectorValidationOptions{}, spec.Child("podSelector"))...)
	}
	errs = append(errs, validateUpstreams(p.Spec.Upstreams, spec.Child("upstreams"))...)
	return errs
}

func validateUpstreams(ups []Upstream, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case len(ups) == 0:
		errs = append(errs, field.Required(path, "at least one upstream is required"))
	case len(ups) > rules.MaxUpstreams:
		errs = append(errs, field.TooMany(path, len(ups), rules.MaxUpstreams))
	}
	names := map[string]int{}
	hosts := map[string]*field.Path{}
	for i := range ups {
		p := path.Index(i)
		u := &ups[i]
		if prev, dup := names[u.Name]; dup {
			errs = append(errs, field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also upstreams[%d])", u.Name, prev)))
		}
		names[u.Name] = i
		errs = append(errs, validateUpstream(u, p)...)
		for j, h := range u.Hosts {
			key := strings.ToLower(h)
			if first, dup := hosts[key]; dup {
				errs = append(errs, field.Duplicate(p.Child("hosts").Index(j),
					fmt.Sprintf("%s is already claimed by %s; a host may belong to one upstream of a policy", h, first)))
				continue
			}
			hosts[key] = p.Child("hosts").Index(j)
		}
	}
	return errs
}

// validateUpstream checks one upstream. The rules it shares with the sidecar's
// Compile (statuses, methods, header names, attempts, duration relations) are
// internal/rules' checkers; this adds the field paths.
func validateUpstream(u *Upstream, p *field.Path) field.ErrorList {
	errs := validateIdentity(u, p)
	errs = append(errs, validateTiming(u, p)...)
	errs = append(errs, validateRetryOn(u, p)...)
	errs = append(errs, validateReplay(u, p)...)
	errs = append(errs, validateLimits(u, p)...)
	if pc := u.Pacing; pc != nil && pc.HoldOnDeferral != nil && *pc.HoldOnDeferral {
		// Absent fields are judged by their defaults.
		attempts, statuses := int(DefaultMaxAttempts), len(DefaultStatusCodes)
		if u.MaxAttempts != nil {
			attempts = int(*u.MaxAttempts)
		}
		if u.RetryOn != nil && u.RetryOn.StatusCodes != nil {
			statuses = len(u.RetryOn.StatusCodes)
		}
		if msg := rules.HoldOnDeferralProblem(attempts, statuses); msg != "" {
			errs = append(errs, field.Invalid(p.Child("pacing", "holdOnDeferral"), true, msg))
		}
	}
	if t := u.TLS; t != nil {
		errs = append(errs, ValidateTLS(t, p.Child("tls"))...)
	}
	if r := u.QuotaRef; r != nil {
		errs = append(errs, validateQuotaRef(r, p.Child("quotaRef"))...)
	}
	return errs
}

// validateIdentity: name and hosts.
func validateIdentity(u *Upstream, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if u.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), "a DNS-1123 label such as payments-api"))
	} else if msg := rules.NameProblem(u.Name); msg != "" {
		errs = append(errs, field.Invalid(p.Child("name"), u.Name, msg))
	}
	switch {
	case len(u.Hosts) == 0:
		errs = append(errs, field.Required(p.Child("hosts"), `at least one of "host", "host:port" or "*.suffix"`))
	case len(u.Hosts) > rules.MaxHosts:
		errs = append(errs, field.TooMany(p.Child("hosts"), len(u.Hosts), rules.MaxHosts))
	}
	for j, h := range u.Hosts {
		if msg := ValidateHostPattern(h); msg != "" {
			errs = append(errs, field.Invalid(p.Child("hosts").Index(j), h, msg))
		}
	}
	return errs
}

// validateTiming: attempts, deadline, timeouts and backoff.
func validateTiming(u *Upstream, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if u.MaxAttempts != nil {
		if msg := rules.AttemptsProblem(int(*u.MaxAttempts)); msg != "" {
			errs = append(errs, field.Invalid(p.Child("maxAttempts"), *u.MaxAttempts, msg))
		}
	}
	deadline, dErrs := parseDuration(u.Deadline, p.Child("deadline"))
	errs = append(errs, dErrs...)
	perTry, pErrs := parseDuration(u.PerTryTimeout, p.Child("perTryTimeout"))
	errs = append(errs, pErrs...)
	if deadline > 0 && perTry > 0 {
		errs = appendProblem(errs, p.Child("perTryTimeout"), u.PerTryTimeout, rules.PerTryTimeoutProblem(perTry, deadline))
	}
	connect, cErrs := parseDuration(u.ConnectTimeout, p.Child("connectTimeout"))
	errs = append(errs, cErrs...)
	if deadline > 0 && connect > 0 {
		errs = appendProblem(errs, p.Child("connectTimeout"), u.ConnectTimeout, rules.ConnectTimeoutProblem(connect, deadline))
	}
	b := u.Backoff
	if b == nil {
		return errs
	}
	bp := p.Child("backoff")
	base, e1 := parseDuration(b.Base, bp.Child("base"))
	maxD, e2 := parseDuration(b.Max, bp.Child("max"))
	errs = append(append(errs, e1...), e2...)
	if base > 0 && maxD > 0 {
		errs = appendProblem(errs, bp.Child("max"), b.Max, rules.BackoffMaxProblem(base, maxD))
	}
	if b.Jitter != nil && rules.JitterProblem(string(*b.Jitter)) != "" {
		errs = append(errs, field.NotSupported(bp.Child("jitter"), *b.Jitter, rules.Jitters()))
	}
	return errs
}

// appendProblem adds problem (a relation checked by internal/rules) about the
// duration d at path, if there is one.
func appendProblem(errs field.ErrorList, path *field.Path, d *Duration, problem string) field.ErrorList {
	if problem == "" {
		return errs
	}
	return append(errs, field.Invalid(path, string(*d), problem))
}

// validateRetryOn: the HTTP and gRPC statuses retried.
func validateRetryOn(u *Upstream, p *field.Path) field.ErrorList {
	if u.RetryOn == nil {
		return nil
	}
	var errs field.ErrorList
	rp := p.Child("retryOn", "statusCodes")
	seen := map[StatusCode]bool{}
	for i, c := range u.RetryOn.StatusCodes {
		if rules.StatusProblem(int(c)) != "" {
			allowed := []string{}
			for _, s := range rules.RetryableStatuses() {
				allowed = append(allowed, strconv.Itoa(s))
			}
			errs = append(errs, field.NotSupported(rp.Index(i), strconv.Itoa(int(c)), allowed))
		}
		if seen[c] {
			errs = append(errs, field.Duplicate(rp.Index(i), c))
		}
		seen[c] = true
	}
	return append(errs, validateGRPCStatusCodes(u.RetryOn.GRPCStatusCodes, p.Child("retryOn", "grpcStatusCodes"))...)
}

// validateGRPCStatusCodes: canonical names of GRPCStatusCodes, each once.
func validateGRPCStatusCodes(codes []GRPCStatusCode, gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(codes) > len(grpcStatusCodes) {
		errs = append(errs, field.TooMany(gp, len(codes), len(grpcStatusCodes)))
	}
	seen := sets.New[GRPCStatusCode]()
	for i, c := range codes {
		if _, ok := c.Number(); !ok {
			errs = append(errs, field.NotSupported(gp.Index(i), c, GRPCStatusCodes()))
		}
		if seen.Has(c) {
			errs = append(errs, field.Duplicate(gp.Index(i), c))
		}
		seen.Insert(c)
	}
	return errs
}

// validateReplay: the methods and the idempotency key that make a request
// replayable, and the body kept to replay it.
func validateReplay(u *Upstream, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	mp := p.Child("replayableMethods")
	if len(u.ReplayableMethods) > rules.MaxReplayableMethods {
		errs = append(errs, field.TooMany(mp, len(u.ReplayableMethods), rules.MaxReplayableMethods))
	}
	seenMethods := sets.New[string]()
	for i, m := range u.ReplayableMethods {
		switch problem, forbidden := rules.MethodProblem(m); {
		case forbidden:
			errs = append(errs, field.Forbidden(mp.Index(i), problem))
		case problem != "":
			errs = append(errs, field.Invalid(mp.Index(i), m, problem))
		}
		if seenMethods.Has(m) {
			errs = append(errs, field.Duplicate(mp.Index(i), m))
		}
		seenMethods.Insert(m)
	}
	if k := u.IdempotencyKey; k != nil {
		hp := p.Child("idempotencyKey", "header")
		if k.Header == "" {
			errs = append(errs, field.Required(hp, "an HTTP header name such as Idempotency-Key"))
		} else if msg := rules.HeaderNameProblem(k.Header); msg != "" {
			errs = append(errs, field.Invalid(hp, k.Header, msg))
		}
	}
	if n := u.MaxReplayBodyBytes; n != nil {
		errs = appendRange(errs, p, rules.MaxReplayBodyBytesRange, *n)
	}
	return errs
}

// validateLimits: Retry-After, budget, rate limit and concurrency.
func validateLimits(u *Upstream, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ra := u.RetryAfter; ra != nil {
		rap := p.Child("retryAfter")
		_, e1 := parseDuration(ra.MaxWait, rap.Child("maxWait"))
		_, e2 := parseDuration(ra.Spread, rap.Child("spread"))
		errs = append(append(errs, e1...), e2...)
	}
	if b := u.Budget; b != nil {
		if v := b.RetryPercent; v != nil {
			errs = appendRange(errs, p, rules.RetryPercentRange, int64(*v))
		}
		if v := b.MinRetriesPerSecond; v != nil {
			errs = appendRange(errs, p, rules.MinRetriesPerSecondRange, int64(*v))
		}
	}
	if r := u.RateLimit; r != nil {
		errs = appendRange(errs, p, rules.RequestsPerMinuteRange, int64(r.RequestsPerMinute))
		if v := r.Burst; v != nil {
			errs = appendRange(errs, p, rules.BurstRange, int64(*v))
		}
	}
	if c := u.Concurrency; c != nil {
		errs = appendRange(errs, p, rules.MaxInFlightRange, int64(c.MaxInFlight))
		if v := c.MaxQueued; v != nil {
			errs = appendRange(errs, p, rules.MaxQueuedRange, int64(*v))
		}
		_, e := parseDuration(c.QueueTimeout, p.Child("concurrency", "queueTimeout"))
		errs = append(errs, e...)
	}
	return errs
}

// appendRange adds an error at upstream path p + r.Path if v is outside r.
func appendRange(errs field.ErrorList, p *field.Path, r rules.Range, v int64) field.ErrorList {
	if msg := r.Problem(v); msg != "" {
		for part := range strings.SplitSeq(r.Path, ".") {
			p = p.Child(part)
		}
		errs = append(errs, field.Invalid(p, v, msg))
	}
	return errs
}

// MaxCACertificateRefs bounds tls.caCertificateRefs (the schema's MaxItems).
// TLS is not part of retrypolicy.Config: the sidecar applies ValidateTLS.
const MaxCACertificateRefs = 8

// CACertificateKey is the ConfigMap key a tls.caCertificateRefs entry is read from.
const CACertificateKey = "ca.crt"

// Sizes of the CA certificates tls.caCertificateRefs name (docs/tls.md). Every
// bundle is rendered into the namespace's retry-policies ConfigMap, which the
// API server keeps under 1 MiB, and the manager holds them while it renders.
const (
	// MaxCACertificateBytes bounds one ConfigMap's ca.crt: 256 KiB, about 190
	// certificates, more than a public root store.
	MaxCACertificateBytes = 256 << 10
	// MaxNamespaceCABytes bounds the CA bundles of all policies of a
	// namespace together, counted as rendered (once per upstream that names
	// them), the older policies first.
	MaxNamespaceCABytes = 1 << 20
)

// ValidateTLS checks an upstream's tls at path p (spec.upstreams[i].tls).
// Validate applies it, and so does the sidecar to a rendered upstream.
func ValidateTLS(t *UpstreamTLS, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if h := t.Hostname; h != nil {
		switch {
		case *h == "":
			errs = append(errs, field.Invalid(p.Child("hostname"), *h, "must be a DNS name such as api.partner.example"))
		case *h != strings.ToLower(*h):
			errs = append(errs, field.Invalid(p.Child("hostname"), *h, "must be lower-case ("+strings.ToLower(*h)+")"))
		default:
			if msg := rules.DNSNameProblem(*h); msg != "" {
				errs = append(errs, field.Invalid(p.Child("hostname"), *h, "must be a DNS name such as api.partner.example: "+msg))
			}
		}
	}
	if v := t.Port; v != nil {
		if msg := rules.PortRange.Problem(int64(*v)); msg != "" {
			errs = append(errs, field.Invalid(p.Child("port"), *v, msg))
		}
	}
	rp := p.Child("caCertificateRefs")
	if len(t.CACertificateRefs) > MaxCACertificateRefs {
		errs = append(errs, field.TooMany(rp, len(t.CACertificateRefs), MaxCACertificateRefs))
	}
	for i, r := range t.CACertificateRefs {
		if r.Name == "" {
			errs = append(errs, field.Required(rp.Index(i).Child("name"), "the name of a ConfigMap in the policy's namespace with key "+CACertificateKey))
		} else if msgs := validation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(rp.Index(i).Child("name"), r.Name, "must be a ConfigMap name: "+strings.Join(msgs, "; ")))
		}
	}
	if w := t.WellKnownCACertificates; w != nil {
		switch {
		case *w != WellKnownCACertificatesSystem:
			errs = append(errs, field.NotSupported(p.Child("wellKnownCACertificates"), *w, []WellKnownCACertificates{WellKnownCACertificatesSystem}))
		case len(t.CACertificateRefs) > 0:
			errs = append(errs, field.Forbidden(p.Child("wellKnownCACertificates"),
				"caCertificateRefs and wellKnownCACertificates are mutually exclusive: name the ConfigMaps of a private CA, or use System"))
		}
	}
	return errs
}

// parseDuration returns 0 and no error for an absent duration.
func parseDuration(d *Duration, p *field.Path) (time.Duration, field.ErrorList) {
	if d == nil {
		return 0, nil
	}
	v, msg := rules.ParseDuration(string(*d))
	if msg != "" {
		return 0, field.ErrorList{field.Invalid(p, string(*d), msg)}
	}
	return v, nil
}

// ValidateHostPattern checks one entry of hosts and returns "" when it is valid.
// The grammar is internal/rules' (HostPatternProblem), so the API server and
// every sidecar accept exactly the same patterns; this adds the allowed forms
// to the message.
func ValidateHostPattern(h string) string {
	const allowed = `must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case`
	switch problem := rules.HostPatternProblem(h); problem {
	case "":
		return ""
	case "empty":
		return allowed
	default:
		return problem + "; " + allowed
	}
}
