/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestBuildMatchesTheDockerfile(t *testing.T) {
	opts := Options{
		Name:    "retry-sidecar",
		User:    "65532:65532",
		Labels:  map[string]string{"org.opencontainers.image.title": "retry-sidecar"},
		Created: time.Unix(0, 0).UTC(),
	}
	img, err := Build(opts, []byte("binary"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cf.Config.Entrypoint, []string{"/retry-sidecar"}; !reflect.DeepEqual(got, want) {
		t.Errorf("entrypoint = %q, want %q", got, want)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user = %q, want 65532:65532", cf.Config.User)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform = %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if cf.Config.Labels["org.opencontainers.image.title"] != "retry-sidecar" {
		t.Errorf("labels = %v", cf.Config.Labels)
	}

	type entry struct {
		mode int64
		uid  int
	}
	got := map[string]entry{}
	for name, e := range layerEntries(t, img) {
		got[name] = entry{e.mode, e.uid}
	}
	want := map[string]entry{
		"etc/":          {0o755, 0},
		"etc/passwd":    {0o644, 0},
		"etc/group":     {0o644, 0},
		"home/":         {0o755, 0},
		"home/nonroot/": {0o700, 65532},
		"tmp/":          {0o1777, 0},
		"retry-sidecar": {0o755, 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer entries = %v, want %v", got, want)
	}
}

func TestBuildIsReproducible(t *testing.T) {
	opts := Options{Name: "pause", User: "65532:65532", Created: time.Unix(1700000000, 0).UTC()}
	a, err := Build(opts, []byte("same"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(opts, []byte("same"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("digests differ for the same input: %s != %s", da, db)
	}
}

func TestBuildRejectsPathsAsNames(t *testing.T) {
	for _, name := range []string{"", ".", "..", "bin/manager", "/manager"} {
		if _, err := Build(Options{Name: name}, []byte("x"), "amd64"); err == nil {
			t.Errorf("Build(name=%q) succeeded, want an error", name)
		}
	}
}

func TestStaticELFArchRejectsNonELF(t *testing.T) {
	if _, err := elfArch([]byte("#!/bin/sh\n"), nil); err == nil {
		t.Error("a shell script was accepted as a static binary")
	}
}

func TestCABundleLandsWhereGoLooksForSystemRoots(t *testing.T) {
	img, err := Build(Options{Name: "retry-sidecar", User: "65532:65532", CABundle: []byte("PEM")}, []byte("binary"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	e, ok := layerEntries(t, img)[CABundlePath]
	if !ok {
		t.Fatalf("no %s in the layer", CABundlePath)
	}
	if e.data != "PEM" || e.mode != 0o644 {
		t.Fatalf("%s: %q mode %o, want \"PEM\" 644", CABundlePath, e.data, e.mode)
	}
}

func TestDynamicBinaryNeedsItsLoader(t *testing.T) {
	bin, err := os.ReadFile("/bin/true") // Debian's coreutils: dynamically linked
	if err != nil {
		t.Skipf("no /bin/true: %v", err)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		t.Skip("/bin/true is static here")
	}
	tests := []struct {
		name    string
		files   []File
		wantErr string
	}{
		{name: "without its loader it is refused, naming the loader", wantErr: interp},
		{name: "with a library but not the loader it is refused", files: []File{{Path: "/lib/libc.so.6"}}, wantErr: interp},
		{name: "with its loader it is accepted", files: []File{{Path: interp}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := elfArch(bin, tt.files)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("elfArch: %v, want accepted", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("elfArch: %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestFilesLandAtTheirPathsWithTheirDirectories(t *testing.T) {
	opts := Options{Name: "redis-server", User: "65532:65532", Files: []File{
		{Path: "/lib64/ld-linux-x86-64.so.2", Data: []byte("loader")},
		{Path: "/lib/x86_64-linux-gnu/libc.so.6", Data: []byte("libc")},
		{Path: "/lib/x86_64-linux-gnu/libm.so.6", Data: []byte("libm")},
	}}
	img, err := Build(opts, []byte("binary"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for name, e := range layerEntries(t, img) {
		got[name] = fmt.Sprintf("%o %s", e.mode, e.data)
	}
	want := map[string]string{
		"lib64/":                         "755 ",
		"lib64/ld-linux-x86-64.so.2":     "755 loader",
		"lib/":                           "755 ",
		"lib/x86_64-linux-gnu/":          "755 ",
		"lib/x86_64-linux-gnu/libc.so.6": "755 libc",
		"lib/x86_64-linux-gnu/libm.so.6": "755 libm",
		"redis-server":                   "755 binary",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("layer entry %s = %q, want %q", name, got[name], w)
		}
	}
	if _, err := Build(Options{Name: "x", Files: []File{{Path: "/a"}, {Path: "a"}}}, nil, "amd64"); err == nil {
		t.Error("the same file twice was accepted")
	}
}

// layerEntry is one file or directory of an image's layer.
type layerEntry struct {
	mode int64
	uid  int
	data string
}

// layerEntries reads the one layer of img, by entry name.
func layerEntries(t *testing.T, img v1.Image) map[string]layerEntry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want exactly one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]layerEntry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = layerEntry{mode: h.Mode, uid: h.Uid, data: string(b)}
	}
}
