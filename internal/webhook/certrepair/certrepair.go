// Package certrepair says, in events, what the leader repaired of the webhook
// certificate (docs/operations.md#certificates).
//
// The certificate rotator (OPA's cert-controller) repairs without a word: a
// Secret emptied by hand is filled anew and a CA bundle emptied by hand is
// filled again, within a second. A Secret deleted by hand it never writes
// back: the replicas serve on from the files they copied, but one that
// restarts never becomes Ready. The Witness writes a deleted Secret back as
// it last was (the same CA, so the CA bundles still hold it and no admission
// request fails), and the rotator renews it from there. An operator who broke
// something, or finds a broken install mended, looks first at the object's
// events: when an object the Witness saw broken is whole again, it records an
// event on it naming what was broken and for how long. It runs on the leader,
// beside the rotator.
package certrepair

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// Witness is a manager Runnable of the leader.
type Witness struct {
	// Watch watches the three objects and writes a deleted Secret back.
	Watch    kubernetes.Interface
	Recorder events.EventRecorder
	// Secret holds the CA under CAKey and the serving certificate under
	// CertKey; missing either, it is broken.
	Secret         types.NamespacedName
	CAKey, CertKey string
	Mutating       string           // the MutatingWebhookConfiguration's name
	Validating     string           // the ValidatingWebhookConfiguration's name
	Now            func() time.Time // time.Now when nil
	Log            logr.Logger

	mu     sync.Mutex
	broken map[string]broken // by object: "secret", "mutating", "validating"
	whole  map[string]bool   // the objects seen whole at least once
	synced atomic.Bool       // every watch has listed its object
}

// broken is what was wrong with an object, and since when.
type broken struct {
	what, repair string // "the caBundle of webhook … was empty", "the leader wrote …"
	since        time.Time
}

// NeedLeaderElection is true: only the leader repairs, so only it tells.
func (w *Witness) NeedLeaderElection() bool { return true }

// Start watches until ctx ends.
func (w *Witness) Start(ctx context.Context) error {
	w.mu.Lock()
	w.broken, w.whole = map[string]broken{}, map[string]bool{}
	w.mu.Unlock()
	adm := w.Watch.AdmissionregistrationV1().RESTClient()
	synced := []toolscache.InformerSynced{
		watch(ctx, w.Watch.CoreV1().RESTClient(), "secrets", w.Secret, &corev1.Secret{}, w.secret),
		watch(ctx, adm, "mutatingwebhookconfigurations", types.NamespacedName{Name: w.Mutating},
			&admissionv1.MutatingWebhookConfiguration{}, configuration(w, "mutating", mutatingCABundles)),
		watch(ctx, adm, "validatingwebhookconfigurations", types.NamespacedName{Name: w.Validating},
			&admissionv1.ValidatingWebhookConfiguration{}, configuration(w, "validating", validatingCABundles)),
	}
	if toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		w.synced.Store(true)
	}
	<-ctx.Done()
	return nil
}

// Synced reports whether every watch has listed its object: a break before
// that is not seen.
func (w *Witness) Synced() bool { return w.synced.Load() }

// watch hands every state of the one object named key to handle, deleted
// or not, until ctx ends.
func watch(ctx context.Context, rc rest.Interface, resource string, key types.NamespacedName, obj runtime.Object,
	handle func(o runtime.Object, deleted bool)) toolscache.InformerSynced {
	lw := toolscache.NewListWatchFromClient(rc, resource, key.Namespace, fields.OneTermEqualSelector("metadata.name", key.Name))
	inf := toolscache.NewSharedIndexInformer(lw, obj, 0, toolscache.Indexers{})
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { handle(o.(runtime.Object), false) },
		UpdateFunc: func(_, o any) { handle(o.(runtime.Object), false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if ro, ok := o.(runtime.Object); ok {
				handle(ro, true)
			}
		},
	})
	go inf.RunWithContext(ctx)
	return inf.HasSynced
}

