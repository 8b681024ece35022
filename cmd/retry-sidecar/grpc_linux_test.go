//go:build linux

package main_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/retrydev/retry-operator/internal/testing/grpctest"
)

// TestTransparentInterceptionForwardsGRPC: an app that knows nothing of the
// sidecar calls api.retry.test:80 with a gRPC client (HTTP/2 with prior
// knowledge); the redirect rules hand the connection to the transparent
// listener, which serves it as HTTP/2 and forwards each call to the
// connection's original destination under the policy of its :authority
// (docs/sidecar.md#grpc-and-http2).
func TestTransparentInterceptionForwardsGRPC(t *testing.T) {
	n := newNetns(t)
	u := serveGRPC(t, n.listenInside(apiAddr+":80"))
	policy := filepath.Join(n.dir, "policy.yaml")
	must(t, os.WriteFile(policy, []byte(policyYAML("test", "api", apiHost, fields()...)), 0o644))
	n.startSidecar(policy, filepath.Join(n.dir, "run", "sidecar.ready"))
	n.must(n.bin, injectedRedirectArgs(t)...)

	dial := func(ctx context.Context, _ string) (c net.Conn, err error) {
		ierr := n.inside(func() error {
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", apiAddr+":80")
			return nil
		})
		if ierr != nil {
			return nil, ierr
		}
		return c, err
	}
	cc := grpctest.Client(t, apiHost, dial)

	got := []grpcResult{call(cc, mUnary, payload(100, 'u')), call(cc, mFail, []byte("x")),
		stream(cc, mStream, payload(512<<10, 'a'), payload(1, 'b'))}
	want := []grpcResult{
		{code: codes.OK, messages: []string{"100×u"}, header: "h", trailer: `t "\x00\x01\xff" success 1`},
		{code: codes.Aborted, message: failMessage, details: "why", trailer: `t "" not-retryable 1`},
		{code: codes.OK, messages: []string{"524288×a", "1×b"}, trailer: ` "" success 1`},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	for _, a := range u.got() {
		if a.authority != apiHost || a.attempt != "1" {
			t.Errorf("upstream got %s with :authority %q, x-retry-attempt %q; want %q, \"1\"", a.method, a.authority, a.attempt, apiHost)
		}
	}
	if len(u.got()) != 3 {
		t.Errorf("upstream got %d calls; want 3", len(u.got()))
	}
}
