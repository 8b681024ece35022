package manager

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// testTLS: caCertificateRefs are resolved into policies.json, a missing
// ConfigMap or key or one over 256 KiB is InvalidRef with the last rendering
// kept, a CA rotation re-renders (the harness reads them again every second,
// CARecheck), and invalid tls fields are rejected naming the field.
func (h *harness) testTLS(t *testing.T) {
	ns := h.namespace(t, "tls", nil)
	ctx := context.Background()
	caA, caB := testenv.CAPEM(t, "partner-a"), testenv.CAPEM(t, "partner-b")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "partner-ca"}, Data: map[string]string{"ca.crt": caA}}
	must(t, h.c.Create(ctx, cm))

	u := upstream("partner", "api.partner.example")
	u.TLS = &v1alpha1.UpstreamTLS{Hostname: ptr.To("api.partner.example"), CACertificateRefs: []v1alpha1.CACertificateRef{{Name: "partner-ca"}}}
	h.createPolicy(t, ns, "partner", nil, u)
	h.waitAccepted(t, ns, "partner", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	waitBundle(t, h, ns, caA)

	t.Run("a CA rotation re-renders policies.json with the new PEM", func(t *testing.T) {
		cm.Data["ca.crt"] = caA + caB
		must(t, h.c.Update(ctx, cm))
		waitBundle(t, h, ns, caA+caB)
	})

	t.Run("a ConfigMap without ca.crt is InvalidRef and the last rendering stays", func(t *testing.T) {
		cm.Data = map[string]string{"tls.crt": caB}
		must(t, h.c.Update(ctx, cm))
		p := h.waitAccepted(t, ns, "partner", metav1.ConditionFalse, string(v1alpha1.ReasonInvalidRef))
		acc := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
		want := `spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: "partner-ca": ConfigMap tls/partner-ca has no key ca.crt; generation 1, the last accepted, stays in force`
		if acc.Message != want {
			t.Errorf("Accepted message %q\nwant %q", acc.Message, want)
		}
		waitBundle(t, h, ns, caA+caB)
	})

	t.Run("a policy naming a ConfigMap that does not exist is InvalidRef and not rendered", func(t *testing.T) {
		u2 := upstream("other", "api.other.example")
		u2.TLS = &v1alpha1.UpstreamTLS{CACertificateRefs: []v1alpha1.CACertificateRef{{Name: "other-ca"}}}
		h.createPolicy(t, ns, "other", nil, u2)
		p := h.waitAccepted(t, ns, "other", metav1.ConditionFalse, string(v1alpha1.ReasonInvalidRef))
		acc := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionAccepted))
		if want := `spec.upstreams[0].tls.caCertificateRefs[0].name: Not found: "other-ca": ConfigMap tls/other-ca does not exist`; acc.Message != want {
			t.Errorf("Accepted message %q\nwant %q", acc.Message, want)
		}
		if prog := meta.FindStatusCondition(p.Status.Conditions, string(v1alpha1.ConditionProgrammed)); prog == nil || prog.Status != metav1.ConditionFalse {
			t.Errorf("Programmed = %+v, want False", prog)
		}

		// Creating the ConfigMap afterwards is enough: the policy is accepted.
		must(t, h.c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-ca"}, Data: map[string]string{"ca.crt": caB}}))
		h.waitAccepted(t, ns, "other", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
	})

	t.Run("a ca.crt over 256 KiB is InvalidRef naming the field and the last rendering stays", func(t *testing.T) {
		cm.Data = map[string]string{"ca.crt": strings.Repeat(caB, v1alpha1.MaxCACertificateBytes/len(caB)+1)}
		must(t, h.c.Update(ctx, cm))
		want := `spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: "partner-ca": key ca.crt of ConfigMap tls/partner-ca is over 262144 bytes, the most a CA bundle may hold; generation 1, the last accepted, stays in force`
		polltest.Until(t, 10*time.Second, func() error {
			acc := meta.FindStatusCondition(h.policy(t, ns, "partner").Status.Conditions, string(v1alpha1.ConditionAccepted))
			if acc == nil || acc.Reason != string(v1alpha1.ReasonInvalidRef) || acc.Message != want {
				return fmt.Errorf("Accepted = %+v, want InvalidRef %q", acc, want)
			}
			return nil
		})
		waitBundle(t, h, ns, caA+caB)
	})

	t.Run("restoring the key makes the policy Accepted again with the new CA", func(t *testing.T) {
		cm.Data = map[string]string{"ca.crt": caB}
		must(t, h.c.Update(ctx, cm))
		h.waitAccepted(t, ns, "partner", metav1.ConditionTrue, string(v1alpha1.ReasonValid))
		waitBundle(t, h, ns, caB)
	})

	t.Run("invalid tls fields are rejected by the API server naming the field", func(t *testing.T) {
		h.invalidTLSFieldsAreRejected(t, ns)
	})
}

// invalidTLSFieldsAreRejected creates, in ns, a policy whose tls has a port
// of 0 and both caCertificateRefs and wellKnownCACertificates: the API
// server refuses it, naming both fields.
func (h *harness) invalidTLSFieldsAreRejected(t *testing.T, ns string) {
	ctx := context.Background()
	bad := upstream("bad", "api.bad.example")
	bad.TLS = &v1alpha1.UpstreamTLS{Port: ptr.To[int32](0), CACertificateRefs: []v1alpha1.CACertificateRef{{Name: "partner-ca"}},
		WellKnownCACertificates: ptr.To(v1alpha1.WellKnownCACertificatesSystem)}
	err := h.c.Create(ctx, policy(ns, "bad", nil, bad))
	if !apierrors.IsInvalid(err) {
		t.Fatalf("err = %v, want 422 Invalid", err)
	}
	for _, want := range []string{"spec.upstreams[0].tls.port", "spec.upstreams[0].tls.wellKnownCACertificates"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not name %s", err, want)
		}
	}
}

// waitBundle waits until the partner upstream's rendered caBundle is want.
func waitBundle(t *testing.T, h *harness, ns, want string) {
	t.Helper()
	polltest.Until(t, 10*time.Second, func() error {
		doc, err := policyset.Unmarshal([]byte(h.configMap(t, ns).Data[v1alpha1.PoliciesConfigMapKey]))
		if err != nil {
			return err
		}
		for _, p := range doc.Policies {
			if p.Name == "partner" {
				if got := p.Upstreams[0].CABundle; got != want {
					return fmt.Errorf("caBundle has %d certificates, want %d", strings.Count(got, "BEGIN"), strings.Count(want, "BEGIN"))
				}
				return nil
			}
		}
		return fmt.Errorf("partner not rendered")
	})
}
