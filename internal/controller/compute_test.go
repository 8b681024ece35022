package controller

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pol(name string, ageSec int, gen int64, sel map[string]string, hosts ...string) v1alpha1.RetryPolicy {
	p := v1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: gen, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(ageSec) * time.Second))},
		Spec: v1alpha1.RetryPolicySpec{Upstreams: []v1alpha1.Upstream{{Name: "u", Hosts: hosts}}}}
	if sel != nil {
		p.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return p
}

// computeWant is what TestCompute expects of one policy's status.
type computeWant struct {
	accepted, programmed, ready string // "True/Valid" form
	upstreams, selected         int32
	renderedGen                 int64
}

// computeCase is one case of TestCompute.
type computeCase struct {
	in       Input
	want     map[string]computeWant
	rendered []string
	messages map[string]string // Accepted message by policy, when checked
}

// computeCases are the cases of TestCompute.
func computeCases(t *testing.T) map[string]computeCase {
	invalid := pol("p", 0, 2, nil, "Bad.Host")
	prevGood := policyset.Policy{Namespace: "ns", Name: "p", Generation: 1,
		Upstreams: []policyset.Upstream{renderedUpstream(t, v1alpha1.Upstream{Name: "u", Hosts: []string{"good.svc"}}, 0)}}
	return map[string]computeCase{
		"a valid policy alone is accepted and rendered": {
			in:       Input{Policies: []v1alpha1.RetryPolicy{pol("a", 0, 1, nil, "a.svc")}},
			want:     map[string]computeWant{"a": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 0, 1}},
			rendered: []string{"a"},
		},
		"the newer of two policies with a shared host and overlapping selectors gets Conflict": {
			in: Input{Policies: []v1alpha1.RetryPolicy{
				pol("newer", 10, 1, map[string]string{"tier": "web"}, "x.svc"),
				pol("older", 0, 1, map[string]string{"app": "web"}, "x.svc", "y.svc"),
			}},
			want:     map[string]computeWant{"older": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 0, 1}, "newer": {"False/Conflict", "False/NotRendered", "False/Conflict", 1, 0, 0}},
			rendered: []string{"older"},
			messages: map[string]string{"newer": `host "x.svc" is already claimed by RetryPolicy "older" (older) for pods both policies select; the older policy wins`},
		},
		"with equal creation times the name decides": {
			in:       Input{Policies: []v1alpha1.RetryPolicy{pol("b", 0, 1, nil, "x.svc"), pol("a", 0, 1, nil, "x.svc")}},
			want:     map[string]computeWant{"a": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 0, 1}, "b": {"False/Conflict", "False/NotRendered", "False/Conflict", 1, 0, 0}},
			rendered: []string{"a"},
		},
		"a shared host with disjoint selectors is no conflict": {
			in: Input{Policies: []v1alpha1.RetryPolicy{
				pol("a", 0, 1, map[string]string{"app": "a"}, "x.svc"),
				pol("b", 1, 1, map[string]string{"app": "b"}, "x.svc"),
			}},
			want:     map[string]computeWant{"a": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 0, 1}, "b": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 0, 1}},
			rendered: []string{"a", "b"},
		},
		"an invalid new generation keeps the last accepted rendering": {
			in:       Input{Policies: []v1alpha1.RetryPolicy{invalid}, Previous: policyset.Document{Version: 1, Policies: []policyset.Policy{prevGood}}},
			want:     map[string]computeWant{"p": {"False/Invalid", "True/Rendered", "False/Invalid", 1, 0, 1}},
			rendered: []string{"p"},
			messages: map[string]string{"p": `spec.upstreams[0].hosts[0]: Invalid value: "Bad.Host": must be lower-case (bad.host); must be "host", "host:port", an IP literal ("10.0.0.7", "[fd00::7]:8080") or "*.suffix", lower-case; generation 1, the last accepted, stays in force`},
		},
		"an invalid policy never accepted is not rendered": {
			in:   Input{Policies: []v1alpha1.RetryPolicy{invalid}},
			want: map[string]computeWant{"p": {"False/Invalid", "False/NotRendered", "False/Invalid", 1, 0, 0}},
		},
		"the kept rendering of an invalid policy still wins conflicts by age": {
			in: Input{Policies: []v1alpha1.RetryPolicy{invalid, pol("later", 5, 1, nil, "good.svc")},
				Previous: policyset.Document{Version: 1, Policies: []policyset.Policy{prevGood}}},
			want:     map[string]computeWant{"p": {"False/Invalid", "True/Rendered", "False/Invalid", 1, 0, 1}, "later": {"False/Conflict", "False/NotRendered", "False/Conflict", 1, 0, 0}},
			rendered: []string{"p"},
		},
		"a policy being deleted is neither rendered nor given a status": {
			in: Input{Policies: []v1alpha1.RetryPolicy{func() v1alpha1.RetryPolicy {
				p := pol("gone", 0, 1, nil, "a.svc")
				p.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
				return p
			}()}},
			want: map[string]computeWant{},
		},
		"upstreamCount counts every upstream of the newest generation, not only the first": {
			in: Input{Policies: []v1alpha1.RetryPolicy{func() v1alpha1.RetryPolicy {
				p := pol("three", 0, 1, nil, "a.svc")
				p.Spec.Upstreams = append(p.Spec.Upstreams, v1alpha1.Upstream{Name: "v", Hosts: []string{"b.svc"}}, v1alpha1.Upstream{Name: "w", Hosts: []string{"c.svc"}})
				return p
			}()}},
			want:     map[string]computeWant{"three": {"True/Valid", "True/Rendered", "True/Reconciled", 3, 0, 1}},
			rendered: []string{"three"},
		},
		"selectedPods counts ready pods the selector selects": {
			in: Input{Policies: []v1alpha1.RetryPolicy{pol("a", 0, 1, map[string]string{"app": "web"}, "a.svc"), pol("all", 0, 1, nil, "b.svc")},
				Pods: []PodInfo{
					{Labels: map[string]string{"app": "web"}, Ready: true},
					{Labels: map[string]string{"app": "web"}, Ready: false},
					{Labels: map[string]string{"app": "db"}, Ready: true},
				}},
			want:     map[string]computeWant{"a": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 1, 1}, "all": {"True/Valid", "True/Rendered", "True/Reconciled", 1, 2, 1}},
			rendered: []string{"a", "all"},
		},
	}
}

