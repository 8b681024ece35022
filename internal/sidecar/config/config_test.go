package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/internal/policyset"
	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
)

func TestParseLabels(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		"kubelet output with quoted values": {
			in:   "app=\"checkout\"\nretry.dev/inject=\"true\"\n",
			want: map[string]string{"app": "checkout", "retry.dev/inject": "true"},
		},
		"escapes are unquoted": {
			in:   `note="a \"b\" c"`,
			want: map[string]string{"note": `a "b" c`},
		},
		"an empty file is a pod without labels, not nil": {
			in:   "\n",
			want: map[string]string{},
		},
		"an unquoted value is refused": {
			in: "app=checkout\n", wantErr: "line 1: value of app must be a quoted string",
		},
		"a line without = is refused": {
			in: "app=\"a\"\njunk\n", wantErr: `line 2: want key="value"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseLabels([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) || got == nil {
				t.Fatalf("got %#v, %v; want %#v", got, err, tc.want)
			}
		})
	}
}

func TestSourcesLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	doc, err := policyset.FromPolicyYAML([]byte(policysettest.PolicyYAML("a.example", "  podSelector: {matchLabels: {app: a}}\n")))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := policyset.Marshal(doc)
	cmDir := filepath.Join(dir, "cm")
	os.Mkdir(cmDir, 0o755)
	os.WriteFile(filepath.Join(cmDir, "policies.json"), js, 0o644)

	tests := map[string]struct {
		src           Sources
		wantUpstreams []string
		wantHash      string
		wantErr       string
	}{
		"a ConfigMap dir alone reports the manager's hash of policies.json": {
			src: Sources{ConfigDir: cmDir}, wantUpstreams: []string{"up"}, wantHash: policyset.Hash(js),
		},
		"a ConfigMap dir without policies.json is an empty configuration": {
			src: Sources{ConfigDir: t.TempDir()}, wantHash: policyset.Hash(nil),
		},
		"pod labels that do not match select nothing": {
			src: Sources{ConfigDir: cmDir, PodLabels: write("labels-b", "app=\"b\"\n")}, wantHash: policyset.Hash(js),
		},
		"pod labels that match select the policy": {
			src: Sources{ConfigDir: cmDir, PodLabels: write("labels-a", "app=\"a\"\n")}, wantUpstreams: []string{"up"}, wantHash: policyset.Hash(js),
		},
		"a policy file is validated like the API": {
			src:     Sources{PolicyFiles: []string{write("bad.yaml", policysettest.PolicyYAML("Upper.Example", ""))}},
			wantErr: "spec.upstreams[0].hosts[0]",
		},
		"a missing policy file is an error": {
			src: Sources{PolicyFiles: []string{filepath.Join(dir, "nope.yaml")}}, wantErr: "--policy-file",
		},
		"two files claiming one host are refused": {
			src: Sources{PolicyFiles: []string{write("x.yaml", policysettest.PolicyYAML("x.example", "")),
				write("y.yaml", strings.Replace(policysettest.PolicyYAML("x.example", ""), "name: p", "name: q", 1))}},
			wantErr: "claimed by upstreams",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := tc.src.load()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Upstreams, tc.wantUpstreams) || c.Hash != tc.wantHash {
				t.Fatalf("upstreams %v hash %s; want %v %s", c.Upstreams, c.Hash, tc.wantUpstreams, tc.wantHash)
			}
		})
	}
}
