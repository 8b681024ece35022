package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retrydev/retry-operator/internal/testing/testenv"
)

// TestDocsShowRealOutput runs every "$ kubectl retry simulate|rehearse" example
// of docs/kubectl-retry.md and README.md whose policy file is in the repository,
// and checks that the lines shown are lines of the real output, in order ("…"
// marks lines left out).
func TestDocsShowRealOutput(t *testing.T) {
	root := testenv.ModuleRoot()
	t.Chdir(root)
	examples := 0
	for _, doc := range []string{"docs/kubectl-retry.md", "README.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range docExamples(string(b)) {
			args := shellWords(ex.command)
			if len(args) < 3 || args[0] != "kubectl" || args[1] != "retry" || (args[2] != "simulate" && args[2] != "rehearse") {
				continue
			}
			if f := flagValue(args, "-f"); f == "" || !exists(filepath.Join(root, f)) {
				continue
			}
			examples++
			var stdout, stderr bytes.Buffer
			run(args[2:], &stdout, &stderr)
			got := strings.Split(stdout.String()+stderr.String(), "\n")
			i := 0
			for _, want := range ex.output {
				if strings.TrimSpace(want) == "…" || strings.HasPrefix(want, "(Output shortened") {
					continue
				}
				for i < len(got) && got[i] != want {
					i++
				}
				if i == len(got) {
					t.Errorf("%s: %q\nshows a line the command does not print: %q\nreal output:\n%s",
						doc, ex.command, want, stdout.String()+stderr.String())
					break
				}
				i++
			}
		}
	}
	if examples < 8 {
		t.Errorf("checked %d examples; the docs have more: is the parser broken?", examples)
	}
}

type docExample struct {
	command string
	output  []string
}

// docExamples finds "$ command" lines (with "\" continuations) in fenced
// blocks and the output lines after each, up to the next command or fence.
func docExamples(doc string) []docExample {
	var out []docExample
	in := false
	var cur *docExample
	lines := strings.Split(doc, "\n")
	for k := 0; k < len(lines); k++ {
		l := lines[k]
		if strings.HasPrefix(l, "```") {
			in = !in
			cur = nil
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(l, "$ ") {
			cmd := strings.TrimPrefix(l, "$ ")
			for strings.HasSuffix(cmd, `\`) && k+1 < len(lines) {
				k++
				cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[k])
			}
			out = append(out, docExample{command: cmd})
			cur = &out[len(out)-1]
			continue
		}
		if cur != nil {
			cur.output = append(cur.output, l)
		}
	}
	return out
}

// shellWords splits a command line with '…' and "…" quoting.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				w.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