func TestCompute(t *testing.T) {
	tests := computeCases(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := Compute(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Status) != len(tc.want) {
				t.Errorf("statuses for %d policies, want %d", len(out.Status), len(tc.want))
			}
			for p, w := range tc.want {
				st := out.Status[p]
				got := computeWant{string(st.Accepted.Status) + "/" + st.Accepted.Reason, string(st.Programmed.Status) + "/" + st.Programmed.Reason,
					string(st.Ready.Status) + "/" + st.Ready.Reason, st.UpstreamCount, st.SelectedPods, st.RenderedGeneration}
				if got != w {
					t.Errorf("%s: got %+v, want %+v", p, got, w)
				}
			}
			for p, msg := range tc.messages {
				if got := out.Status[p].Accepted.Message; got != msg {
					t.Errorf("%s: message\n%q\nwant\n%q", p, got, msg)
				}
			}
			var names []string
			for _, p := range out.Document.Policies {
				names = append(names, p.Name)
			}
			if len(names) != len(tc.rendered) || (len(names) > 0 && !slices.Equal(names, tc.rendered)) {
				t.Errorf("rendered %v, want %v", names, tc.rendered)
			}
			if len(tc.rendered) == 0 && out.Data != nil {
				t.Errorf("Data = %s, computeWant nil (ConfigMap must not exist)", out.Data)
			}
		})
	}
}

