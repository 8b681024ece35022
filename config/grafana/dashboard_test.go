// Package grafana holds the Grafana dashboard of the operator
// (retry-operator.json); this test keeps it honest: every query must parse and
// name only metrics that the sidecar or the manager registers.
package grafana_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/internal/testing/metricstest"
)

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func TestEveryQueryNamesARegisteredMetric(t *testing.T) {
	raw, err := os.ReadFile("retry-operator.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("retry-operator.json: %v", err)
	}
	registries := metricstest.New()

	exprs := map[string]string{} // expression -> where
	var panels []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		panels = append(panels, p.Title)
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs[tg.Expr] = "panel " + p.Title
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs[v.Definition] = "variable " + v.Name
		}
	}
	t.Logf("panels (%d): %s", len(panels), strings.Join(panels, "; "))

	for expr, where := range exprs {
		names, err := metricNames(expr)
		if err != nil {
			t.Errorf("%s: %q does not parse: %v", where, expr, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", where, expr)
		}
		for _, n := range names {
			if registries.RegisteredIn(n) == "" {
				t.Errorf("%s: metric %s is registered by neither the sidecar nor the manager", where, n)
			}
		}
	}
}

func TestMetricNames(t *testing.T) {
	tests := map[string]struct {
		expr string
		want []string
		err  string
	}{
		"a rate over a selector names its metric, not its labels or range": {
			expr: `sum by (outcome) (rate(retry_sidecar_requests_total{namespace=~"$namespace", outcome!="success"}[$__rate_interval]))`,
			want: []string{"retry_sidecar_requests_total"},
		},
		"a ratio names both sides": {
			expr: `sum(rate(a_total[5m])) / sum(rate(b_total[5m]))`,
			want: []string{"a_total", "b_total"},
		},
		"a quantile keeps the bucket series and skips by-lists": {
			expr: `histogram_quantile(0.99, sum by (le, upstream) (rate(x_seconds_bucket{upstream=~"$upstream"}[1m])))`,
			want: []string{"x_seconds_bucket"},
		},
		"label_values names the metric it reads": {
			expr: `label_values(retry_sidecar_requests_total{namespace=~"$namespace"}, upstream)`,
			want: []string{"retry_sidecar_requests_total"},
		},
		"binary operators and keywords are not metrics": {
			expr: `count(a) > bool 0 and on (pod) b offset 5m unless ignoring (x) group_left c`,
			want: []string{"a", "b", "c"},
		},
		"an unbalanced parenthesis is an error": {
			expr: `sum(rate(a[5m])`,
			err:  "unbalanced",
		},
		"an unterminated string is an error": {
			expr: `a{b="c}`,
			err:  "unterminated string",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := metricNames(tc.expr)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// keywords of PromQL that look like identifiers but are not metric names.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true,
	"topk": true, "bottomk": true, "quantile": true, "count_values": true, "group": true,
}

// isStart and isPart tell the bytes that start and continue a PromQL name.
func isStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isPart(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }

// endOfString is the index of the quote that ends the string literal
// opening at expr[i] (backslash escapes, except in a backquoted one).
func endOfString(expr string, i int) (int, error) {
	c := expr[i]
	j := i + 1
	for ; j < len(expr) && expr[j] != c; j++ {
		if expr[j] == '\\' && c != '`' {
			j++
		}
	}
	if j >= len(expr) {
		return 0, fmt.Errorf("unterminated string at %d", i)
	}
	return j, nil
}

// metricNames parses a PromQL expression far enough to list the metric names
// it selects, in order of appearance, each once (Grafana's label_values
// included): it checks that strings are
// terminated and (), {} and [] balanced, skips label matchers, ranges, string
// literals, numbers, Grafana variables, function and aggregation names and the
// label lists after by, without, on, ignoring, group_left and group_right.
// (The upstream PromQL parser would pull the whole Prometheus server module
// and its dependency tree into go.mod for one test.)
func metricNames(expr string) ([]string, error) {
	// Grafana's label_values(METRIC{…}, LABEL): only the selector is PromQL.
	if rest, ok := strings.CutPrefix(expr, "label_values("); ok {
		if i := strings.LastIndex(rest, ","); i >= 0 {
			expr = rest[:i]
		}
	}
	var (
		names  []string
		stack  []byte
		skipTo = -1 // depth below which identifiers count again
	)
	closing := map[byte]byte{')': '(', '}': '{', ']': '['}
	skipLabels := false // the next '(' opens a label list
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := endOfString(expr, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '(' || c == '{' || c == '[':
			stack = append(stack, c)
			if skipTo < 0 && (c != '(' || skipLabels) {
				skipTo = len(stack) // matchers, ranges and label lists hold no metric
			}
			skipLabels = false
		case c == ')' || c == '}' || c == ']':
			if len(stack) == 0 || stack[len(stack)-1] != closing[c] {
				return nil, fmt.Errorf("unbalanced %q at %d", c, i)
			}
			if len(stack) == skipTo {
				skipTo = -1
			}
			stack = stack[:len(stack)-1]
		case c == '$':
			for i+1 < len(expr) && isPart(expr[i+1]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i+1 < len(expr) && (isPart(expr[i+1]) || expr[i+1] == '.') {
				i++ // numbers and durations (5m, 1e3)
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			i = j - 1
			if skipTo >= 0 {
				continue
			}
			k := j
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			switch {
			case word == "by" || word == "without" || word == "on" || word == "ignoring" || word == "group_left" || word == "group_right":
				skipLabels = true
			case keywords[word]:
			case k < len(expr) && expr[k] == '(':
				// a function call
			case !slices.Contains(names, word):
				names = append(names, word)
			}
		}
	}
	if len(stack) != 0 {
		return nil, fmt.Errorf("unbalanced: %q left open", stack)
	}
	return names, nil
}
