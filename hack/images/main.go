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

// Command images writes a container image for one static binary as a
// docker-archive tarball, without Docker and without a registry. The tarball
// loads with `ctr -n k8s.io images import` and `kind load image-archive`. A
// binary that is not static (Debian's redis-server, the e2e suite's store)
// goes in with its loader and libraries, each given with -file.
//
// The image matches what the Dockerfile builds on distroless/static:nonroot:
// one layer holding the binary at /<name>, /etc/passwd and /etc/group with the
// nonroot user, /home/nonroot and a sticky /tmp; user 65532:65532; entrypoint
// ["/<name>"]. Timestamps come from SOURCE_DATE_EPOCH (default 0), so the same
// binary always gives the same image digest.
//
//	go run ./hack/images -binary bin/images/.build/retry-sidecar \
//	    -image retry.dev/retry-sidecar:dev -output bin/images/retry-sidecar.tar \
//	    -label org.opencontainers.image.version=dev
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// fileFlags collects repeated -file SRC[=DST] flags: a host file (symbolic
// links followed) copied to DST in the image, by default to the same path.
type fileFlags []string

func (f *fileFlags) String() string { return strings.Join(*f, ",") }

func (f *fileFlags) Set(v string) error {
	if src, _, _ := strings.Cut(v, "="); src == "" {
		return fmt.Errorf("file %q: want SRC or SRC=DST", v)
	}
	*f = append(*f, v)
	return nil
}

// read returns the files, read from the host.
func (f fileFlags) read() ([]File, error) {
	out := make([]File, 0, len(f))
	for _, v := range f {
		src, dst, ok := strings.Cut(v, "=")
		if !ok {
			dst = src
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("-file: %w", err)
		}
		out = append(out, File{Path: dst, Data: b})
	}
	return out, nil
}

// labelFlags collects repeated -label key=value flags.
type labelFlags map[string]string

func (l labelFlags) String() string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k+"="+l[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (l labelFlags) Set(v string) error {
	key, value, ok := strings.Cut(v, "=")
	if !ok || key == "" {
		return fmt.Errorf("label %q: want key=value", v)
	}
	l[key] = value
	return nil
}

func main() {
	labels := labelFlags{}
	var files fileFlags
	var opts Options
	flag.StringVar(&opts.Binary, "binary", "", "path of the static binary to package (required)")
	flag.StringVar(&opts.Image, "image", "", "image reference written into the archive, e.g. retry.dev/retry-sidecar:dev (required)")
	output := flag.String("output", "", "docker-archive tarball to write (required)")
	flag.StringVar(&opts.Name, "name", "", "file name of the binary inside the image; the entrypoint is /<name> (default: the binary's base name)")
	flag.StringVar(&opts.User, "user", "65532:65532", "user:group the image runs as")
	flag.Var(labels, "label", "image label key=value (repeatable)")
	flag.Var(&files, "file", "host file SRC copied into the image at DST (SRC[=DST], default DST=SRC; repeatable): the loader and libraries of a binary that is not static")
	caBundle := flag.String("ca-bundle", "", "PEM file written to /"+CABundlePath+" in the image (the system roots of a Go program)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s -binary FILE -image REF -output TAR [-name NAME] [-label k=v]... [-file SRC[=DST]]...\n", filepath.Base(os.Args[0]))
		flag.PrintDefaults()
	}
	flag.Parse()
	if opts.Binary == "" || opts.Image == "" || *output == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	opts.Labels = labels
	var err error
	if opts.Files, err = files.read(); err != nil {
		fatal(err)
	}
	if *caBundle != "" {
		b, err := os.ReadFile(*caBundle)
		if err != nil {
			fatal(fmt.Errorf("-ca-bundle: %w", err))
		}
		opts.CABundle = b
	}

	created, err := sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		fatal(err)
	}
	opts.Created = created

	res, err := Write(opts, *output)
	if err != nil {
		fatal(err)
	}
	fmt.Printf("images: wrote %s (%s, %s/%s, %s, %.1f MiB)\n",
		*output, res.Reference, res.OS, res.Architecture, res.Digest, float64(res.Size)/(1<<20))
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "images: %v\n", err)
	os.Exit(1)
}