func (w *Witness) secret(o runtime.Object, deleted bool) {
	s, ok := o.(*corev1.Secret)
	if !ok {
		return
	}
	name := "Secret " + w.Secret.String()
	switch {
	case deleted:
		w.breaks("secret", name+" was deleted", "the leader wrote it back as it was")
		w.restore(s)
	case len(s.Data[w.CAKey]) == 0 || len(s.Data[w.CertKey]) == 0:
		w.breaks("secret", fmt.Sprintf("%s had no %s or no %s", name, w.CAKey, w.CertKey), "the leader wrote a new certificate")
	default:
		w.mends("secret", s, v1alpha1.EventReasonCertificateRepaired)
	}
}

// restore writes the deleted Secret s back as it last was. A Secret written
// meanwhile (by the install, or the next leader) is kept.
func (w *Witness) restore(s *corev1.Secret) {
	back := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Secret.Namespace, Name: w.Secret.Name, Labels: s.Labels, Annotations: s.Annotations},
		Type:       s.Type, Data: s.Data,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := w.Watch.CoreV1().Secrets(back.Namespace).Create(ctx, back, metav1.CreateOptions{FieldManager: "retry-operator"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		// The next leader's rotator, or the hourly check, fills a Secret the
		// install creates again; until then the event says nothing repaired.
		w.Log.Error(err, "cannot write the deleted webhook certificate Secret back", "secret", w.Secret.String())
	}
}

// configuration is the handler of a webhook configuration of type C, known
// to the Witness as key: both kinds are judged alike, by the caBundle of each
// of their webhooks, which caBundles lists by webhook name. A deleted
// configuration is the install's to restore.
func configuration[C runtime.Object](w *Witness, key string, caBundles func(C) map[string][]byte) func(o runtime.Object, deleted bool) {
	return func(o runtime.Object, deleted bool) {
		if c, ok := o.(C); ok && !deleted {
			w.check(key, c, caBundles(c))
		}
	}
}

func mutatingCABundles(c *admissionv1.MutatingWebhookConfiguration) map[string][]byte {
	bundles := make(map[string][]byte, len(c.Webhooks))
	for _, wh := range c.Webhooks {
		bundles[wh.Name] = wh.ClientConfig.CABundle
	}
	return bundles
}

func validatingCABundles(c *admissionv1.ValidatingWebhookConfiguration) map[string][]byte {
	bundles := make(map[string][]byte, len(c.Webhooks))
	for _, wh := range c.Webhooks {
		bundles[wh.Name] = wh.ClientConfig.CABundle
	}
	return bundles
}

// check records a configuration broken when a webhook's caBundle is empty,
// and mended when none is. A bundle that holds another CA is not judged: the
// Secret and the configurations come by separate watches, and in a rotation
// the new bundle can arrive before the new Secret, a mismatch that is none.
func (w *Witness) check(key string, c runtime.Object, bundles map[string][]byte) {
	for name, b := range bundles {
		if len(bytes.TrimSpace(b)) == 0 {
			w.breaks(key, "the caBundle of webhook "+name+" was empty", "the leader wrote the Secret's CA into it")
			return
		}
	}
	w.mends(key, c, v1alpha1.EventReasonCABundleRepaired)
}

// breaks notes key broken, keeping the first reason and time of a spell.
// An object never seen whole is not broken but new: an install's empty
// Secret and empty caBundles, which the rotator fills, are no repair.
func (w *Witness) breaks(key, what, repair string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, was := w.broken[key]; !was && w.whole[key] {
		w.broken[key] = broken{what: what, repair: repair, since: w.now()}
	}
}

// mends records an event on obj when key was broken.
func (w *Witness) mends(key string, obj runtime.Object, reason string) {
	w.mu.Lock()
	b, was := w.broken[key]
	delete(w.broken, key)
	w.whole[key] = true
	w.mu.Unlock()
	if !was {
		return
	}
	took := w.now().Sub(b.since).Round(time.Millisecond)
	w.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, reason, "Repair", "%s; %s %s later", b.what, b.repair, took)
}

func (w *Witness) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}
