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
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// nonroot is the distroless convention the Dockerfile's base image uses.
const (
	nonrootUID = 65532
	passwd     = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group      = "root:x:0:\nnonroot:x:65532:\n"
)

// Options describes one image. The zero Created is the Unix epoch.
type Options struct {
	Binary  string            // static ELF binary on disk
	Image   string            // reference written into the archive
	Name    string            // file name inside the image; "" = base name of Binary
	User    string            // "uid:gid"
	Labels  map[string]string // OCI labels
	Created time.Time         // layer mtimes and config "created"
	// CABundle, when set, is written to /etc/ssl/certs/ca-certificates.crt,
	// where Go's crypto/x509 looks for the system roots on Linux (the sidecar
	// originates TLS; docs/tls.md). SSL_CERT_FILE / SSL_CERT_DIR still override it.
	CABundle []byte
	// Files are more files in the image: the dynamic loader and shared
	// libraries of a program that is not static (Debian's redis-server for
	// the e2e suite's store, docs/development.md).
	Files []File
}

// File is one more file in the image, at Path (absolute, e.g.
// /lib/x86_64-linux-gnu/libc.so.6), mode 0755 (libraries are mapped
// executable), owned by root.
type File struct {
	Path string
	Data []byte
}

// CABundlePath is where the CA bundle goes in the image (Debian's path, the
// first one Go's crypto/x509 tries on Linux).
const CABundlePath = "etc/ssl/certs/ca-certificates.crt"

// Result is what Write produced.
type Result struct {
	Reference    string
	Digest       v1.Hash
	OS           string
	Architecture string
	Size         int64 // bytes of the tarball
}

// Write builds the image described by opts and writes it as a docker-archive
// tarball at out (atomically: a partial file is never left at out).
func Write(opts Options, out string) (Result, error) {
	ref, err := name.NewTag(opts.Image, name.StrictValidation)
	if err != nil {
		return Result{}, fmt.Errorf("image %q: want registry/repository:tag: %w", opts.Image, err)
	}
	bin, err := os.ReadFile(opts.Binary)
	if err != nil {
		return Result{}, err
	}
	arch, err := elfArch(bin, opts.Files)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", opts.Binary, err)
	}
	if opts.Name == "" {
		opts.Name = filepath.Base(opts.Binary)
	}
	img, err := Build(opts, bin, arch)
	if err != nil {
		return Result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return Result{}, err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		_ = os.Remove(tmp)
		return Result{}, fmt.Errorf("write %s: %w", out, err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return Result{}, err
	}
	st, err := os.Stat(out)
	if err != nil {
		return Result{}, err
	}
	return Result{Reference: ref.String(), Digest: digest, OS: "linux", Architecture: arch, Size: st.Size()}, nil
}

// Build returns the image: empty.Image plus one layer, with the config set.
func Build(opts Options, bin []byte, arch string) (v1.Image, error) {
	if strings.Contains(opts.Name, "/") || opts.Name == "" || opts.Name == "." || opts.Name == ".." {
		return nil, fmt.Errorf("name %q: want a plain file name", opts.Name)
	}
	layerTar, err := rootfs(opts.Name, bin, opts.CABundle, opts.Files, opts.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: opts.Created},
			CreatedBy: "hack/images: /" + opts.Name,
			Comment:   comment(opts.Files),
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = arch
	cf.Created = v1.Time{Time: opts.Created}
	cf.Config = v1.Config{
		User:       opts.User,
		Entrypoint: []string{"/" + opts.Name},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels:     opts.Labels,
	}
	return mutate.ConfigFile(img, cf)
}

func comment(files []File) string {
	if len(files) > 0 {
		return fmt.Sprintf("binary and %d files, nonroot", len(files))
	}
	return "static binary, nonroot"
}

// rootfs returns the uncompressed layer: the distroless-style nonroot files,
// the binary at /<binName> and files, every entry stamped with mtime.
func rootfs(binName string, bin, caBundle []byte, files []File, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	dir := func(p string, mode int64, uid int) error {
		made[p] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Format: tar.FormatPAX})
	}
	// parents writes the directories above p that are not in the layer yet.
	parents := func(p string) error {
		var missing []string
		for d := path.Dir(p); d != "." && !made[d]; d = path.Dir(d) {
			missing = append(missing, d)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			if err := dir(missing[i], 0o755, 0); err != nil {
				return err
			}
		}
		return nil
	}
	file := func(p string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, nonrootUID) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return file(path.Clean(binName), 0o755, bin) },
	}
	if caBundle != nil {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file(CABundlePath, 0o644, caBundle) },
		)
	}
	for _, f := range files {
		p := strings.TrimPrefix(path.Clean("/"+f.Path), "/")
		steps = append(steps, func() error {
			if made[p] || p == path.Clean(binName) {
				return fmt.Errorf("file %s: twice in the image", f.Path)
			}
			if err := parents(p); err != nil {
				return err
			}
			made[p] = true
			return file(p, 0o755, f.Data)
		})
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// elfArch returns the GOARCH of a Linux ELF binary, and an error for anything
// else and for a dynamically linked binary whose loader (ELF interpreter) is
// not among files: an image built on empty.Image has no libc and no loader,
// so it would fail only at run time. The libraries it needs are the caller's
// to list (hack/build-images.sh takes them from ldd).
func elfArch(bin []byte, files []File) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("reading the ELF interpreter: %w", err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		if !slices.ContainsFunc(files, func(f File) bool { return path.Clean("/"+f.Path) == interp }) {
			return "", fmt.Errorf("dynamically linked (ELF interpreter %s) and the interpreter is not among -file: build it with CGO_ENABLED=0, or give its loader and libraries with -file", interp)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	case elf.EM_PPC64:
		return "ppc64le", nil
	case elf.EM_S390:
		return "s390x", nil
	case elf.EM_RISCV:
		return "riscv64", nil
	default:
		return "", fmt.Errorf("unsupported ELF machine %v", f.Machine)
	}
}

// sourceDateEpoch parses SOURCE_DATE_EPOCH (reproducible-builds.org); "" is 0.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want non-negative integer seconds", v)
	}
	return time.Unix(sec, 0).UTC(), nil
}
