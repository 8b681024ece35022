package config_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/policyset/policysettest"
	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// TestAnEditBeforeTheWatchIsInPlaceIsLoaded: a policies.json rewritten
// after the first load but before the file watch is in place raised no
// event; it is loaded all the same, not a resync later (a CI run of
// TestNotReadyUntilAValidConfigIsLoaded waited 10 s for it in vain).
func TestAnEditBeforeTheWatchIsInPlaceIsLoaded(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policies.json")
	if err := os.WriteFile(file, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := config.NewReloader(config.Sources{ConfigDir: dir}, slog.New(slog.NewJSONHandler(io.Discard, nil)), sidecar.NewMetrics())
	if err := r.Reload(); err == nil {
		t.Fatal("a broken policies.json was loaded")
	}
	valid := policysettest.Rendered(t, policysettest.PolicyYAML("a.example", ""), 1)
	if err := os.WriteFile(file, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	config.WatchSources(ctx, r, config.APICredentials{}, 10*time.Millisecond, time.Hour)
	polltest.UntilTrue(t, 5*time.Second, func() bool { return r.Current() != nil })
}
