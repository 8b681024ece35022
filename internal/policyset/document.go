// Package policyset is the contract between the manager and the sidecar: the
// versioned JSON document the manager renders into each namespace's
// retry-policies ConfigMap, and the sidecar's way of turning that document (or
// RetryPolicy YAML files) into the compiled policies that apply to one pod.
// One job a file:
//
//	document.go, wire.go, render.go   the wire format: the Document, its versions, Marshal and Unmarshal
//	load.go                           RetryPolicy YAML files read into a Document (the standalone sidecar)
//	compile.go                        the sidecar's compile: Select, Compile, ToConfig, Names
//	share.go                          the share maths: one pod's part of a fleet-wide rate limit
//	quota.go, credentials.go, tls.go  SharedQuotas, store credentials and CA bundles in the Document
package policyset

import (
	"time"

	"github.com/retrydev/retry-operator/internal/gatewayroute"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DocumentVersion is the newest version of Document; it is bumped on any
// incompatible change. A sidecar refuses a document whose version it does not
// know (and keeps its old config). Unmarshal reads the earlier versions too,
// so a sidecar reads what an older manager wrote
// (docs/operations.md#version-skew):
//
//	1  durations as API strings ("10s"), no quotas
//	2  as 1, with quotas whose store the sidecar reaches itself (a Redis
//	   address and the file of the namespace's Redis user)
//	3  durations parsed: integer nanoseconds; quotas as in 2
//	4  as 3; quotas name the manager's lease endpoint (lease), never a store
//	5  as 4, with upstreams rendered from Gateway API routes (Upstream.Route)
const DocumentVersion = 5

// WrittenVersion is the version Marshal writes a document without quotas in.
// A reader ships one release before its writer: the sidecars of the previous
// release read versions 1 and 2 only, and a pod keeps its sidecar until it is
// recreated, so this release still writes 2 (durations in the API's notation,
// formatted from the parsed values) and reads 3 and 4
// (docs/operations.md#version-skew).
const WrittenVersion = 2

// QuotaWrittenVersion is the version Marshal writes a document with quotas in.
// Version 4 breaks the one-release rule on purpose: a quota entry of versions
// 2 and 3 sends a sidecar to the store with its namespace's Redis user, which
// no longer exists (docs/quota.md#trust). A sidecar of an earlier release
// refuses version 4 and keeps the configuration in force, whose store then
// refuses it: it admits what onStoreLoss says, never unlimited traffic, until
// its pod is recreated.
const QuotaWrittenVersion = 4

// RouteWrittenVersion is the version Marshal writes a document with route
// upstreams (Upstream.Route) in, with or without quotas. It breaks the
// one-release rule on purpose, like QuotaWrittenVersion: a sidecar of an
// earlier release knows no Route and would match a route rule's upstream by
// its hosts alone, for every request, ahead of the route's matches and
// precedence. It refuses version 5 and keeps the configuration in force
// instead (docs/operations.md#version-skew).
const RouteWrittenVersion = 5

// Document is the content of ConfigMap retry-policies, key policies.json, in
// memory every duration parsed; Marshal writes it in WrittenVersion (in
// RouteWrittenVersion when it has route upstreams, else in
// QuotaWrittenVersion when it has quotas):
//
//	{"version":2,"revision":1796083200,"policies":[{"namespace":"shop","name":"payments","generation":3,
//	  "podSelector":{"matchLabels":{"app":"checkout"}},
//	  "upstreams":[{"name":"payments-api","hosts":["payments.shop.svc"],"maxAttempts":4,"deadline":"10s",…,
//	                "podRequestsPerMinute":45}]}]}
//
// and in version 3 "deadline":10000000000 (integer nanoseconds).
//
// Policies are sorted by (namespace, name) and upstreams keep their order in the
// spec, so identical input gives byte-identical output.
//
// Revision orders the renderings of one namespace: the manager gives every
// content change a higher revision (NextRevision), and a sidecar never applies
// a document with a lower revision than the one in force, whichever way it
// arrived (API watch or mounted file; docs/fleet.md). A document without one is
// revision 0.
//
// Quotas holds, sorted by name, every SharedQuota an upstream of Policies names
// in quotaRef, as the sidecars use it (Quota states the contract); a document
// with an upstream whose quotaRef has no entry here is refused.
type Document struct {
	Version  int      `json:"version"`
	Revision int64    `json:"revision"`
	Policies []Policy `json:"policies"`
	Quotas   []Quota  `json:"quotas,omitempty"`
}

// NextRevision is the revision of a rendering whose content differs from the
// one at revision previous (0 when there is none):
//
//	max(previous+1, now in Unix seconds)
//
//	previous = 0,          now = 1796083200  ->  1796083200 (first rendering)
//	previous = 1796083200, now = 1796083200  ->  1796083201 (second edit in that second)
//	previous = 1796083201, now = 1796083260  ->  1796083260
//
// The clock term is what keeps the order when everything that remembered the
// previous revision is gone (the ConfigMap deleted with its last policy, then a
// new policy created): a running sidecar still holds the old revision, and a
// counter restarting at 1 would be refused by it. The +1 term keeps the order
// within a second and across a clock that steps back.
func NextRevision(previous int64, now time.Time) int64 {
	return max(previous+1, now.Unix())
}

// Policy is one accepted RetryPolicy as rendered for the sidecars.
type Policy struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	// PodSelector selects pods by their labels; nil or empty selects every pod.
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	Upstreams   []Upstream            `json:"upstreams"`
}

