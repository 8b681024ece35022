package dist_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/retrydev/retry-operator/internal/manager"
	"github.com/retrydev/retry-operator/internal/manifests"
)

// grants is every rule of every Role and ClusterRole the artefacts render
// (dist/install*.yaml and the chart in both certificate modes), one line per
// rule: a rule not listed fails TestRBACIsReviewed, so a new right is read by
// someone before it ships, and a line nothing renders any more fails too.
//
// The value is why the rule may write without naming its objects: a write
// verb other than create (create cannot be limited by name, the object does
// not exist yet) on a rule without resourceNames needs a reason here; other
// rules have none (docs/operations.md, "RBAC").
var grants = map[string]string{
	// The manager (generated from the +kubebuilder:rbac markers).
	"ClusterRole/retry-operator-manager-role: create,get /configmaps":                                                             "",
	"ClusterRole/retry-operator-manager-role: delete,list,patch,watch /configmaps [retry-policies]":                               "",
	"ClusterRole/retry-operator-manager-role: get,list,watch /namespaces,pods,services":                                           "",
	"ClusterRole/retry-operator-manager-role: get,list,watch gateway.networking.k8s.io/httproutes":                                "",
	"ClusterRole/retry-operator-manager-role: patch,update gateway.networking.k8s.io/httproutes/status":                           "the manager writes its own status.parents entries of every HTTPRoute whose parent is a Service, whatever its name",
	"ClusterRole/retry-operator-manager-role: get,list,watch gateway.networking.x-k8s.io/xbackendtrafficpolicies":                 "",
	"ClusterRole/retry-operator-manager-role: create authentication.k8s.io/tokenreviews":                                          "",
	"ClusterRole/retry-operator-manager-role: create,patch events.k8s.io/events":                                                  "the event recorder patches the series count of an event it created; event names are generated",
	"ClusterRole/retry-operator-manager-role: get,list,watch policy.retry.dev/retrypolicies,sharedquotas":                         "",
	"ClusterRole/retry-operator-manager-role: get,patch policy.retry.dev/retrypolicies/status,sharedquotas/status":                "the controllers report the status of every RetryPolicy and SharedQuota, whatever its name",
	"ClusterRole/retry-operator-manager-role: bind,get rbac.authorization.k8s.io/clusterroles [retry-operator-sidecar]":           "",
	"ClusterRole/retry-operator-manager-role: create rbac.authorization.k8s.io/rolebindings":                                      "",
	"ClusterRole/retry-operator-manager-role: delete,get,list,patch,watch rbac.authorization.k8s.io/rolebindings [retry-sidecar]": "",
	// Leader election in the manager's namespace.
	"Role/retry-operator-leader-election-role: create coordination.k8s.io/leases":                                                   "",
	"Role/retry-operator-leader-election-role: get,list,update,watch coordination.k8s.io/leases [" + manager.LeaderElectionID + "]": "",
	"Role/retry-operator-leader-election-role: create,patch /events":                                                                "the event recorder patches the count of an event it created; event names are generated",
	// The admin credentials of SharedQuota stores, read by name in the manager's namespace.
	"Role/retry-operator-quota-admin-secret-role: get /secrets": "",
	// Self-signed certificates (cert-controller).
	"Role/retry-operator-cert-rotator: get,list,watch /secrets":                                                                                                      "",
	"Role/retry-operator-cert-rotator: create /secrets":                                                                                                              "",
	"Role/retry-operator-cert-rotator: update /secrets [retry-operator-webhook-server-cert]":                                                                         "",
	"ClusterRole/retry-operator-cert-rotator: get,list,watch admissionregistration.k8s.io/mutatingwebhookconfigurations,validatingwebhookconfigurations":             "",
	"ClusterRole/retry-operator-cert-rotator: update admissionregistration.k8s.io/mutatingwebhookconfigurations [retry-operator-mutating-webhook-configuration]":     "",
	"ClusterRole/retry-operator-cert-rotator: update admissionregistration.k8s.io/validatingwebhookconfigurations [retry-operator-validating-webhook-configuration]": "",
	// The startupapicheck hook's dry-run create of a probe policy (chart only).
	"Role/retry-operator-startupapicheck: create policy.retry.dev/retrypolicies": "",
	// Metrics: the manager authenticates and authorizes its scrapers.
	"ClusterRole/retry-operator-metrics-auth-role: create authentication.k8s.io/tokenreviews":        "",
	"ClusterRole/retry-operator-metrics-auth-role: create authorization.k8s.io/subjectaccessreviews": "",
	"ClusterRole/retry-operator-metrics-reader: get nonResourceURLs=/metrics":                        "",
	// The sidecars, bound per namespace by the manager.
	"ClusterRole/retry-operator-sidecar: get,list,watch /configmaps [retry-policies]": "",
	// People: folded into the built-in admin, edit and view roles.
	"ClusterRole/retry-operator-retrypolicy-admin-role: * policy.retry.dev/retrypolicies":                                          "aggregated into the built-in admin role: a namespace's admins manage its RetryPolicies",
	"ClusterRole/retry-operator-retrypolicy-admin-role: get policy.retry.dev/retrypolicies/status":                                 "",
	"ClusterRole/retry-operator-retrypolicy-editor-role: create,delete,get,list,patch,update,watch policy.retry.dev/retrypolicies": "aggregated into the built-in edit role: whoever edits a namespace's objects edits its RetryPolicies",
	"ClusterRole/retry-operator-retrypolicy-editor-role: get policy.retry.dev/retrypolicies/status":                                "",
	"ClusterRole/retry-operator-retrypolicy-viewer-role: get,list,watch policy.retry.dev/retrypolicies":                            "",
	"ClusterRole/retry-operator-retrypolicy-viewer-role: get policy.retry.dev/retrypolicies/status":                                "",
	// People: SharedQuotas are cluster-scoped, their roles bound by a platform team.
	"ClusterRole/retry-operator-sharedquota-admin-role: * policy.retry.dev/sharedquotas":                                          "bound cluster-wide by the platform team that manages the partner accounts' quotas",
	"ClusterRole/retry-operator-sharedquota-admin-role: get policy.retry.dev/sharedquotas/status":                                 "",
	"ClusterRole/retry-operator-sharedquota-editor-role: create,delete,get,list,patch,update,watch policy.retry.dev/sharedquotas": "bound cluster-wide by the platform team that manages the partner accounts' quotas",
	"ClusterRole/retry-operator-sharedquota-editor-role: get policy.retry.dev/sharedquotas/status":                                "",
	"ClusterRole/retry-operator-sharedquota-viewer-role: get,list,watch policy.retry.dev/sharedquotas":                            "",
	"ClusterRole/retry-operator-sharedquota-viewer-role: get policy.retry.dev/sharedquotas/status":                                "",
}