func TestComputeRateShareAndDeterminism(t *testing.T) {
	a := pol("a", 0, 1, map[string]string{"app": "web"}, "a.svc")
	a.Spec.Upstreams[0].RateLimit = &v1alpha1.RateLimit{RequestsPerMinute: 90, Burst: ptr.To[int32](5)}
	b := pol("b", 1, 1, nil, "b.svc")
	pods := []PodInfo{{Labels: map[string]string{"app": "web"}, Ready: true}, {Labels: map[string]string{"app": "web"}, Ready: true},
		{Labels: map[string]string{"app": "web"}, Ready: true}, {Labels: map[string]string{"app": "web"}, Ready: true}}
	one, err := Compute(Input{Policies: []v1alpha1.RetryPolicy{a, b}, Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	two, err := Compute(Input{Policies: []v1alpha1.RetryPolicy{b, a}, Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	if string(one.Data) != string(two.Data) || one.Hash != two.Hash {
		t.Fatalf("output depends on list order")
	}
	if got := one.Document.Policies[0].Upstreams[0].PodRequestsPerMinute; got != 22.5 {
		t.Fatalf("podRequestsPerMinute = %v, want 22.5 (90 / 4 ready pods)", got)
	}
	if got := one.Document.Policies[0].Upstreams[0].PodBurst; got != 2 {
		t.Fatalf("podBurst = %v, want 2 (ceil(5 / 4 ready pods))", got)
	}
}

func TestSelectorsMayOverlap(t *testing.T) {
	ml := func(kv ...string) *metav1.LabelSelector {
		s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
		for i := 0; i < len(kv); i += 2 {
			s.MatchLabels[kv[i]] = kv[i+1]
		}
		return s
	}
	expr := func(key string, op metav1.LabelSelectorOperator, vals ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: vals}}}
	}
	tests := map[string]struct {
		a, b *metav1.LabelSelector
		want bool
	}{
		"nil selects every pod":                       {a: nil, b: ml("app", "a"), want: true},
		"empty selects every pod":                     {a: &metav1.LabelSelector{}, b: ml("app", "a"), want: true},
		"one key with two values never meets":         {a: ml("app", "a"), b: ml("app", "b"), want: false},
		"different keys may meet on one pod":          {a: ml("app", "a"), b: ml("tier", "web"), want: true},
		"In sets that intersect meet":                 {a: expr("app", metav1.LabelSelectorOpIn, "a", "b"), b: ml("app", "b"), want: true},
		"In against NotIn of the same values misses":  {a: expr("app", metav1.LabelSelectorOpIn, "a", "b"), b: expr("app", metav1.LabelSelectorOpNotIn, "a", "b"), want: false},
		"In against NotIn of some values meets":       {a: expr("app", metav1.LabelSelectorOpIn, "a", "b"), b: expr("app", metav1.LabelSelectorOpNotIn, "a"), want: true},
		"Exists against DoesNotExist misses":          {a: expr("app", metav1.LabelSelectorOpExists), b: expr("app", metav1.LabelSelectorOpDoesNotExist), want: false},
		"a value against DoesNotExist misses":         {a: ml("app", "a"), b: expr("app", metav1.LabelSelectorOpDoesNotExist), want: false},
		"NotIn against DoesNotExist meets (no label)": {a: expr("app", metav1.LabelSelectorOpNotIn, "a"), b: expr("app", metav1.LabelSelectorOpDoesNotExist), want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := SelectorsMayOverlap(tc.a, tc.b); got != tc.want {
				t.Fatalf("SelectorsMayOverlap = %v, want %v", got, tc.want)
			}
			if got := SelectorsMayOverlap(tc.b, tc.a); got != tc.want {
				t.Fatalf("not symmetric: SelectorsMayOverlap(b, a) = %v", got)
			}
		})
	}
}

// revisionCase is one rendering of policy p: its revision, the hosts it
// renders and the status.lastAccepted it leaves.
type revisionCase struct {
	in           Input
	wantRevision int64
	wantHosts    string // hosts of the rendered policy p
	wantLA       *v1alpha1.AcceptedRendering
}