// Upstream is a RetryPolicy upstream with every default applied and every
// duration parsed (UpstreamSpec, generated from v1alpha1.Upstream), plus what
// the manager works out for the pods: the per-pod share of the fleet-wide rate
// limit and the CA bundle. RenderUpstream builds it from the API type.
type Upstream struct {
	UpstreamSpec
	// PodRequestsPerMinute is rateLimit.requestsPerMinute / max(1, ready selected
	// pods): what one sidecar may start so the fleet stays in one account quota.
	// Zero when rateLimit is not set.
	PodRequestsPerMinute float64 `json:"podRequestsPerMinute,omitempty"`
	// CABundle is the PEM of the ConfigMaps named by tls.caCertificateRefs, resolved
	// by the manager (ResolveCABundles), so the sidecar reads one document; empty
	// when the upstream has no refs (the system roots apply).
	CABundle string `json:"caBundle,omitempty"`
	// PodBurst is rateLimit.burst shared the same way, rounded up and at least
	// 1 (PodBurst). Zero when rateLimit is not set.
	PodBurst int32 `json:"podBurst,omitempty"`
	// Route is set on an upstream rendered from a Gateway API route rule
	// (internal/gatewayroute): the requests to its hosts it applies to. Such
	// upstreams go to the RouteTable, never to the host-matched Set, and
	// several share a name: the Service's, whose budget they share.
	Route *gatewayroute.Route `json:"route,omitempty"`
}

// ConfigStatus is a sidecar's answer to GET /config on its stats port (:15090):
// which policies.json it runs. The manager counts a pod as running a policy
// generation once Revision reaches the revision that first held it
// (docs/fleet.md).
//
//	{"revision":1796083201,"hash":"sha256:3f2a…","source":"api"}
type ConfigStatus struct {
	// Revision of the policies.json in force; 0 with policy files only.
	Revision int64 `json:"revision"`
	// Hash is the content hash of the policies in force (Hash).
	Hash string `json:"hash"`
	// Source is where they came from: "api" (the API server watch), "file"
	// (the mounted ConfigMap) or "policy-file" (RetryPolicy YAML files).
	Source string `json:"source"`
	// SHA256 is the full sha256 of the same bytes, hex; Upstreams the upstream
	// names selected for this pod. For people and dashboards.
	SHA256    string   `json:"sha256,omitempty"`
	Upstreams []string `json:"upstreams,omitempty"`
}