// readVerbs are the verbs that change nothing.
var readVerbs = []string{"get", "list", "watch"}

// TestRBACIsReviewed enumerates the rendered RBAC of every artefact: each
// rule must be in grants, and a rule that may write (a verb other than get,
// list, watch and create) without resourceNames must say why.
func TestRBACIsReviewed(t *testing.T) {
	renderings := map[string][]*unstructured.Unstructured{
		"dist/install.yaml":                      readManifests(t, "install.yaml"),
		"dist/install-selfsigned.yaml":           readManifests(t, "install-selfsigned.yaml"),
		"the chart (cert-manager)":               helmTemplate(t),
		"the chart (self-signed, prometheus on)": helmTemplate(t, append([]string{"--set", "certificates.mode=self-signed"}, monitorsOn...)...),
	}
	rendered := map[string]bool{}
	for source, objs := range renderings {
		for _, o := range objs {
			if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
				continue
			}
			var role rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role); err != nil {
				t.Fatalf("%s: %s: %v", source, manifests.KeyOf(o), err)
			}
			for _, r := range role.Rules {
				line := ruleLine(o.GetKind(), o.GetName(), r)
				rendered[line] = true
				why, reviewed := grants[line]
				switch {
				case !reviewed && broadWrite(r):
					t.Errorf("%s: rule not reviewed, and it writes without resourceNames: %q", source, line)
				case !reviewed:
					t.Errorf("%s: rule not reviewed (add it to grants if it must be): %q", source, line)
				case broadWrite(r) && why == "":
					t.Errorf("%s: %q writes without resourceNames: limit it by name or give the reason in grants", source, line)
				case !broadWrite(r) && why != "":
					t.Errorf("grants gives a reason for %q, which needs none: drop it", line)
				}
			}
		}
	}
	for line := range grants {
		if !rendered[line] {
			t.Errorf("grants lists %q, which no artefact renders any more: drop it", line)
		}
	}
}

// broadWrite reports whether r allows a write other than create on objects
// it does not name.
func broadWrite(r rbacv1.PolicyRule) bool {
	if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
		return false
	}
	return slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "create" && !slices.Contains(readVerbs, v) })
}

// ruleLine is "Kind/name: verbs group/resources [names]", the verbs sorted,
// the core group empty.
func ruleLine(kind, name string, r rbacv1.PolicyRule) string {
	verbs := slices.Sorted(slices.Values(r.Verbs))
	if len(r.NonResourceURLs) > 0 {
		return fmt.Sprintf("%s/%s: %s nonResourceURLs=%s", kind, name, strings.Join(verbs, ","), strings.Join(r.NonResourceURLs, ","))
	}
	line := fmt.Sprintf("%s/%s: %s %s/%s", kind, name, strings.Join(verbs, ","), strings.Join(r.APIGroups, ","), strings.Join(r.Resources, ","))
	if len(r.ResourceNames) > 0 {
		line += " [" + strings.Join(r.ResourceNames, ",") + "]"
	}
	return line
}
