package manager

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// WebhookDrain is how long a stopping replica's webhook server goes on
// serving: until the Service no longer sends it admission requests.
//
// Why: a replica's endpoint leaves the webhook Service only once the
// EndpointSlice controller and kube-proxy have caught up (about a second),
// and until then the API server still sends it some of the admission
// requests. A server that stopped listening at SIGTERM refused them
// (`connect: connection refused`, the policy webhook's failurePolicy Fail
// refusing the user's apply): seen by the chaos run right after a leader kill
// (docs/operations.md#what-survives-a-fault). The Lease is released at once
// all the same: the election stops before the webhook server.
const WebhookDrain = 2 * time.Second

// DrainingWebhookServer is s, whose Start keeps serving for drain after its
// context ends (controller-runtime's manager stops the webhook server last,
// and waits for it).
func DrainingWebhookServer(s webhook.Server, drain time.Duration) webhook.Server {
	return drainingServer{Server: s, drain: drain}
}

type drainingServer struct {
	webhook.Server
	drain time.Duration
}

// Start runs the server until drain after ctx ends, or until it fails.
func (d drainingServer) Start(ctx context.Context) error {
	serving, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-serving.Done(): // the server failed and Start returned
			return
		}
		t := time.NewTimer(d.drain)
		defer t.Stop()
		select {
		case <-t.C:
			stop()
		case <-serving.Done():
		}
	}()
	return d.Server.Start(serving)
}
