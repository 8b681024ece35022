package controller

import (
	"maps"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

func TestAcceptedRevision(t *testing.T) {
	withLastAccepted := func(gen, rev int64) *v1alpha1.RetryPolicy {
		p := pol("p", 0, 3, nil, "a.svc")
		p.Status.LastAccepted = &v1alpha1.AcceptedRendering{Generation: gen, Revision: rev}
		return &p
	}
	fresh := pol("p", 0, 3, nil, "a.svc")
	tests := map[string]struct {
		w    candidate
		want int64
	}{
		"a new generation takes the document's revision": {
			w: candidate{policy: &fresh, generation: 3, valid: true}, want: 500,
		},
		"a generation already accepted keeps the revision that first carried it": {
			w: candidate{policy: withLastAccepted(3, 400), generation: 3, valid: true}, want: 400,
		},
		"a recorded revision of another generation is not kept": {
			w: candidate{policy: withLastAccepted(2, 400), generation: 3, valid: true}, want: 500,
		},
		"a recorded revision past the document's is not kept": {
			w: candidate{policy: withLastAccepted(3, 600), generation: 3, valid: true}, want: 500,
		},
		"a recorded revision 0 is not kept": {
			w: candidate{policy: withLastAccepted(3, 0), generation: 3, valid: true}, want: 500,
		},
		"a kept rendering keeps its own revision when the record does not apply": {
			w: candidate{policy: withLastAccepted(1, 600), generation: 1, revision: 600}, want: 600,
		},
		"a kept rendering without a revision (from the ConfigMap) takes the document's": {
			w: candidate{policy: &fresh, generation: 1}, want: 500,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := acceptedRevision(tc.w, 500); got != tc.want {
				t.Fatalf("acceptedRevision = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestResolveConflicts(t *testing.T) {
	valid := func(p v1alpha1.RetryPolicy) candidate {
		return candidate{policy: &p, selector: p.Spec.PodSelector, upstreams: p.Spec.Upstreams, generation: p.Generation, valid: true}
	}
	kept := func(p v1alpha1.RetryPolicy) candidate {
		c := valid(p)
		c.valid = false
		return c
	}
	tests := map[string]struct {
		cands       []candidate
		wantWinners []string
		wantVerdict map[string]string // "True/Valid" form; a kept rendering gets none
	}{
		"the oldest candidate wins whatever the input order": {
			cands:       []candidate{valid(pol("new", 9, 1, nil, "x.svc")), valid(pol("old", 1, 1, nil, "x.svc"))},
			wantWinners: []string{"old"},
			wantVerdict: map[string]string{"old": "True/Valid", "new": "False/Conflict"},
		},
		"of two candidates created at once the first name wins": {
			cands:       []candidate{valid(pol("b", 0, 1, nil, "x.svc")), valid(pol("a", 0, 1, nil, "x.svc"))},
			wantWinners: []string{"a"},
			wantVerdict: map[string]string{"a": "True/Valid", "b": "False/Conflict"},
		},
		"hosts compare case-insensitively": {
			cands:       []candidate{valid(pol("a", 0, 1, nil, "X.svc")), valid(pol("b", 1, 1, nil, "x.svc"))},
			wantWinners: []string{"a"},
			wantVerdict: map[string]string{"a": "True/Valid", "b": "False/Conflict"},
		},
		"winners without a shared host are listed oldest first": {
			cands:       []candidate{valid(pol("c", 2, 1, nil, "c.svc")), valid(pol("a", 0, 1, nil, "a.svc")), valid(pol("b", 1, 1, nil, "b.svc"))},
			wantWinners: []string{"a", "b", "c"},
			wantVerdict: map[string]string{"a": "True/Valid", "b": "True/Valid", "c": "True/Valid"},
		},
		"a kept rendering that loses gets no verdict": {
			cands:       []candidate{valid(pol("old", 0, 1, nil, "x.svc")), kept(pol("new", 1, 1, nil, "x.svc"))},
			wantWinners: []string{"old"},
			wantVerdict: map[string]string{"old": "True/Valid"},
		},
		"a kept rendering that wins beats a newer valid policy and gets no verdict": {
			cands:       []candidate{kept(pol("old", 0, 1, nil, "x.svc")), valid(pol("new", 1, 1, nil, "x.svc"))},
			wantWinners: []string{"old"},
			wantVerdict: map[string]string{"new": "False/Conflict"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			accepted := map[string]metav1.Condition{}
			var winners []string
			for _, w := range resolveConflicts(tc.cands, accepted) {
				winners = append(winners, w.policy.Name)
			}
			if !slices.Equal(winners, tc.wantWinners) {
				t.Errorf("winners %v, want %v", winners, tc.wantWinners)
			}
			verdicts := map[string]string{}
			for name, c := range accepted {
				verdicts[name] = string(c.Status) + "/" + c.Reason
			}
			if !maps.Equal(verdicts, tc.wantVerdict) {
				t.Errorf("verdicts %v, want %v", verdicts, tc.wantVerdict)
			}
		})
	}
}
