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
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
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

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers = %d, %v; want exactly one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	type entry struct {
		mode int64
		uid  int
	}
	got := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = entry{h.Mode, h.Uid}
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
	if _, err := staticELFArch([]byte("#!/bin/sh\n")); err == nil {
		t.Error("a shell script was accepted as a static binary")
	}
}

func TestCABundleLandsWhereGoLooksForSystemRoots(t *testing.T) {
	img, err := Build(Options{Name: "retry-sidecar", User: "65532:65532", CABundle: []byte("PEM")}, []byte("binary"), "amd64")
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the layer (%v)", CABundlePath, err)
		}
		if h.Name == CABundlePath {
			b, _ := io.ReadAll(tr)
			if string(b) != "PEM" || h.Mode != 0o644 {
				t.Fatalf("%s: %q mode %o, want \"PEM\" 644", h.Name, b, h.Mode)
			}
			return
		}
	}
}
