package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The wait ends with the first 200 from /readyz, and fails, naming the last
// answer, when none comes within the bound.
func TestAPIServerReadyWaitsForReadyz(t *testing.T) {
	var asked, notReadyFor atomic.Int32
	notReadyFor.Store(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("asked %s, want /readyz", r.URL.Path)
		}
		if asked.Add(1) <= notReadyFor.Load() {
			http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	ready, err := APIServerReady(&rest.Config{Host: srv.URL}, 10*time.Millisecond, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := ready(context.Background()); err != nil || asked.Load() != 4 {
		t.Fatalf("ready after %d questions: %v; want nil after 4 (3 not ready, then 200)", asked.Load(), err)
	}

	notReadyFor.Store(1 << 30)
	short, err := APIServerReady(&rest.Config{Host: srv.URL}, 10*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := "the API server is not ready after 100ms: GET /readyz: 500 Internal Server Error"
	if err := short(context.Background()); err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
}
