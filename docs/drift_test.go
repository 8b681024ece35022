// Package docs holds the manual. This test keeps it honest: every flag, make
// target, API field, header, metric and relative link that README.md and
// docs/ name must exist, every Go sample must be an excerpt of code that
// compiles and runs (an Example test), and curl is shown with the proxy
// variable curl reads.
package docs_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/retrydev/retry-operator/internal/testing/metricstest"
)

// page is one Markdown file: its text, and its text with fenced code blocks
// blanked out (links and prose checks read only the prose).
type page struct {
	path, text, prose string
	code              []fence
}

type fence struct {
	lang, body string
	line       int
}

var (
	fenceRE    = regexp.MustCompile("(?ms)^```([a-z]*)[^\n]*\n(.*?)^```")
	codeSpanRE = regexp.MustCompile("`[^`\n]+`")
)

func pages(t *testing.T) []page {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	var out []page
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := page{path: f, text: string(b)}
		p.prose = fenceRE.ReplaceAllStringFunc(p.text, blank)
		p.prose = codeSpanRE.ReplaceAllStringFunc(p.prose, blank)
		for _, idx := range fenceRE.FindAllStringSubmatchIndex(p.text, -1) {
			p.code = append(p.code, fence{lang: p.text[idx[2]:idx[3]], body: p.text[idx[4]:idx[5]],
				line: 1 + strings.Count(p.text[:idx[0]], "\n")})
		}
		out = append(out, p)
	}
	return out
}