// revisionCases are the cases of TestComputeRevisionAndLastAccepted: a valid
// generation and an invalid one that status.lastAccepted keeps rendering.
func revisionCases(t *testing.T) map[string]revisionCase {
	t.Helper()
	now := time.Unix(1796083200, 0)
	valid := pol("p", 0, 3, nil, "good.svc")
	kept := &v1alpha1.AcceptedRendering{Generation: 1, Revision: 1796000000,
		Upstreams: []v1alpha1.Upstream{policyset.Defaulted(v1alpha1.Upstream{Name: "u", Hosts: []string{"kept.svc"}})}}
	invalidWithKept := pol("p", 0, 2, nil, "Bad.Host")
	invalidWithKept.Status.LastAccepted = kept
	rendered := func(in Input) policyset.Document {
		out, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		return out.Document
	}
	same := rendered(Input{Policies: []v1alpha1.RetryPolicy{valid}, Now: now.Add(-time.Hour)})
	sameRev := same.Revision

	return map[string]revisionCase{
		"a first rendering takes the clock as its revision": {
			in:           Input{Policies: []v1alpha1.RetryPolicy{valid}, Now: now},
			wantRevision: 1796083200, wantHosts: "good.svc",
			wantLA: &v1alpha1.AcceptedRendering{Generation: 3, Revision: 1796083200, Upstreams: valid.Spec.Upstreams},
		},
		"unchanged content keeps the ConfigMap's revision however late it is": {
			in:           Input{Policies: []v1alpha1.RetryPolicy{valid}, Previous: same, Now: now},
			wantRevision: sameRev, wantHosts: "good.svc",
			wantLA: &v1alpha1.AcceptedRendering{Generation: 3, Revision: sameRev, Upstreams: valid.Spec.Upstreams},
		},
		"changed content goes past a ConfigMap revision that is ahead of the clock": {
			in: Input{Policies: []v1alpha1.RetryPolicy{valid}, Now: now,
				Previous: policyset.Document{Version: 1, Revision: 1796083300, Policies: []policyset.Policy{{Namespace: "ns", Name: "p", Generation: 2}}}},
			wantRevision: 1796083301, wantHosts: "good.svc",
			wantLA: &v1alpha1.AcceptedRendering{Generation: 3, Revision: 1796083301, Upstreams: valid.Spec.Upstreams},
		},
		"a lost ConfigMap is rendered again from status.lastAccepted of an invalid generation": {
			in:           Input{Policies: []v1alpha1.RetryPolicy{invalidWithKept}, Now: now},
			wantRevision: 1796083200, wantHosts: "kept.svc",
			wantLA: kept,
		},
		"a lost ConfigMap goes past the highest revision a status remembers": {
			in: Input{Policies: []v1alpha1.RetryPolicy{func() v1alpha1.RetryPolicy {
				p := invalidWithKept.DeepCopy()
				p.Status.LastAccepted.Revision = 1796083500
				return *p
			}()}, Now: now},
			wantRevision: 1796083501, wantHosts: "kept.svc",
			wantLA: func() *v1alpha1.AcceptedRendering { la := kept.DeepCopy(); la.Revision = 1796083500; return la }(),
		},
		"status.lastAccepted wins over a hand-edited ConfigMap entry": {
			in: Input{Policies: []v1alpha1.RetryPolicy{invalidWithKept}, Now: now,
				Previous: policyset.Document{Version: 1, Revision: 1796000000, Policies: []policyset.Policy{{Namespace: "ns", Name: "p", Generation: 1,
					Upstreams: []policyset.Upstream{renderedUpstream(t, v1alpha1.Upstream{Name: "u", Hosts: []string{"edited.svc"}}, 0)}}}}},
			wantRevision: 1796083200, wantHosts: "kept.svc",
			wantLA: kept,
		},
	}
}

