package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// withCARefs is pol with each upstream naming the ConfigMaps refs.
func withCARefs(name string, ageSec int, refs ...string) v1alpha1.RetryPolicy {
	p := pol(name, ageSec, 1, nil, name+".example")
	p.Spec.Upstreams[0].TLS = &v1alpha1.UpstreamTLS{}
	for _, r := range refs {
		p.Spec.Upstreams[0].TLS.CACertificateRefs = append(p.Spec.Upstreams[0].TLS.CACertificateRefs, v1alpha1.CACertificateRef{Name: r})
	}
	return p
}

func TestComputeBoundsCABundles(t *testing.T) {
	cert := testenv.CAPEM(t, "partner")
	// A fifth of the namespace's budget: five policies naming it fit, a sixth does not.
	fifth := strings.Repeat(cert, v1alpha1.MaxNamespaceCABytes/5/len(cert))
	budget := func(ref string) string {
		return fmt.Sprintf(`spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: %q: the CA certificates the policies of namespace ns name come to more than 1048576 bytes (older policies first), the most its retry-policies ConfigMap holds`, ref)
	}
	tests := map[string]struct {
		policies   []v1alpha1.RetryPolicy
		configMaps map[string]map[string]string
		unread     sets.Set[string]
		want       map[string]string // Accepted message of the refused policies
	}{
		"the policy whose bundles take the namespace over 1 MiB is InvalidRef, the older ones are rendered": {
			policies: []v1alpha1.RetryPolicy{withCARefs("p6", 6, "ca"), withCARefs("p1", 1, "ca"), withCARefs("p2", 2, "ca"),
				withCARefs("p3", 3, "ca"), withCARefs("p4", 4, "ca"), withCARefs("p5", 5, "ca")},
			configMaps: map[string]map[string]string{"ca": {"ca.crt": fifth}},
			want:       map[string]string{"p6": budget("ca")},
		},
		"a ConfigMap left unread is InvalidRef for the budget": {
			policies:   []v1alpha1.RetryPolicy{withCARefs("old", 1, "a"), withCARefs("new", 2, "a", "b")},
			configMaps: map[string]map[string]string{"a": {"ca.crt": cert}},
			unread:     sets.New("b"),
			want:       map[string]string{"new": strings.Replace(budget("b"), "caCertificateRefs[0]", "caCertificateRefs[1]", 1)},
		},
		"a ca.crt over 256 KiB is InvalidRef": {
			policies:   []v1alpha1.RetryPolicy{withCARefs("p", 1, "big")},
			configMaps: map[string]map[string]string{"big": {"ca.crt": strings.Repeat("x", v1alpha1.MaxCACertificateBytes+1)}},
			want:       map[string]string{"p": `spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: "big": key ca.crt of ConfigMap ns/big is over 262144 bytes, the most a CA bundle may hold`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := Compute(Input{Policies: tc.policies, ConfigMaps: tc.configMaps, CAUnread: tc.unread})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.policies {
				acc := out.Status[p.Name].Accepted
				want, refused := tc.want[p.Name]
				switch {
				case refused && (acc.Reason != string(v1alpha1.ReasonInvalidRef) || acc.Message != want):
					t.Errorf("%s: Accepted %s %q\nwant InvalidRef %q", p.Name, acc.Reason, acc.Message, want)
				case !refused && acc.Reason != string(v1alpha1.ReasonValid):
					t.Errorf("%s: Accepted %s %q, want Valid", p.Name, acc.Reason, acc.Message)
				}
			}
		})
	}
}

// configMapReader serves ConfigMaps by name and records the names asked for.
type configMapReader struct {
	client.Reader
	data  map[string]map[string]string
	asked []string
}

func (r *configMapReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.asked = append(r.asked, key.Name)
	d, ok := r.data[key.Name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	obj.(*corev1.ConfigMap).Data = d
	return nil
}

func TestCAConfigMapsHoldsAtMostTheBudget(t *testing.T) {
	quarter := strings.Repeat("q", v1alpha1.MaxNamespaceCABytes/4)
	reader := &configMapReader{data: map[string]map[string]string{
		"huge": {"ca.crt": strings.Repeat("h", 2*v1alpha1.MaxCACertificateBytes), "other": "kept out"},
		"q1":   {"ca.crt": quarter}, "q2": {"ca.crt": quarter}, "q3": {"ca.crt": quarter}, "q4": {"ca.crt": quarter},
		"nokey": {"tls.crt": "x"},
	}}
	r := &RetryPolicyReconciler{Reader: reader}
	// Read oldest policy first: huge (cut to 256 KiB + 1), nokey, missing,
	// q1, q2 and q3 (3 × 256 KiB): 1 MiB + 1 byte, the budget is spent.
	policies := []v1alpha1.RetryPolicy{withCARefs("new", 2, "q4", "q1", "last"), withCARefs("old", 1, "huge", "nokey", "missing", "q1", "q2", "q3")}
	data, unread, err := r.caConfigMaps(context.Background(), "ns", policies)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"huge", "nokey", "missing", "q1", "q2", "q3"}; !slices.Equal(reader.asked, want) {
		t.Errorf("read %q, want %q", reader.asked, want)
	}
	if want := sets.New("q4", "last"); !unread.Equal(want) {
		t.Errorf("unread %v, want %v", sets.List(unread), sets.List(want))
	}
	if got := data["huge"]; len(got) != 1 || len(got["ca.crt"]) != v1alpha1.MaxCACertificateBytes+1 {
		t.Errorf("huge holds %d keys, ca.crt of %d bytes; want only ca.crt, cut to %d bytes", len(got), len(got["ca.crt"]), v1alpha1.MaxCACertificateBytes+1)
	}
	if got, ok := data["nokey"]; !ok || len(got) != 0 {
		t.Errorf("nokey = %v (present %v), want an empty map", got, ok)
	}
	if _, ok := data["missing"]; ok {
		t.Error("a missing ConfigMap is in the data")
	}
}
