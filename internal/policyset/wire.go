package policyset

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/rules"
)

// This file is the hand-written half of the wire form of an upstream; the
// other half, UpstreamSpec and its conversions, is generated from
// v1alpha1.Upstream by hack/genwire (zz_generated.wire.go). Every reader of
// policies.json (the sidecar, kubectl retry, retrysim) goes through Unmarshal
// and ToConfig, and every writer through RenderUpstream: one conversion path
// each way (docs/manager.md#the-configmap-retry-policies-key-policiesjson).

// fieldDuration is a duration of an upstream and its field path.
type fieldDuration struct {
	path string
	d    time.Duration
}

// parseDuration is the wire value of the API duration at path: the manager's
// one parse of it (rules.ParseDuration, the API's grammar).
func parseDuration(path string, v *v1alpha1.Duration) (*time.Duration, error) {
	if v == nil {
		return nil, nil
	}
	d, problem := rules.ParseDuration(string(*v))
	if problem != "" {
		return nil, fieldError(path, problem, strconv.Quote(string(*v)))
	}
	return &d, nil
}

// formatDuration is the API notation of a wire duration: Go's, with "us" for
// "µs" (the API's grammar is ASCII). Parsing it again gives the same value.
func formatDuration(d *time.Duration) *v1alpha1.Duration {
	if d == nil {
		return nil
	}
	s := v1alpha1.Duration(strings.Replace(d.String(), "µs", "us", 1))
	return &s
}

// Spec converts a RetryPolicy upstream to its wire form with every default
// applied; a duration that does not parse is an error naming its field.
func Spec(u v1alpha1.Upstream) (UpstreamSpec, error) {
	d := Defaulted(u)
	spec, err := upstreamSpecFromAPI(&d, "")
	if err != nil {
		return UpstreamSpec{}, err
	}
	return *spec, nil
}

// Defaulted returns u with every API default applied (v1alpha1.SetDefaults);
// u is not modified.
func Defaulted(u v1alpha1.Upstream) v1alpha1.Upstream {
	p := v1alpha1.RetryPolicy{Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{*u.DeepCopy()}}}
	v1alpha1.SetDefaults(&p)
	return p.Spec.Upstreams[0]
}

// withDefaults returns s with the API defaults applied where a document
// written by hand left them out, so it still means what the API says. A
// rendered upstream has them all and is returned as it is, unparsed; only an
// incomplete one goes through the API's notation and back.
func withDefaults(s UpstreamSpec) (UpstreamSpec, error) {
	api := s.API()
	if d := Defaulted(*api); !equality.Semantic.DeepEqual(*api, d) {
		return Spec(d)
	}
	return s, nil
}

// checkDurations refuses a duration that is not positive: the API allows no
// other, and the wire's integers could say one.
func checkDurations(s *UpstreamSpec) error {
	for _, fd := range s.durations("", nil) {
		if fd.d <= 0 {
			return fieldError(fd.path, rules.DurationProblem, int64(fd.d))
		}
	}
	return nil
}

// legacyDocument is a document of version 1 or 2: each upstream the API's
// Upstream as written (durations as strings), plus what the manager added.
type legacyDocument struct {
	Document
	Policies []struct {
		Policy
		Upstreams []legacyUpstream `json:"upstreams"`
	} `json:"policies"`
}

type legacyUpstream struct {
	v1alpha1.Upstream
	PodRequestsPerMinute float64 `json:"podRequestsPerMinute,omitempty"`
	CABundle             string  `json:"caBundle,omitempty"`
	PodBurst             int32   `json:"podBurst,omitempty"`
}

// legacyWritten is a document of version 2 as the previous release's manager
// wrote it, fields in its order.
type legacyWritten struct {
	Version  int            `json:"version"`
	Revision int64          `json:"revision"`
	Policies []legacyPolicy `json:"policies"`
	Quotas   []Quota        `json:"quotas,omitempty"`
}

type legacyPolicy struct {
	Policy
	Upstreams []legacyUpstream `json:"upstreams"`
}

// legacyOf is doc in the form of version 2 (WrittenVersion): each upstream in
// the API's notation, every default applied, durations formatted from the
// parsed values (which read back to the same values).
func legacyOf(doc Document) legacyWritten {
	out := legacyWritten{Version: doc.Version, Revision: doc.Revision, Policies: make([]legacyPolicy, 0, len(doc.Policies)), Quotas: doc.Quotas}
	for _, p := range doc.Policies {
		lp := legacyPolicy{Policy: p}
		if p.Upstreams != nil {
			lp.Upstreams = make([]legacyUpstream, 0, len(p.Upstreams))
		}
		for _, u := range p.Upstreams {
			lp.Upstreams = append(lp.Upstreams, legacyUpstream{Upstream: *u.API(),
				PodRequestsPerMinute: u.PodRequestsPerMinute, CABundle: u.CABundle, PodBurst: u.PodBurst})
		}
		out.Policies = append(out.Policies, lp)
	}
	return out
}

// unmarshalLegacy decodes a document of version 1 or 2 through Spec, the
// conversion the manager renders with, so an older manager's document means
// to this sidecar what it meant to an older one.
func unmarshalLegacy(data []byte) (Document, error) {
	var legacy legacyDocument
	if err := json.Unmarshal(data, &legacy); err != nil {
		return Document{}, err
	}
	doc := legacy.Document
	doc.Policies = nil
	for _, lp := range legacy.Policies {
		p := lp.Policy
		p.Upstreams = nil
		if lp.Upstreams != nil {
			p.Upstreams = []Upstream{}
		}
		for i, lu := range lp.Upstreams {
			spec, err := Spec(lu.Upstream)
			if err != nil {
				return Document{}, fmt.Errorf("RetryPolicy %s/%s: spec.upstreams[%d].%w", p.Namespace, p.Name, i, err)
			}
			p.Upstreams = append(p.Upstreams, Upstream{UpstreamSpec: spec,
				PodRequestsPerMinute: lu.PodRequestsPerMinute, CABundle: lu.CABundle, PodBurst: lu.PodBurst})
		}
		doc.Policies = append(doc.Policies, p)
	}
	return doc, nil
}