func TestComputeRevisionAndLastAccepted(t *testing.T) {
	for name, tc := range revisionCases(t) {
		t.Run(name, func(t *testing.T) {
			out, err := Compute(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if out.Document.Revision != tc.wantRevision {
				t.Errorf("revision = %d, want %d", out.Document.Revision, tc.wantRevision)
			}
			if len(out.Document.Policies) != 1 || out.Document.Policies[0].Upstreams[0].Hosts[0] != tc.wantHosts {
				t.Fatalf("rendered %+v, want p with host %s", out.Document.Policies, tc.wantHosts)
			}
			got := out.Status["p"].LastAccepted
			want := tc.wantLA.DeepCopy()
			for i := range want.Upstreams { // the status holds the defaulted upstream
				want.Upstreams[i] = policyset.Defaulted(want.Upstreams[i])
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("lastAccepted = %+v, want %+v", got, want)
			}
		})
	}
}

func TestComputeProgrammedPods(t *testing.T) {
	p := pol("p", 0, 3, map[string]string{"app": "web"}, "a.svc")
	p.Status.LastAccepted = &v1alpha1.AcceptedRendering{Generation: 3, Revision: 100,
		Upstreams: []v1alpha1.Upstream{policyset.Defaulted(p.Spec.Upstreams[0])}}
	web := map[string]string{"app": "web"}
	prev, err := Compute(Input{Policies: []v1alpha1.RetryPolicy{p}, Now: time.Unix(200, 0)})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		pods        []PodInfo
		want        int32
		wantMessage string
	}{
		"pods at the generation's revision or later count, older and unknown ones do not": {
			pods: []PodInfo{{Labels: web, Ready: true, Revision: 100}, {Labels: web, Ready: true, Revision: 200},
				{Labels: web, Ready: true, Revision: 99}, {Labels: web, Ready: true}},
			want: 2, wantMessage: "2/4 pods run generation 3 (ConfigMap retry-policies revision 200, " + prev.Hash + ")",
		},
		"an unready or unselected pod counts for neither number": {
			pods: []PodInfo{{Labels: web, Ready: true, Revision: 200}, {Labels: web, Ready: false, Revision: 200},
				{Labels: map[string]string{"app": "db"}, Ready: true, Revision: 200}},
			want: 1, wantMessage: "1/1 pods run generation 3 (ConfigMap retry-policies revision 200, " + prev.Hash + ")",
		},
		"no selected pod is 0/0": {
			want: 0, wantMessage: "0/0 pods run generation 3 (ConfigMap retry-policies revision 200, " + prev.Hash + ")",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := Compute(Input{Policies: []v1alpha1.RetryPolicy{p}, Pods: tc.pods, Previous: prev.Document, Now: time.Unix(300, 0)})
			if err != nil {
				t.Fatal(err)
			}
			st := out.Status["p"]
			if st.ProgrammedPods != tc.want || st.Programmed.Message != tc.wantMessage {
				t.Fatalf("programmedPods = %d, message %q; want %d, %q", st.ProgrammedPods, st.Programmed.Message, tc.want, tc.wantMessage)
			}
		})
	}
}

