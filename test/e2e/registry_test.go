//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The images from a registry (docs/development.md, "The local registry"):
// hack/test-e2e.sh local pushes the manager and sidecar tarballs to the local
// cluster's registry and sets E2E_IMG and E2E_SIDECAR_IMG to the pushed
// references (repository@sha256:…); the suite installs those instead of the
// side-loaded retry.dev/*:dev, so the node has to pull them as a user's does.

// pushedImages are the registry references to install, or ok=false when the
// images are side-loaded (kind, an existing cluster, E2E_PULL_FROM_REGISTRY=0).
func pushedImages() (manager, sidecar string, ok bool) {
	manager, sidecar = os.Getenv("E2E_IMG"), os.Getenv("E2E_SIDECAR_IMG")
	return manager, sidecar, manager != "" && sidecar != ""
}

// withPushedImages rewrites the install file's two image references (the
// defaults dist/ is built with) to the pushed ones; it fails if either is absent,
// so a renamed default cannot silently leave the side-loaded image in place.
func withPushedImages(t *testing.T, manifests []byte) []byte {
	t.Helper()
	manager, sidecar, ok := pushedImages()
	if !ok {
		return manifests
	}
	out := string(manifests)
	for from, to := range map[string]string{"retry.dev/manager:dev": manager, "retry.dev/retry-sidecar:dev": sidecar} {
		if !strings.Contains(out, from) {
			t.Fatalf("%s does not name %s; cannot install %s instead", installFile, from, to)
		}
		out = strings.ReplaceAll(out, from, to)
	}
	return []byte(out)
}

// helmImageValues are the chart values that install the pushed images.
func helmImageValues() []string {
	manager, sidecar, ok := pushedImages()
	if !ok {
		return nil
	}
	var args []string
	for key, ref := range map[string]string{"manager": manager, "sidecar": sidecar} {
		repo, digest, _ := strings.Cut(ref, "@")
		args = append(args, "--set", "image."+key+".repository="+repo, "--set", "image."+key+".digest="+digest)
	}
	return args
}

// imagesPulledFromRegistry: the manager pod and the injected sidecar run the
// registry references, the registry holds both repositories, containerd holds
// the references (only a pull puts them there: the tarballs are imported as
// retry.dev/*:dev) and the kubelet reported pulling the sidecar image.
func (s *suite) imagesPulledFromRegistry(t *testing.T) {
	manager, sidecar, ok := pushedImages()
	if !ok {
		t.Skip("images side-loaded, not pushed (hack/test-e2e.sh local sets E2E_IMG and E2E_SIDECAR_IMG)")
	}
	for _, p := range s.managerPods(t) {
		if got := p.Spec.Containers[0].Image; got != manager {
			t.Errorf("manager pod %s runs image %s, want %s", p.Name, got, manager)
		}
	}
	var live corev1.Pod
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&s.appPod), &live); err != nil {
		t.Fatal(err)
	}
	for _, c := range live.Spec.InitContainers {
		if c.Name == sidecarName && c.Image != sidecar {
			t.Errorf("injected sidecar of %s runs image %s, want %s", live.Name, c.Image, sidecar)
		}
	}

	registry := os.Getenv("E2E_REGISTRY")
	repos := registryCatalog(t, registry)
	for _, ref := range []string{manager, sidecar} {
		parsed, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatalf("image reference %q: %v", ref, err)
		}
		repo := parsed.Context().RepositoryStr() // without the registry, tag or digest
		if !slices.Contains(repos, repo) {
			t.Errorf("registry %s lists %v, want %s among them", registry, repos, repo)
		}
	}

	out, err := exec.Command(os.Getenv("E2E_LOCAL_CLUSTER"), "ctr", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("listing containerd's images: %v\n%s", err, out)
	}
	images := strings.Fields(string(out))
	for _, ref := range []string{manager, sidecar} {
		if !slices.Contains(images, ref) {
			t.Errorf("containerd has no image %s (not pulled); it has %v", ref, images)
		}
	}

	// The first injected pod on the node pulled it (with the README install,
	// the README's own pod, in its namespace); later ones find it present.
	events, err := s.cs.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Pulled"})
	if err != nil {
		t.Fatal(err)
	}
	pulled := ""
	for _, e := range events.Items {
		if strings.Contains(e.Message, "Successfully pulled") && strings.Contains(e.Message, sidecar) {
			pulled = e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name + ": " + e.Message
		}
	}
	if pulled == "" {
		t.Errorf("no event says the kubelet pulled %s", sidecar)
	}
	t.Logf("registry %s has %v; containerd has %s and %s; kubelet: %s", registry, repos, manager, sidecar, pulled)
}

// registryCatalog lists the repositories of the registry (the distribution API's
// GET /v2/_catalog).
func registryCatalog(t *testing.T, registry string) []string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/v2/_catalog", registry))
	if err != nil {
		t.Fatalf("registry catalog: %v", err)
	}
	defer resp.Body.Close()
	var catalog struct{ Repositories []string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&catalog) != nil {
		t.Fatalf("registry catalog: status %s or a body that is not a catalog", resp.Status)
	}
	return catalog.Repositories
}
