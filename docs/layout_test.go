package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// maxInternalFolders keeps internal/ navigable by job (STYLE rule 15): a new
// part goes under the folder of its job (the sidecar's under
// internal/sidecar/, a reconciler's beside internal/controller), not beside
// them.
const maxInternalFolders = 15

// TestReadmeTableListsEveryFolder: the table under README's Architecture
// names every top-level folder of the repository and of internal/, and every
// folder it names exists, so "where is X" is answered by reading one table.
func TestReadmeTableListsEveryFolder(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	tracked := map[string]bool{}
	var top, internal []string
	for _, f := range strings.Fields(string(out)) {
		parts := strings.Split(f, "/")
		for i := 1; i < len(parts); i++ {
			tracked[strings.Join(parts[:i], "/")] = true
		}
		if len(parts) > 1 && !strings.HasPrefix(parts[0], ".") && !slices.Contains(top, parts[0]) {
			top = append(top, parts[0])
		}
		if len(parts) > 2 && parts[0] == "internal" && !slices.Contains(internal, parts[1]) {
			internal = append(internal, parts[1])
		}
	}
	if len(internal) > maxInternalFolders {
		t.Errorf("internal/ has %d folders %v, at most %d: put the new one under the folder of its job", len(internal), internal, maxInternalFolders)
	}

	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	arch := readme[strings.Index(readme, "## Architecture"):]
	arch = arch[:strings.Index(arch[1:], "\n## ")+1]
	var named []string
	for _, line := range strings.Split(arch, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`([a-z0-9./-]+)/`").FindAllStringSubmatch(first, -1) {
			named = append(named, m[1])
		}
	}
	for _, n := range named {
		if !tracked[n] {
			t.Errorf("README.md's table names `%s/`: no such folder", n)
		}
	}
	covers := func(dir string) bool {
		for _, n := range named {
			if n == dir || strings.HasPrefix(n, dir+"/") {
				return true
			}
		}
		return false
	}
	for _, d := range top {
		if !covers(d) {
			t.Errorf("README.md's table does not list the folder %s/", d)
		}
	}
	for _, d := range internal {
		if !slices.Contains(named, "internal/"+d) {
			t.Errorf("README.md's table does not list internal/%s/", d)
		}
	}
}

var codePathRE = regexp.MustCompile(`\b(?:internal|pkg|cmd)/[a-z0-9_/.-]*[a-z0-9_]`)

// TestCodePathsExist: a path into the code that README.md or docs/ names
// (internal/sidecar/h1client, pkg/retrypolicy/retryhttp, …) is a folder or a
// file of the repository, so a package that moves takes its mentions along.
func TestCodePathsExist(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	if err != nil {
		t.Skipf("git ls-files: %v", err)
	}
	tracked := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		for d := f; d != "."; d = filepath.Dir(d) {
			tracked[d] = true
		}
	}
	for _, p := range pages(t) {
		for _, m := range codePathRE.FindAllStringIndex(p.text, -1) {
			path := p.text[m[0]:m[1]]
			if next := p.text[m[1]:min(m[1]+1, len(p.text))]; next == "-" || next == "*" {
				continue // a glob: testdata/inject/transparent-*.yaml
			}
			if i := strings.LastIndex(path, "."); i > strings.LastIndex(path, "/") && !tracked[path] {
				path = path[:i] // a package's symbol: internal/sidecar/sockpeek.WatchHangup
			}
			if !tracked[path] {
				t.Errorf("%s:%d: %s: no such file or folder in the repository", p.path, lineOf(p.text, m[0]), path)
			}
		}
	}
}

var goDocNameRE = regexp.MustCompile(`^(?:type|func|const|var) (\w+)`)

// TestLibraryDocListsThePublicAPI: docs/library.md's table of the public
// surface names every exported type, function, and the first constant or
// variable of each group go doc -short shows, of every package under pkg/,
// in that package's row: a new exported name is a choice written down.
func TestLibraryDocListsThePublicAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "../pkg/...").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	b, err := os.ReadFile("library.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := regexp.MustCompile("^\\| `(pkg/[a-z/]+)` \\|").FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := pkg[strings.Index(pkg, "/pkg/")+1:]
		row, ok := rows[rel]
		if !ok {
			t.Errorf("library.md's table has no row for %s", rel)
			continue
		}
		doc, err := exec.Command("go", "doc", "-short", pkg).Output()
		if err != nil {
			t.Fatalf("go doc -short %s: %v", pkg, err)
		}
		for _, line := range strings.Split(string(doc), "\n") {
			m := goDocNameRE.FindStringSubmatch(strings.TrimSpace(line))
			if m != nil && !strings.Contains(row, "`"+m[1]) {
				t.Errorf("library.md's row for %s does not name %s (%s)", rel, m[1], strings.TrimSpace(line))
			}
		}
	}
}