func TestComputeResolvesCACertificateRefs(t *testing.T) {
	ca := testenv.CAPEM(t, "partner")
	withRef := pol("p", 0, 2, nil, "api.partner.example")
	withRef.Spec.Upstreams[0].TLS = &v1alpha1.UpstreamTLS{CACertificateRefs: []v1alpha1.CACertificateRef{{Name: "partner-ca"}}}
	prev := renderedUpstream(t, withRef.Spec.Upstreams[0], 0)
	prev.CABundle = "previous bundle"
	previous := policyset.Document{Version: 1, Policies: []policyset.Policy{{Namespace: "ns", Name: "p", Generation: 1, Upstreams: []policyset.Upstream{prev}}}}
	tests := map[string]struct {
		configMaps map[string]map[string]string
		wantReason string
		wantBundle string
		wantMsg    string
	}{
		"the ConfigMap's ca.crt is rendered as the upstream's caBundle": {
			configMaps: map[string]map[string]string{"partner-ca": {"ca.crt": ca}},
			wantReason: string(v1alpha1.ReasonValid), wantBundle: ca, wantMsg: "1 upstream(s) accepted",
		},
		"a missing ConfigMap is InvalidRef and the previous bundle stays rendered": {
			configMaps: nil,
			wantReason: string(v1alpha1.ReasonInvalidRef), wantBundle: "previous bundle",
			wantMsg: `spec.upstreams[0].tls.caCertificateRefs[0].name: Not found: "partner-ca": ConfigMap ns/partner-ca does not exist; generation 1, the last accepted, stays in force`,
		},
		"a ConfigMap without ca.crt is InvalidRef": {
			configMaps: map[string]map[string]string{"partner-ca": {"ca.pem": ca}},
			wantReason: string(v1alpha1.ReasonInvalidRef), wantBundle: "previous bundle",
			wantMsg: `spec.upstreams[0].tls.caCertificateRefs[0].name: Invalid value: "partner-ca": ConfigMap ns/partner-ca has no key ca.crt; generation 1, the last accepted, stays in force`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := Compute(Input{Policies: []v1alpha1.RetryPolicy{withRef}, Previous: previous, ConfigMaps: tc.configMaps})
			if err != nil {
				t.Fatal(err)
			}
			acc := out.Status["p"].Accepted
			if acc.Reason != tc.wantReason || acc.Message != tc.wantMsg {
				t.Errorf("Accepted = %s %q\nwant %s %q", acc.Reason, acc.Message, tc.wantReason, tc.wantMsg)
			}
			if got := out.Document.Policies[0].Upstreams[0].CABundle; got != tc.wantBundle {
				t.Errorf("caBundle = %q, want %q", got, tc.wantBundle)
			}
		})
	}
}

func TestReadyCondition(t *testing.T) {
	// cond(typ) makes conditions of type typ whose message names it: "accepted says Valid".
	cond := func(typ string) func(metav1.ConditionStatus, string) metav1.Condition {
		return func(s metav1.ConditionStatus, r string) metav1.Condition {
			return metav1.Condition{Type: typ, Status: s, Reason: r, Message: strings.ToLower(typ) + " says " + r}
		}
	}
	acc, prog := cond(string(v1alpha1.ConditionAccepted)), cond(string(v1alpha1.ConditionProgrammed))
	tests := map[string]struct {
		accepted, programmed metav1.Condition
		want                 metav1.Condition
	}{
		"accepted and programmed is Ready with Programmed's message": {
			acc(metav1.ConditionTrue, string(v1alpha1.ReasonValid)), prog(metav1.ConditionTrue, string(v1alpha1.ReasonRendered)),
			metav1.Condition{Type: string(v1alpha1.ConditionReady), Status: metav1.ConditionTrue, Reason: string(v1alpha1.ReasonReconciled), Message: "programmed says Rendered"},
		},
		"accepted but not programmed is not Ready, for Programmed's reason": {
			acc(metav1.ConditionTrue, string(v1alpha1.ReasonValid)), prog(metav1.ConditionFalse, string(v1alpha1.ReasonNotRendered)),
			metav1.Condition{Type: string(v1alpha1.ConditionReady), Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNotRendered), Message: "programmed says NotRendered"},
		},
		"an invalid generation is not Ready although its predecessor is programmed": {
			acc(metav1.ConditionFalse, string(v1alpha1.ReasonInvalid)), prog(metav1.ConditionTrue, string(v1alpha1.ReasonRendered)),
			metav1.Condition{Type: string(v1alpha1.ConditionReady), Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonInvalid), Message: "accepted says Invalid"},
		},
		"a conflict is not Ready, for Accepted's reason": {
			acc(metav1.ConditionFalse, string(v1alpha1.ReasonConflict)), prog(metav1.ConditionFalse, string(v1alpha1.ReasonNotRendered)),
			metav1.Condition{Type: string(v1alpha1.ConditionReady), Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonConflict), Message: "accepted says Conflict"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ReadyCondition(tc.accepted, tc.programmed); got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// renderedUpstream is policyset.RenderUpstream of a valid upstream.
func renderedUpstream(t testing.TB, u v1alpha1.Upstream, readyPods int32) policyset.Upstream {
	t.Helper()
	out, err := policyset.RenderUpstream(u, readyPods)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