// blank keeps a match's line breaks and turns every other byte into a space,
// so offsets in prose are offsets in text.
func blank(m string) string {
	b := []byte(m)
	for i, c := range b {
		if c != '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// lineOf is the 1-based line of byte offset i in s.
func lineOf(s string, i int) int { return 1 + strings.Count(s[:i], "\n") }

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestRelativeLinksResolve(t *testing.T) {
	for _, p := range pages(t) {
		for _, m := range linkRE.FindAllStringSubmatchIndex(p.prose, -1) {
			target := p.prose[m[2]:m[3]]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := p.path
			if file != "" {
				dest = filepath.Join(filepath.Dir(p.path), file)
			}
			if _, err := os.Stat(dest); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", p.path, lineOf(p.prose, m[0]), target, dest)
				continue
			}
			if anchor != "" && !slices.Contains(anchors(t, dest), anchor) {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", p.path, lineOf(p.prose, m[0]), target, dest, anchor)
			}
		}
	}
}

var (
	headingRE    = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	htmlAnchorRE = regexp.MustCompile(`<a (?:id|name)="([^"]+)"></a>`)
)

// anchors are the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, ".md") {
		return nil
	}
	prose := fenceRE.ReplaceAllString(string(b), "")
	var out []string
	seen := map[string]int{}
	for _, m := range htmlAnchorRE.FindAllStringSubmatch(prose, -1) {
		out = append(out, m[1])
	}
	for _, m := range headingRE.FindAllStringSubmatch(prose, -1) {
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's heading anchor: lower case, punctuation other than - and _
// dropped, spaces to -.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("—–…’“”·×≤≥→", r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// makeRE finds `make TARGET` in code (fenced blocks and code spans); prose
// says "make a request".
var makeRE = regexp.MustCompile(`(?:^|[\s` + "`" + `;&|(])make +([a-z][a-z0-9-]*)`)

func TestMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z0-9_-]+):`).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	for _, p := range pages(t) {
		code := codeOnly(p)
		for _, m := range makeRE.FindAllStringSubmatchIndex(code, -1) {
			if w := code[m[2]:m[3]]; !targets[w] {
				t.Errorf("%s:%d: `make %s`: no such target in the Makefile", p.path, lineOf(code, m[0]), w)
			}
		}
	}
}

// codeOnly is p's text with its prose blanked: the fenced blocks and code
// spans stay where they are.
func codeOnly(p page) string {
	b := []byte(strings.Repeat(" ", len(p.text)))
	for i, c := range []byte(p.text) {
		if c == '\n' || p.prose[i] != c {
			b[i] = c
		}
	}
	return string(b)
}

var flagRE = regexp.MustCompile(`(?:^|[\s` + "`" + `(\[=])(--[a-z][a-z0-9-]+)`)

// otherTools' flags are named in the docs on the command lines of other
// programs (kubectl, helm, curl, scripts of hack/): not ours to check.
var otherTools = map[string]string{
	"--server-side": "kubectl apply", "--from-file": "kubectl create", "--from-literal": "kubectl create", "--field-selector": "kubectl get",
	"--ignore-not-found": "kubectl delete", "--kubeconfig": "kubectl", "--context": "kubectl",
	"--all": "kubectl delete", "--namespace": "kubectl, helm", "--set": "helm", "--reuse-values": "helm upgrade",
	"--create-namespace": "helm install", "--wait": "helm install", "--image": "kubectl create deployment",
	"--for": "kubectl wait", "--dry-run": "kubectl apply", "--clusterrole": "kubectl create clusterrolebinding", "--group": "kubectl create clusterrolebinding", "--node": "hack/kube-binaries.sh", "--kubectl": "hack/kube-binaries.sh",
	"--bind": "python3 -m http.server", "--grace-period": "kubectl delete", "--force": "kubectl delete",
}

func TestFlagsExist(t *testing.T) {
	ours := ourFlags(t)
	for _, p := range pages(t) {
		for _, m := range flagRE.FindAllStringSubmatchIndex(p.text, -1) {
			f := p.text[m[2]:m[3]]
			if !ours[f] && otherTools[f] == "" {
				t.Errorf("%s:%d: flag %s: no binary of ours has it (retry-sidecar, manager, kubectl-retry); another tool's? add it to otherTools", p.path, lineOf(p.text, m[0]), f)
			}
		}
	}
}

// ourFlags are the flags the binaries print with -h, subcommands included.
func ourFlags(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "../cmd/retry-sidecar", "../cmd/manager", "../cmd/kubectl-retry")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, args := range [][]string{
		{"retry-sidecar", "-h"}, {"retry-sidecar", "redirect", "-h"}, {"retry-sidecar", "probe", "-h"},
		{"manager", "-h"}, {"manager", "startupapicheck", "-h"},
		{"kubectl-retry", "simulate", "-h"}, {"kubectl-retry", "rehearse", "-h"},
		{"kubectl-retry", "explain", "-h"}, {"kubectl-retry", "check", "-h"},
	} {
		var out bytes.Buffer
		cmd := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run() // -h exits non-zero with the flag package
		n := 0
		for _, m := range regexp.MustCompile(`(?m)^\s+--?([a-z][a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
			flags["--"+m[1]] = true
			n++
		}
		if n == 0 {
			t.Fatalf("%s printed no flags:\n%s", strings.Join(args, " "), out.String())
		}
	}
	return flags
}

var metricRE = regexp.MustCompile(`\b((?:retry_sidecar|controller_runtime|workqueue)_[a-z_]+[a-z])\b`)

func TestMetricsExist(t *testing.T) {
	regs := metricstest.New()
	for _, p := range pages(t) {
		for _, m := range metricRE.FindAllStringSubmatchIndex(p.text, -1) {
			name := p.text[m[2]:m[3]]
			if regs.RegisteredIn(name) == "" {
				t.Errorf("%s:%d: metric %s is registered by neither the sidecar nor the manager", p.path, lineOf(p.text, m[0]), name)
			}
		}
	}
}

var headerRE = regexp.MustCompile(`\bX-Retry-[A-Za-z-]*[A-Za-z]`)

func TestHeadersExist(t *testing.T) {
	src := goSource(t, false)
	for _, p := range pages(t) {
		for _, m := range headerRE.FindAllStringIndex(p.text, -1) {
			h := p.text[m[0]:m[1]]
			if !strings.Contains(src, `"`+h+`"`) {
				t.Errorf("%s:%d: header %s is not a string constant anywhere in the code", p.path, lineOf(p.text, m[0]), h)
			}
		}
	}
}

// goSource is every Go file of the module (tests only when withTests),
// concatenated.
func goSource(t *testing.T, withTests bool) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range []string{"../api", "../cmd", "../internal", "../pkg"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			if strings.HasSuffix(path, "_test.go") && !withTests {
				return nil
			}
			src, err := os.ReadFile(path)
			b.Write(src)
			b.WriteByte('\n')
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// fieldRE: a dotted path in backquotes, such as `retryOn.statusCodes`,
// `spec.upstreams[].tls.port` or `backoff.max`.
var fieldRE = regexp.MustCompile("`([a-z][A-Za-z0-9]*(?:\\[[0-9]*\\])?(?:\\.[a-z][A-Za-z0-9]*(?:\\[[0-9]*\\])?)+)(?::[^`]*)?`")

// TestAPIFieldsExist resolves every backquoted dotted path whose first
// segment is a RetryPolicy field (of the object, its spec or an upstream)
// against the CRD's schema: the rest of the path must exist too.
//
// otherKinds are the paths the docs name of other objects whose first segment
// happens to be a RetryPolicy field name.
var otherKinds = map[string]string{
	"metadata.labels": "a Pod's", "spec.containers": "a Pod's", "metadata.name": "a field selector's",
	"tls.crt": "a Secret's key", "tls.key": "a Secret's key",
	"metadata.annotations": "any object's", "metadata.creationTimestamp": "any object's",
	"status.parents[]": "an HTTPRoute's", "spec.parentRefs[0]": "an HTTPRoute's", "metadata.namespace": "a Pod's (downward API)",
}

// A path may also be a SharedQuota's (of the object or its spec): it passes
// when it resolves in either kind.
func TestAPIFieldsExist(t *testing.T) {
	root := crdSchema(t)
	spec := root.Properties["spec"]
	upstream := *spec.Properties["upstreams"].Items.Schema
	quota := *crdVersion(t, "policy.retry.dev_sharedquotas.yaml").Schema.OpenAPIV3Schema
	ours := []apiextensionsv1.JSONSchemaProps{root, spec, upstream, quota, quota.Properties["spec"]}
	n := 0
	for _, p := range pages(t) {
		if p.path == "api.md" {
			continue // generated from the types
		}
		starts := ours
		if p.path == "gateway-api.md" {
			starts = append(gatewayAPISchemas(t), ours...) // a route's fields first
		}
		for _, m := range fieldRE.FindAllStringSubmatchIndex(p.text, -1) {
			if otherKinds[p.text[m[2]:m[3]]] != "" {
				continue
			}
			segs := segments(p.text[m[2]:m[3]])
			checked, missing := false, ""
			for _, s := range starts {
				if _, ok := s.Properties[segs[0]]; !ok {
					continue
				}
				checked = true
				if missing = resolve(s, segs); missing == "" {
					break
				}
			}
			if checked {
				n++
			}
			if missing != "" {
				t.Errorf("%s:%d: `%s`: no schema of the page (RetryPolicy, SharedQuota; on gateway-api.md HTTPRoute, XBackendTrafficPolicy) has %s",
					p.path, lineOf(p.text, m[0]), p.text[m[2]:m[3]], missing)
			}
		}
	}
	t.Logf("%d field paths checked", n)
}

func segments(path string) []string {
	var out []string
	for _, s := range strings.Split(path, ".") {
		name, _, _ := strings.Cut(s, "[")
		out = append(out, name)
	}
	return out
}

// resolve walks segs through s, stepping into list items; it returns the
// first segment that does not exist, or "".
func resolve(s apiextensionsv1.JSONSchemaProps, segs []string) string {
	for i, seg := range segs {
		for s.Items != nil && s.Items.Schema != nil {
			s = *s.Items.Schema
		}
		next, ok := s.Properties[seg]
		if !ok {
			if s.AdditionalProperties != nil || s.XPreserveUnknownFields != nil {
				return "" // a map or free-form object: any key
			}
			return strings.Join(segs[:i+1], ".")
		}
		s = next
	}
	return ""
}

// gatewayAPISchemas are the object and spec schemas of the Gateway API
// kinds docs/gateway-api.md maps: HTTPRoute v1 and XBackendTrafficPolicy
// v1alpha1, from the experimental CRDs of the module in go.mod.
func gatewayAPISchemas(t *testing.T) []apiextensionsv1.JSONSchemaProps {
	t.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatalf("go list -m sigs.k8s.io/gateway-api: %v", err)
	}
	crds := filepath.Join(strings.TrimSpace(string(dir)), "config", "crd", "experimental")
	var out []apiextensionsv1.JSONSchemaProps
	for _, k := range []struct{ file, version string }{
		{"gateway.networking.k8s.io_httproutes.yaml", "v1"},
		{"gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml", "v1alpha1"},
	} {
		b, err := os.ReadFile(filepath.Join(crds, k.file))
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Name == k.version {
				root := *v.Schema.OpenAPIV3Schema
				out = append(out, root, root.Properties["spec"])
			}
		}
	}
	return out
}

func crdSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	return *retryPolicyVersion(t).Schema.OpenAPIV3Schema
}

// retryPolicyVersion is the served version of the generated RetryPolicy CRD.
func retryPolicyVersion(t *testing.T) apiextensionsv1.CustomResourceDefinitionVersion {
	t.Helper()
	return crdVersion(t, "policy.retry.dev_retrypolicies.yaml")
}

// crdVersion is the served version of the generated CRD in file.
func crdVersion(t *testing.T, file string) apiextensionsv1.CustomResourceDefinitionVersion {
	t.Helper()
	b, err := os.ReadFile("../config/crd/bases/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0]
}

// TestGoSamplesAreExcerptsOfExamples: a ```go block is a contiguous run of
// lines (leading white space aside) of an Example function or of the
// declaration it shows, so the sample compiles and, as an Example test with
// an Output comment, runs in make test. The README's whole program
// (package main) is run by TestReadmeGoExampleRuns instead.
func TestGoSamplesAreExcerptsOfExamples(t *testing.T) {
	src := normalize(goSource(t, true))
	for _, p := range pages(t) {
		for _, f := range p.code {
			if f.lang != "go" || (p.path == "../README.md" && strings.HasPrefix(f.body, "package main\n")) {
				continue
			}
			if !strings.Contains(src, normalize(f.body)) {
				t.Errorf("%s:%d: this Go sample is not an excerpt of the code (copy it from an Example test that runs, or make one):\n%s", p.path, f.line, f.body)
			}
		}
	}
}

func normalize(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "\n")
}

// TestCurlIsShownWithTheVariableCurlReads: curl reads only the lowercase
// http_proxy, so HTTP_PROXY=… curl bypasses the sidecar.
func TestCurlIsShownWithTheVariableCurlReads(t *testing.T) {
	for _, p := range pages(t) {
		for i, l := range strings.Split(p.text, "\n") {
			if strings.Contains(l, "HTTP_PROXY=") && strings.Contains(l, "curl") {
				t.Errorf("%s:%d: curl ignores HTTP_PROXY; show http_proxy=…: %s", p.path, i+1, l)
			}
		}
	}
}

var fileRE = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|ya?ml|sh|json|md|txt|tpl))`")

// notFiles are file-like names in the docs that are not files of the
// repository.
var notFiles = map[string]string{
	"policies.json":  "the ConfigMap key",
	"my-policy.yaml": "the user's file in a walkthrough",
}

// TestFilesExist: a backquoted file path names a file git tracks (a bare
// name: the base name of one), so a file that exists only in one work tree
// does not pass.
func TestFilesExist(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	base, tracked := map[string]bool{}, map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		base[filepath.Base(f)] = true
		for d := f; d != "."; d = filepath.Dir(d) {
			tracked[d] = true // the file and the folders it is in
		}
	}
	for _, p := range pages(t) {
		for _, m := range fileRE.FindAllStringSubmatchIndex(p.text, -1) {
			f := p.text[m[2]:m[3]]
			if notFiles[f] != "" {
				continue
			}
			found := base[f]
			if strings.Contains(f, "/") {
				if strings.HasPrefix(f, "bin/") || strings.HasPrefix(f, ".local-cluster/") {
					continue // written by the scripts (git-ignored), not part of a checkout
				}
				found = tracked[strings.TrimPrefix(f, "../")] || tracked[filepath.Join("docs", f)]
			}
			if !found {
				t.Errorf("%s:%d: `%s`: no such file in the repository", p.path, lineOf(p.text, m[0]), f)
			}
		}
	}
}

// TestPrinterColumnsAsShown: a `kubectl get rp` shown with its output shows
// the CRD's printer columns (priority 0; all of them with -o wide).
func TestPrinterColumnsAsShown(t *testing.T) {
	var narrow, wide []string
	for _, c := range retryPolicyVersion(t).AdditionalPrinterColumns {
		if c.Priority == 0 {
			narrow = append(narrow, strings.ToUpper(c.Name))
		}
		wide = append(wide, strings.ToUpper(c.Name))
	}
	getRP := regexp.MustCompile(`kubectl get (?:rp|retrypolicies|retry)\b.*`)
	for _, p := range pages(t) {
		lines := strings.Split(p.text, "\n")
		for i := 0; i+1 < len(lines); i++ {
			cmd := getRP.FindString(lines[i])
			if cmd == "" || strings.Contains(cmd, "-o ") && !strings.Contains(cmd, "-o wide") {
				continue
			}
			head := strings.Fields(lines[i+1])
			if len(head) == 0 || head[0] != "NAME" && head[0] != "NAMESPACE" {
				continue
			}
			want := narrow
			if strings.Contains(cmd, "-o wide") {
				want = wide
			}
			want = append([]string{"NAME"}, want...)
			if head[0] == "NAMESPACE" {
				want = append([]string{"NAMESPACE"}, want...)
			}
			if !slices.Equal(head, want) {
				t.Errorf("%s:%d: kubectl get rp shows %v; the CRD prints %v", p.path, i+2, head, want)
			}
		}
	}
}

// TestSlug pins the anchor rule to GitHub's on the shapes the docs use.
func TestSlug(t *testing.T) {
	tests := map[string]string{
		"The app-side server":                "the-app-side-server",
		"What the app can rely on":           "what-the-app-can-rely-on",
		"`kubectl retry`: see a policy work": "kubectl-retry-see-a-policy-work",
		"R1 Retry-After parsing (RFC 9110)":  "r1-retry-after-parsing-rfc-9110",
		"Timeouts, by phase":                 "timeouts-by-phase",
		"Upgrade & uninstall":                "upgrade--uninstall",
	}
	keys := make([]string, 0, len(tests))
	for k := range tests {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, h := range keys {
		if got := slug(h); got != tests[h] {
			t.Errorf("slug(%q) = %q, want %q", h, got, tests[h])
		}
	}
}
