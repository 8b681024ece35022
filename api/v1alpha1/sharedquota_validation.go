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
	"net"
	"strconv"
	"strings"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/retrydev/retry-operator/internal/rules"
)

// The integer fields of a SharedQuota spec and their ranges; the schema
// markers of sharedquota_types.go repeat them (TestCRDMarkersEqualRules).
var (
	QuotaRequestsPerMinuteRange = rules.Range{Path: "requestsPerMinute", Min: 1, Max: 6_000_000}
	QuotaRequestsPerSecondRange = rules.Range{Path: "requestsPerSecond", Min: 1, Max: 100_000}
	QuotaBurstRange             = rules.Range{Path: "burst", Min: 1, Max: 10_000}
	QuotaConcurrencyRange       = rules.Range{Path: "concurrency", Min: 1, Max: 10_000}
)

// QuotaRanges lists the ranges of a SharedQuota spec's integer fields.
func QuotaRanges() []rules.Range {
	return []rules.Range{QuotaRequestsPerMinuteRange, QuotaRequestsPerSecondRange, QuotaBurstRange, QuotaConcurrencyRange}
}

// Defaults of a SharedQuota, identical to its +kubebuilder:default markers.
const (
	DefaultQuotaBurst  int32           = 1
	DefaultOnStoreLoss StoreLossPolicy = StoreLossLastShare
	// MaxRedisAddressLength bounds store.redis.address: a DNS name (253), a
	// colon and a port, or a bracketed IPv6 literal and a port.
	MaxRedisAddressLength = 261
)

// SetSharedQuotaDefaults fills every absent optional field of q with its
// default, in place, exactly as the API server's structural defaulting does.
func SetSharedQuotaDefaults(q *SharedQuota) {
	setIfNil(&q.Spec.Burst, DefaultQuotaBurst)
	setIfNil(&q.Spec.OnStoreLoss, DefaultOnStoreLoss)
}

// ValidateSharedQuota checks a SharedQuota against every rule of the API: the
// ones the CRD schema and CEL enforce (repeated so a SharedQuota given to the
// sidecar as a file is judged the same way) and the ones they cannot express
// (the selector's syntax, the address's host and port). Messages name the
// field path first and the allowed values:
//
//	spec.requestsPerSecond: Forbidden: exactly one of requestsPerMinute or requestsPerSecond is required
func ValidateSharedQuota(q *SharedQuota) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	s := &q.Spec
	switch {
	case s.RequestsPerMinute == nil && s.RequestsPerSecond == nil:
		errs = append(errs, field.Required(spec.Child("requestsPerMinute"), "exactly one of requestsPerMinute or requestsPerSecond is required"))
	case s.RequestsPerMinute != nil && s.RequestsPerSecond != nil:
		errs = append(errs, field.Forbidden(spec.Child("requestsPerSecond"), "exactly one of requestsPerMinute or requestsPerSecond is required"))
	}
	errs = appendQuotaRange(errs, spec, QuotaRequestsPerMinuteRange, s.RequestsPerMinute)
	errs = appendQuotaRange(errs, spec, QuotaRequestsPerSecondRange, s.RequestsPerSecond)
	errs = appendQuotaRange(errs, spec, QuotaBurstRange, s.Burst)
	errs = appendQuotaRange(errs, spec, QuotaConcurrencyRange, s.Concurrency)
	if c := s.Consumers; c != nil && c.NamespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(c.NamespaceSelector,
			metav1validation.LabelSelectorValidationOptions{}, spec.Child("consumers", "namespaceSelector"))...)
	}
	rp := spec.Child("store", "redis")
	if msg := RedisAddressProblem(s.Store.Redis.Address); msg != "" {
		errs = append(errs, field.Invalid(rp.Child("address"), s.Store.Redis.Address, msg))
	}
	if ref := s.Store.Redis.CredentialsSecretRef; ref != nil {
		errs = append(errs, validateObjectName(ref.Name, rp.Child("credentialsSecretRef", "name"), "Secret")...)
	}
	if l := s.OnStoreLoss; l != nil && !isStoreLossPolicy(*l) {
		errs = append(errs, field.NotSupported(spec.Child("onStoreLoss"), *l, StoreLossPolicies()))
	}
	return errs
}

// RedisAddressProblem checks store.redis.address: host:port, the host a DNS
// name or an IP literal (IPv6 in brackets), the port 1..65535.
func RedisAddressProblem(addr string) string {
	const allowed = `must be host:port, such as redis.retry-operator-system.svc:6379, 10.0.0.7:6379 or [fd00::7]:6379`
	if len(addr) > MaxRedisAddressLength {
		return "must be at most " + strconv.Itoa(MaxRedisAddressLength) + " characters; " + allowed
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return allowed
	}
	if n, err := strconv.Atoi(port); err != nil || rules.PortRange.Problem(int64(n)) != "" {
		return "port " + strconv.Quote(port) + " must be between 1 and 65535; " + allowed
	}
	if net.ParseIP(host) != nil {
		if strings.Contains(host, ":") && !strings.HasPrefix(addr, "[") {
			return allowed
		}
		return ""
	}
	if msg := rules.DNSNameProblem(host); msg != "" {
		return "host " + strconv.Quote(host) + ": " + msg + "; " + allowed
	}
	return ""
}

// validateQuotaRef checks an upstream's quotaRef at path p.
func validateQuotaRef(r *QuotaRef, p *field.Path) field.ErrorList {
	return validateObjectName(r.Name, p.Child("name"), "SharedQuota")
}

// validateObjectName checks the name of a kind's object (a DNS-1123 subdomain).
func validateObjectName(name string, p *field.Path, kind string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "the name of a "+kind)}
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, name, "must be a "+kind+" name: "+strings.Join(msgs, "; "))}
	}
	return nil
}

func isStoreLossPolicy(l StoreLossPolicy) bool {
	for _, v := range StoreLossPolicies() {
		if v == l {
			return true
		}
	}
	return false
}

// appendQuotaRange adds an error at spec + r.Path if v is set and outside r.
func appendQuotaRange(errs field.ErrorList, spec *field.Path, r rules.Range, v *int32) field.ErrorList {
	if v == nil {
		return errs
	}
	if msg := r.Problem(int64(*v)); msg != "" {
		errs = append(errs, field.Invalid(spec.Child(r.Path), *v, msg))
	}
	return errs
}

// setIfNil points *p at a copy of v when it points nowhere.
func setIfNil[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}
