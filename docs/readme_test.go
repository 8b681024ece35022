package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's Go example is a whole program that builds against this
// module and prints what its comment says, so it cannot rot: extracted, put
// in a module of its own that replaces this one with the checkout, and run
// (the module cache is local: no network).
func TestReadmeGoExampleRuns(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllSubmatch(readme, -1)
	if len(blocks) != 1 {
		t.Fatalf("the README has %d Go blocks, want 1 (the in-process example)", len(blocks))
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go \S+$`).Find(goMod)
	dir := t.TempDir()
	mod := "module readmeexample\n\n" + string(goLine) + "\n\nrequire github.com/retrydev/retry-operator v0.0.0\n\nreplace github.com/retrydev/retry-operator => " + root + "\n"
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": blocks[0][1]} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := exec.Command("go", "run", ".")
	run.Dir = dir
	run.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's Go example does not run: %v\n%s\n%s", err, out, strings.TrimSpace(string(blocks[0][1])))
	}
	if got, want := string(out), "200 OK success\n"; got != want {
		t.Errorf("the README's Go example printed %q, want %q (its comment)", got, want)
	}
}
