package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// registryBinary is CNCF Distribution as Debian packages it (docker-registry).
const registryBinary = "/usr/bin/docker-registry"

// startRegistry runs a real registry on a free loopback port, storing blobs
// in a temporary directory, and returns its host:port once it listens.
func startRegistry(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(registryBinary); err != nil {
		if os.Getenv("RETRY_REQUIRE_TOOLS") != "" { // .ci/run: a skip would hide what is not tested
			t.Fatalf("%s not installed (Debian package docker-registry) and RETRY_REQUIRE_TOOLS is set: %v", registryBinary, err)
		}
		t.Skipf("%s not installed (Debian package docker-registry; .ci/run installs it): %v", registryBinary, err)
	}
	// A free port: the registry binds it right after (it takes no listener).
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yml")
	err = os.WriteFile(config, fmt.Appendf(nil, "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "storage"), addr), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, registryBinary, "serve", config)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	// Distribution logs "listening on <addr>" once its socket is bound.
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on") {
				close(listening)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		t.Fatalf("docker-registry did not report listening on %s within 30s", addr)
	}
	return addr
}

// TestPushUploadsTheTarballAsTheRegistryServesIt: a tarball pushed to a real
// registry over plain HTTP on loopback (no -insecure needed there) is served
// back under the reference with the tarball's digest, whatever tag the
// tarball was written with.
func TestPushUploadsTheTarballAsTheRegistryServesIt(t *testing.T) {
	registry := startRegistry(t)
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	built, err := name.NewTag("retry.dev/manager:dev")
	if err != nil {
		t.Fatal(err)
	}
	tar := filepath.Join(t.TempDir(), "manager.tar")
	if err := tarball.WriteToFile(tar, built, img); err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		ref      string
		insecure bool
	}{
		"a tag on a loopback registry":              {ref: registry + "/retry/manager:v0.1.0"},
		"a second tag of the same image, -insecure": {ref: registry + "/retry/manager:latest", insecure: true},
		"a nested repository":                       {ref: registry + "/team/retry/retry-sidecar:v0.1.0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Push(t.Context(), tar, tc.ref, tc.insecure)
			if err != nil {
				t.Fatal(err)
			}
			if got.DigestStr() != want.String() {
				t.Errorf("Push returned %s, want digest %s", got, want)
			}
			desc, err := remote.Get(mustRef(t, tc.ref), remote.WithContext(t.Context()))
			if err != nil {
				t.Fatalf("pulling %s back: %v", tc.ref, err)
			}
			if desc.Digest != want {
				t.Errorf("the registry serves %s as %s, want %s", tc.ref, desc.Digest, want)
			}
		})
	}
}

// TestPushNamesWhatIsWrong: a missing tarball and an invalid reference fail
// before anything is sent, saying which.
func TestPushNamesWhatIsWrong(t *testing.T) {
	tests := map[string]struct {
		tarball, ref, want string
	}{
		"a missing tarball points at make build-images": {
			tarball: filepath.Join(t.TempDir(), "manager.tar"), ref: "127.0.0.1:1/retry/manager:v1",
			want: "no such tarball (make build-images writes it)",
		},
		"an invalid reference is named": {
			tarball: "unused.tar", ref: "Registry/UPPER:v1",
			want: `image reference "Registry/UPPER:v1"`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Push(t.Context(), tc.tarball, tc.ref, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Push = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func mustRef(t *testing.T, ref string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
