package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the house rule "functions fit a screen": a function or
// method, from its func line to its closing brace, is at most this many lines.
const maxFuncLines = 80

// TestNoFunctionIsLongerThanAScreen reads every Go file of the repository,
// tests included (generated files, testdata/ and bin/ left out), and names
// each function longer than maxFuncLines with its place and length.
func TestNoFunctionIsLongerThanAScreen(t *testing.T) {
	var long []string // "file:line: func is N lines"
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "bin" || n == "testdata" || n == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasPrefix(d.Name(), "zz_generated.") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start := fset.Position(fn.Pos()).Line
			if n := fset.Position(fn.Body.Rbrace).Line - start + 1; n > maxFuncLines {
				long = append(long, fmt.Sprintf("%s:%d: %s is %d lines", rel, start, funcName(fn), n))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range long {
		t.Errorf("%s, over %d: split it: functions fit a screen", l, maxFuncLines)
	}
}

// funcName is a function's name, or Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
