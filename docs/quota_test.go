package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/internal/retrysim"
)

// quota.md's YAML examples, loaded with the sidecar's --policy-file loader:
// the file-mode example works as written, and the cluster example is refused
// in file mode for the reason the page gives.
func TestQuotaPageExamplesInFileMode(t *testing.T) {
	page, err := os.ReadFile("quota.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(page, -1)
	_, fileMode, _ := strings.Cut(string(page), "A whole partner.yaml for file mode")
	fileBlock := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(fileMode)
	if len(blocks) < 2 || fileBlock == nil {
		t.Fatalf("quota.md has %d YAML blocks and no file-mode example after its marker", len(blocks))
	}
	tests := map[string]struct {
		yaml    string
		wantErr string // "" : loads, and the upstream draws on partner-payments at 1.5/s burst 5
	}{
		"the file-mode example loads and its upstream draws on its SharedQuota": {yaml: fileBlock[1]},
		"the cluster example is refused in file mode: team is not a label a file-mode namespace has": {yaml: string(blocks[0][1]),
			wantErr: "spec.upstreams[0].quotaRef.name: Forbidden: SharedQuota partner-payments does not admit namespace shop"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "partner.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := retrysim.ReadPolicyFile(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := retrysim.PickUpstream(f.Set, "partner")
			if err != nil {
				t.Fatal(err)
			}
			q, err := f.SharedQuotaOf(p)
			if err != nil || q == nil || q.Name != "partner-payments" || q.RequestsPerSecond != 1.5 || q.Burst != 5 {
				t.Fatalf("quota %+v, %v; want partner-payments at 1.5/s, burst 5", q, err)
			}
		})
	}
}
