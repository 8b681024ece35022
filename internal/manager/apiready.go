package manager

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// APIServerReady returns a function that asks the API server's /readyz every
// `every` until it answers 200, for up to `within`. An API server accepts
// connections before it is ready: until its authorizer has synced it answers
// 403 to everything, and /readyz says so (it is always allowed, so it needs
// no permission that is not there yet).
func APIServerReady(cfg *rest.Config, every, within time.Duration) (func(ctx context.Context) error, error) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("an HTTP client for %s: %w", cfg.Host, err)
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/readyz"
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		var last error // the last answer; not a request the bound cut short
		for {
			err := readyz(ctx, c, url)
			if err == nil {
				return nil
			}
			if ctx.Err() == nil || last == nil {
				last = err
			}
			t := time.NewTimer(every)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("the API server is not ready after %s: %w", within, last)
			case <-t.C:
			}
		}
	}, nil
}

func readyz(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /readyz: %s", resp.Status)
	}
	return nil
}
