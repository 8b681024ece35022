package policyset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// Marshal encodes doc as the policies.json value of the ConfigMap. It sorts the
// policies by (namespace, name) on a copy, so the same set of policies gives the
// same bytes whatever order they were listed in; encoding/json already sorts map
// keys (matchLabels) and follows struct field order. The result is indented, for
// the humans who `kubectl get cm retry-policies -o yaml`, and ends in a newline.
//
// Byte-identical output is what lets the reconciler skip a write (and the kubelet
// skip a volume update, and the sidecar skip a reload) when nothing changed.
func Marshal(doc Document) ([]byte, error) {
	quotas := append([]Quota(nil), doc.Quotas...)
	sort.Slice(quotas, func(i, j int) bool { return quotas[i].Name < quotas[j].Name })
	doc.Quotas = quotas
	policies := append([]Policy(nil), doc.Policies...)
	sort.SliceStable(policies, func(i, j int) bool { // a route may share a RetryPolicy's name: kept in their order
		if policies[i].Namespace != policies[j].Namespace {
			return policies[i].Namespace < policies[j].Namespace
		}
		return policies[i].Name < policies[j].Name
	})
	if policies == nil {
		policies = []Policy{} // "policies":[] rather than null, for readers in any language
	}
	doc.Policies = policies
	switch {
	case HasRoutes(doc):
		return encode(doc, RouteWrittenVersion)
	case len(doc.Quotas) > 0:
		return encode(doc, QuotaWrittenVersion)
	}
	return encode(doc, WrittenVersion)
}

// HasRoutes reports whether an upstream of doc was rendered from a Gateway
// API route (Upstream.Route): such a document is written in
// RouteWrittenVersion.
func HasRoutes(doc Document) bool {
	for _, p := range doc.Policies {
		for _, u := range p.Upstreams {
			if u.Route != nil {
				return true
			}
		}
	}
	return false
}

// encode writes doc in version (2 to 5).
func encode(doc Document, version int) ([]byte, error) {
	doc.Version = version
	var v any = doc
	if version < 3 {
		v = legacyOf(doc)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // hosts and selectors are not HTML; keep them readable
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", v1alpha1.PoliciesConfigMapKey, err)
	}
	return buf.Bytes(), nil
}

// PeekRevision reads only the revision of a policies.json value, for choosing
// between two deliveries of it before the chosen one is decoded in full.
func PeekRevision(data []byte) (int64, error) {
	var head struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return 0, fmt.Errorf("decoding %s: %w", v1alpha1.PoliciesConfigMapKey, err)
	}
	return head.Revision, nil
}

// Unmarshal decodes a policies.json value of any version this sidecar knows
// (DocumentVersion and the earlier ones, which it converts). It refuses a
// document of another version rather than guess at its meaning.
func Unmarshal(data []byte) (Document, error) {
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Document{}, fmt.Errorf("decoding %s: %w", v1alpha1.PoliciesConfigMapKey, err)
	}
	var doc Document
	var err error
	switch head.Version {
	case 3, QuotaWrittenVersion, RouteWrittenVersion:
		err = json.Unmarshal(data, &doc)
	case 1, 2:
		doc, err = unmarshalLegacy(data)
	default:
		return Document{}, fmt.Errorf("decoding %s: version %d is not supported (supported: 1 to %d)", v1alpha1.PoliciesConfigMapKey, head.Version, DocumentVersion)
	}
	if err != nil {
		return Document{}, fmt.Errorf("decoding %s: %w", v1alpha1.PoliciesConfigMapKey, err)
	}
	if err := CheckQuotaRefs(doc); err != nil {
		return Document{}, fmt.Errorf("decoding %s: %w", v1alpha1.PoliciesConfigMapKey, err)
	}
	if head.Version < RouteWrittenVersion && HasRoutes(doc) {
		return Document{}, fmt.Errorf("decoding %s: version %d: an upstream has a route, which needs version %d (no manager writes it)",
			v1alpha1.PoliciesConfigMapKey, head.Version, RouteWrittenVersion)
	}
	return doc, nil
}

// Hash is the content hash of a rendered document, "sha256:" and the first 16 hex
// digits: enough to tell renderings apart in a condition message or a log line.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// RenderUpstream returns the wire form of u (Spec: every default applied and
// every duration parsed, so the sidecar needs no knowledge of API defaults and
// parses nothing) and its per-pod share of the fleet-wide rate limit:
//
//	rateLimit {requestsPerMinute: 90, burst: 3}, ready selected pods = 4  ->  podRequestsPerMinute 22.5, podBurst 1
//	rateLimit {requestsPerMinute: 90, burst: 5}, ready selected pods = 2  ->  podRequestsPerMinute 45, podBurst 3
//	rateLimit {requestsPerMinute: 90, burst: 3}, ready selected pods = 0  ->  podRequestsPerMinute 90, podBurst 3
//	no rateLimit                                                          ->  both 0 (omitted)
//
// u is not modified. A duration that does not parse is an error naming its
// field (u is not valid: the manager renders only valid policies).
func RenderUpstream(u v1alpha1.Upstream, readyPods int32) (Upstream, error) {
	spec, err := Spec(u)
	if err != nil {
		return Upstream{}, err
	}
	out := Upstream{UpstreamSpec: spec}
	if out.RateLimit != nil {
		out.PodRequestsPerMinute = PodShare(out.RateLimit.RequestsPerMinute, readyPods)
		out.PodBurst = PodBurst(*out.RateLimit.Burst, readyPods)
	}
	return out, nil
}
