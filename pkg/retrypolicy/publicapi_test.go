package retrypolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/retrydev/retry-operator"

// TestPublicAPINamesNoInternalType keeps the library's API what it says
// (docs/library.md): nothing an exported name of a package under pkg/
// reaches — a signature, a field, an interface method, an alias, the value
// of a constant as go doc prints it — is a type or a name of a package no
// program outside this module can import (internal/…). Such a name is
// public surface that no one can use: promote it into a documented public
// package, or hide what reaches it.
func TestPublicAPINamesNoInternalType(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go tool is not on PATH: %v", err)
	}
	pkgs := listPublic(t, goTool)
	var found []string
	for _, p := range pkgs {
		found = append(found, internalTypesOf(p)...)
	}
	found = append(found, internalNamesInGoDoc(t, goTool, pkgs)...)
	for _, f := range found {
		t.Error(f)
	}
}

// listPublic type-checks every package under pkg/ from the compiler's export
// data (go list -export), as a program importing it sees it.
func listPublic(t *testing.T, goTool string) []*types.Package {
	t.Helper()
	cmd := exec.Command(goTool, "list", "-export", "-deps", "-json=ImportPath,Export,DepOnly", module+"/pkg/...")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -export: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	var roots []string
	for dec := json.NewDecoder(strings.NewReader(string(out))); ; {
		var p struct {
			ImportPath, Export string
			DepOnly            bool
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			roots = append(roots, p.ImportPath)
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	var pkgs []*types.Package
	for _, r := range roots {
		p, err := imp.Import(r)
		if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func isInternal(path string) bool {
	return strings.HasPrefix(path, module+"/") &&
		(strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal"))
}

// internalTypesOf walks every exported name of p down through the types it
// mentions (the exported fields and methods of the module's own types) and
// reports each internal type it meets, with the way it was reached.
func internalTypesOf(p *types.Package) []string {
	var found []string
	seen := map[types.Type]bool{}
	var walk func(via string, typ types.Type)
	walkSig := func(via string, s *types.Signature) {
		for i := range s.Params().Len() {
			walk(via+" parameter", s.Params().At(i).Type())
		}
		for i := range s.Results().Len() {
			walk(via+" result", s.Results().At(i).Type())
		}
	}
	walk = func(via string, typ types.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		switch t := typ.(type) {
		case *types.Alias:
			if o := t.Obj(); o.Pkg() != nil && isInternal(o.Pkg().Path()) {
				found = append(found, fmt.Sprintf("%s: %s names %s.%s", p.Path(), via, o.Pkg().Path(), o.Name()))
				return
			}
			walk(via, types.Unalias(t))
		case *types.Named:
			o := t.Obj()
			if o.Pkg() != nil && isInternal(o.Pkg().Path()) {
				found = append(found, fmt.Sprintf("%s: %s names %s.%s", p.Path(), via, o.Pkg().Path(), o.Name()))
				return
			}
			if o.Pkg() != p {
				return // the standard library's, a dependency's or another public package's (checked on its own)
			}
			for i := range t.TypeArgs().Len() {
				walk(via, t.TypeArgs().At(i))
			}
			for i := range t.NumMethods() {
				if m := t.Method(i); m.Exported() {
					walkSig(o.Name()+"."+m.Name(), m.Type().(*types.Signature))
				}
			}
			walk(o.Name(), t.Underlying())
		case *types.Pointer:
			walk(via, t.Elem())
		case *types.Slice:
			walk(via, t.Elem())
		case *types.Array:
			walk(via, t.Elem())
		case *types.Map:
			walk(via, t.Key())
			walk(via, t.Elem())
		case *types.Chan:
			walk(via, t.Elem())
		case *types.Signature:
			walkSig(via, t)
		case *types.Struct:
			for i := range t.NumFields() {
				if f := t.Field(i); f.Exported() || f.Embedded() {
					walk(via+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for i := range t.NumMethods() {
				if m := t.Method(i); m.Exported() {
					walkSig(via+"."+m.Name(), m.Type().(*types.Signature))
				}
			}
			for i := range t.NumEmbeddeds() {
				walk(via, t.EmbeddedType(i))
			}
		}
	}
	for _, name := range p.Scope().Names() {
		if o := p.Scope().Lookup(name); o.Exported() {
			walk(name, o.Type())
		}
	}
	return found
}

// internalNamesInGoDoc reads what a user reads, go doc -all, for a package
// name of the module's internal packages in a declaration (a constant's
// value, say): the type walk cannot see an untyped constant's origin.
func internalNamesInGoDoc(t *testing.T, goTool string, pkgs []*types.Package) []string {
	t.Helper()
	out, err := exec.Command(goTool, "list", "-f", "{{.Name}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var names []string
	for _, n := range strings.Fields(string(out)) {
		if !slices.Contains(names, n) && n != "main" {
			names = append(names, n)
		}
	}
	public := map[string]bool{}
	for _, p := range pkgs {
		public[p.Name()] = true
	}
	var internalNames []string
	for _, n := range names {
		if !public[n] {
			internalNames = append(internalNames, regexp.QuoteMeta(n))
		}
	}
	re := regexp.MustCompile(`(?:^|[^/\w])(` + strings.Join(internalNames, "|") + `)\.[A-Za-z_]`)
	var found []string
	for _, p := range pkgs {
		doc, err := exec.Command(goTool, "doc", "-all", p.Path()).Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", p.Path(), err)
		}
		for _, line := range strings.Split(string(doc), "\n") {
			code := !strings.HasPrefix(line, "    ") && !strings.HasPrefix(strings.TrimSpace(line), "//")
			if m := re.FindString(line); code && m != "" {
				found = append(found, fmt.Sprintf("%s: go doc shows %q", p.Path(), strings.TrimSpace(line)))
			}
		}
	}
	return found
}
