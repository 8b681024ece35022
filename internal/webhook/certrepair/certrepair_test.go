package certrepair

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// TestTheWitnessTellsWhatWasRepaired breaks, by hand, what the rotator keeps
// and mends it as the rotator does (the test plays the rotator), on a real
// API server, and reads the events the Witness records.
func TestTheWitnessTellsWhatWasRepaired(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	cs := kubernetes.NewForConfigOrDie(testenv.Start(t, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fixture := newFixture(t, ctx, cs)

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	w := &Witness{Watch: cs, Recorder: broadcaster.NewRecorder(clientgoscheme.Scheme, "retry-operator-cert-repair"),
		Secret: fixture.secretKey, CAKey: "ca.crt", CertKey: "tls.crt", Mutating: "m", Validating: "v"}
	go func() { _ = w.Start(ctx) }()
	polltest.UntilTrue(t, 5*time.Second, w.Synced)
	// The install: an empty Secret and empty caBundles, filled by the
	// rotator. Nothing was repaired, so nothing is told (the last check).
	fixture.fillSecret(fixture.data)
	fixture.validatingBundle(fixture.data["ca.crt"])
	fixture.mutatingBundle(fixture.data["ca.crt"])
	polltest.UntilTrue(t, 5*time.Second, func() bool { return w.isWhole("secret") && w.isWhole("validating") && w.isWhole("mutating") })

	steps := []struct {
		name       string
		key        string // the object to see broken before mending ("": the Witness mends)
		breakIt    func()
		mend       func()
		wantReason string
		wantNote   string
	}{
		{name: "a deleted Secret is written back as it was", breakIt: fixture.deleteSecret, mend: fixture.secretAsItWas,
			wantReason: v1alpha1.EventReasonCertificateRepaired,
			wantNote:   "Secret default/webhook-cert was deleted; the leader wrote it back as it was "},
		{name: "a Secret emptied and filled again", key: "secret", breakIt: func() { fixture.fillSecret(nil) }, mend: func() { fixture.fillSecret(fixture.data) },
			wantReason: v1alpha1.EventReasonCertificateRepaired,
			wantNote:   "Secret default/webhook-cert had no ca.crt or no tls.crt; the leader wrote a new certificate "},
		{name: "a validating caBundle emptied and filled again", key: "validating", breakIt: func() { fixture.validatingBundle(nil) }, mend: func() { fixture.validatingBundle(fixture.data["ca.crt"]) },
			wantReason: v1alpha1.EventReasonCABundleRepaired,
			wantNote:   "the caBundle of webhook v.retry.dev was empty; the leader wrote the Secret's CA into it "},
		{name: "a mutating caBundle emptied and filled again", key: "mutating", breakIt: func() { fixture.mutatingBundle(nil) }, mend: func() { fixture.mutatingBundle(fixture.data["ca.crt"]) },
			wantReason: v1alpha1.EventReasonCABundleRepaired,
			wantNote:   "the caBundle of webhook m.retry.dev was empty; the leader wrote the Secret's CA into it "},
	}
	seen := 0
	for _, st := range steps {
		st.breakIt()
		// The rotator mends within a second, after its watch saw the break.
		if st.key != "" {
			polltest.UntilTrue(t, 5*time.Second, func() bool { return w.isBroken(st.key) })
		}
		st.mend()
		var got []eventsv1.Event
		polltest.UntilTrue(t, 5*time.Second, func() bool {
			got = repairEvents(t, ctx, cs)
			return len(got) > seen
		})
		e := got[len(got)-1]
		t.Logf("%s: %s %q", st.name, e.Reason, e.Note)
		if e.Reason != st.wantReason || !strings.HasPrefix(e.Note, st.wantNote) || !strings.HasSuffix(e.Note, " later") {
			t.Errorf("%s: event %s %q, want %s %q… later", st.name, e.Reason, e.Note, st.wantReason, st.wantNote)
		}
		seen = len(got)
	}
	if got := repairEvents(t, ctx, cs); len(got) != len(steps) {
		t.Errorf("%d events, want %d (one a repair)", len(got), len(steps))
	}
}

// repairEvents are the events of the Witness, oldest first.
func repairEvents(t *testing.T, ctx context.Context, cs kubernetes.Interface) []eventsv1.Event {
	t.Helper()
	list, err := cs.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.ReportingController == "retry-operator-cert-repair" {
			out = append(out, e)
		}
	}
	for i := 1; i < len(out); i++ { // insertion sort by creation: a handful
		for j := i; j > 0 && out[j].EventTime.Before(&out[j-1].EventTime); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// fixture is the Secret and the two webhook configurations the rotator keeps.
type fixture struct {
	t         *testing.T
	ctx       context.Context
	cs        kubernetes.Interface
	secretKey types.NamespacedName
	data      map[string][]byte
}

func newFixture(t *testing.T, ctx context.Context, cs kubernetes.Interface) *fixture {
	ca := testenv.CAPEM(t, "retry-operator-webhook-ca")
	f := &fixture{t: t, ctx: ctx, cs: cs, secretKey: types.NamespacedName{Namespace: "default", Name: "webhook-cert"},
		data: map[string][]byte{"ca.crt": []byte(ca), "tls.crt": []byte(ca), "tls.key": []byte("key")}}
	f.createSecret(nil)
	none := admissionv1.SideEffectClassNone
	cc := admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: "default", Name: "webhook"}}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Webhooks:   []admissionv1.MutatingWebhook{{Name: "m.retry.dev", ClientConfig: cc, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "v"},
		Webhooks:   []admissionv1.ValidatingWebhook{{Name: "v.retry.dev", ClientConfig: cc, SideEffects: &none, AdmissionReviewVersions: []string{"v1"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) createSecret(data map[string][]byte) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.secretKey.Namespace, Name: f.secretKey.Name,
		Labels: map[string]string{"app.kubernetes.io/name": "retry-operator"}}, Data: data}
	if _, err := f.cs.CoreV1().Secrets(s.Namespace).Create(f.ctx, s, metav1.CreateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// secretAsItWas waits for the Witness to write the deleted Secret back and
// checks that it holds what it held.
func (f *fixture) secretAsItWas() {
	polltest.Until(f.t, 5*time.Second, func() error {
		s, err := f.cs.CoreV1().Secrets(f.secretKey.Namespace).Get(f.ctx, f.secretKey.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(s.Data, f.data) || s.Labels["app.kubernetes.io/name"] != "retry-operator" {
			return fmt.Errorf("written back with labels %v and keys %v, want the Secret as it was", s.Labels, slices.Collect(maps.Keys(s.Data)))
		}
		return nil
	})
}

func (f *fixture) deleteSecret() {
	if err := f.cs.CoreV1().Secrets(f.secretKey.Namespace).Delete(f.ctx, f.secretKey.Name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) fillSecret(data map[string][]byte) {
	s, err := f.cs.CoreV1().Secrets(f.secretKey.Namespace).Get(f.ctx, f.secretKey.Name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	s.Data = data
	if _, err := f.cs.CoreV1().Secrets(s.Namespace).Update(f.ctx, s, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) mutatingBundle(ca []byte) {
	c, err := f.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(f.ctx, "m", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	c.Webhooks[0].ClientConfig.CABundle = ca
	if _, err := f.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(f.ctx, c, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) validatingBundle(ca []byte) {
	c, err := f.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(f.ctx, "v", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	c.Webhooks[0].ClientConfig.CABundle = ca
	if _, err := f.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(f.ctx, c, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (w *Witness) isBroken(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.broken[key]
	return ok
}

func (w *Witness) isWhole(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.whole[key]
}
