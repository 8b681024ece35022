// Command chartfiles writes dist/chart/files/rbac.yaml, the chart's RBAC,
// from the two kustomize renderings `make build-installer` writes: every
// Role, ClusterRole, RoleBinding and ClusterRoleBinding with its name, its
// rules or roleRef, and the labels of its own (role aggregation); the chart
// adds its labels, the release namespace and its service account. An object
// found in one rendering only is kept for that certificate mode only. So the
// chart and dist/install*.yaml grant the same rights by construction
// (docs/operations.md, "One source").
//
//	go run ./hack/chartfiles -cert-manager dist/install.yaml \
//	    -self-signed dist/install-selfsigned.yaml -output dist/chart/files/rbac.yaml
package main

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/internal/manifests"
)

// Entry is one RBAC object of the chart (dist/chart/templates/rbac.yaml
// renders it).
type Entry struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// CertificatesMode is the certificates.mode the object belongs to; empty:
	// every mode.
	CertificatesMode string `json:"certificatesMode,omitempty"`
	// Labels are the object's labels other than app.kubernetes.io/*.
	Labels  map[string]string   `json:"labels,omitempty"`
	Rules   []rbacv1.PolicyRule `json:"rules,omitempty"`
	RoleRef *rbacv1.RoleRef     `json:"roleRef,omitempty"`
}

// The bindings of the renderings name this service account; the chart's own
// (serviceAccount.name) replaces it.
const managerServiceAccount = "retry-operator-controller-manager"

func main() {
	certManager := flag.String("cert-manager", "", "rendering of config/default (required)")
	selfSigned := flag.String("self-signed", "", "rendering of config/selfsigned (required)")
	output := flag.String("output", "", "file to write (required)")
	flag.Parse()
	if *certManager == "" || *selfSigned == "" || *output == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*certManager, *selfSigned, *output); err != nil {
		fmt.Fprintln(os.Stderr, "chartfiles:", err)
		os.Exit(1)
	}
}

func run(certManagerFile, selfSignedFile, output string) error {
	cm, err := rbacEntries(certManagerFile)
	if err != nil {
		return err
	}
	ss, err := rbacEntries(selfSignedFile)
	if err != nil {
		return err
	}
	all, err := merge(cm, ss)
	if err != nil {
		return err
	}
	out, err := yaml.Marshal(map[string][]Entry{"objects": all})
	if err != nil {
		return err
	}
	header := "# Generated from config/rbac and config/selfsigned by `make build-installer`\n" +
		"# (hack/chartfiles); do not edit. templates/rbac.yaml renders it.\n"
	return os.WriteFile(output, append([]byte(header), out...), 0o644)
}

// merge lists the entries of both renderings in the self-signed rendering's
// order followed by the cert-manager-only ones, each marked with its mode
// when the other rendering lacks it. An object both have must be identical.
func merge(certManager, selfSigned []Entry) ([]Entry, error) {
	key := func(e Entry) string { return e.Kind + "/" + e.Name }
	var all []Entry
	for _, e := range selfSigned {
		i := slices.IndexFunc(certManager, func(c Entry) bool { return key(c) == key(e) })
		switch {
		case i < 0:
			e.CertificatesMode = "self-signed"
		case !reflect.DeepEqual(certManager[i], e):
			return nil, fmt.Errorf("%s differs between the two renderings: the chart has one of each", key(e))
		}
		all = append(all, e)
	}
	for _, e := range certManager {
		if !slices.ContainsFunc(selfSigned, func(s Entry) bool { return key(s) == key(e) }) {
			e.CertificatesMode = "cert-manager"
			all = append(all, e)
		}
	}
	return all, nil
}

// rbacEntries reads the RBAC objects of a rendering.
func rbacEntries(file string) ([]Entry, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	objs, err := manifests.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var entries []Entry
	for _, o := range objs {
		if o.GroupVersionKind().Group != rbacv1.GroupName {
			continue
		}
		e, err := entry(o)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, manifests.KeyOf(o), err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func entry(o *unstructured.Unstructured) (Entry, error) {
	e := Entry{Kind: o.GetKind(), Name: o.GetName()}
	for k, v := range o.GetLabels() {
		if !strings.HasPrefix(k, "app.kubernetes.io/") {
			if e.Labels == nil {
				e.Labels = map[string]string{}
			}
			e.Labels[k] = v
		}
	}
	switch o.GetKind() {
	case "Role", "ClusterRole":
		var r rbacv1.ClusterRole
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
			return e, err
		}
		if r.AggregationRule != nil {
			return e, fmt.Errorf("an aggregationRule: templates/rbac.yaml does not render one")
		}
		e.Rules = r.Rules
	case "RoleBinding", "ClusterRoleBinding":
		var b rbacv1.ClusterRoleBinding
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			return e, err
		}
		if len(b.Subjects) != 1 || b.Subjects[0].Kind != rbacv1.ServiceAccountKind || b.Subjects[0].Name != managerServiceAccount {
			return e, fmt.Errorf("subjects %v: templates/rbac.yaml binds the manager's service account only", b.Subjects)
		}
		e.RoleRef = &b.RoleRef
	default:
		return e, fmt.Errorf("kind %s: not an RBAC kind templates/rbac.yaml renders", o.GetKind())
	}
	return e, nil
}
