package sidecar

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"

	"github.com/retrydev/retry-operator/internal/sidecar/config"
	"github.com/retrydev/retry-operator/internal/sidecar/h1client"
	"github.com/retrydev/retry-operator/internal/sidecar/tracing"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
)

// upstreamStack is everything between a listener and the upstreams, built once
// by newUpstreamStack and shared by every listener (docs/clients.md#tls):
//
//	client        the upstream client: pools, --dial-timeout, loop detection,
//	              and each policy's connectTimeout (carried by every attempt)
//	originator    TLS origination of the upstreams whose policy has tls
//	retryhttp     retries, pacing, admission and the outage budget (the
//	              policies' Limits), replay memory, metrics and logs
//	dial          CONNECT tunnels (loop detection, --dial-timeout, and the
//	              target's connectTimeout when it has a policy)
//
// A listener's handler comes only from proxy, which takes nothing but how
// the listener names a request's upstream (routing): a setting added here
// reaches every listener, and no listener can be wired without one of them
// (the transparent listener once was, without TLS origination).
type upstreamStack struct {
	reloader     *config.Reloader
	client       *h1client.Transport
	observer     retryhttp.Observer
	replayMemory *retryhttp.ReplayMemory
	metrics      *Metrics
	log          *slog.Logger
	self         *selfAddrs
	tracing      *tracing.Tracing
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	// h2c is the upstream client of gRPC calls to cleartext upstreams
	// (grpc.go); those with tls go through client.
	h2c *http2.Transport
	// holds bounds the gRPC answer bytes each app connection holds back
	// (grpchold.go), across the listeners.
	holds *holdShares
}

// newUpstreamStack builds the stack over o's pool and dial settings; own are
// the sidecar's listen addresses, which no request may loop back to.
//
// With tracing (nil: off) every attempt is a span too (docs/observability.md#tracing).
func newUpstreamStack(o Options, log *slog.Logger, own []net.Addr, reloader *config.Reloader, metrics *Metrics, tr *tracing.Tracing) *upstreamStack {
	self := newSelfAddrs(own...)
	replayMemory := o.MaxReplayMemory
	if replayMemory <= 0 {
		replayMemory = DefaultMaxReplayMemory()
	}
	s := &upstreamStack{
		reloader:     reloader,
		client:       UpstreamClient(o, own...),
		observer:     retryhttp.Observers{metrics, NewLogObserver(log)},
		replayMemory: retryhttp.NewReplayMemory(replayMemory),
		metrics:      metrics,
		log:          log,
		self:         self,
		tracing:      tr,
	}
	if t := tr.Observer(); t != nil {
		s.observer = retryhttp.Observers{metrics, NewLogObserver(log), t}
	}
	metrics.WatchReplayMemory(s.replayMemory)
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	s.dial = self.dialContext(dialer.DialContext)
	s.h2c = newH2CTransport(o, s.dial)
	s.holds = newHoldShares(grpcConnHoldBytes)
	return s
}

// proxy is a listener's handler over the stack: rt, how the listener names a
// request's upstream, is all that is its own. The policy, the TLS origination
// and the pass-through accounting of a request all follow rt.
func (s *upstreamStack) proxy(rt routing) *Proxy {
	route := rt.route(s.reloader)
	inner := s.tracing.WrapInner(originator{h1: s.client, reloader: s.reloader, routing: rt})
	return &Proxy{
		Transport: &retryhttp.Transport{
			Inner:        inner,
			Route:        route,
			Observer:     s.observer,
			ReplayMemory: s.replayMemory,
		},
		Dial:    s.dial,
		Metrics: s.metrics,
		Log:     s.log,
		Route:   route,
		Self:    s.self,

		Tracing:    s.tracing,
		PolicyName: s.reloader.PolicyName,

		grpc: &grpcForwarder{routing: rt, reloader: s.reloader, h2c: s.h2c, tls: s.client, log: s.log, metrics: s.metrics,
			retry: &grpcPolicyRetrier{observer: s.observer, metrics: s.metrics}, replayMemory: s.replayMemory, holds: s.holds,
			tracing: s.tracing, policyName: s.reloader.PolicyName},
	}
}

// closeIdleConnections closes the pooled upstream connections (at shutdown).
func (s *upstreamStack) closeIdleConnections() {
	s.client.CloseIdleConnections()
	s.h2c.CloseIdleConnections()
}

// routing is how a listener names a request's upstream.
//
//	byURL   the forward proxy: the URL's authority (absolute-form, or the
//	        Host of an origin-form request, copied into the URL)
//	byHost  the transparent listener: the Host header; the URL names the
//	        connection's original destination, the address the app chose
//
// Either way the dial goes to the URL's host (docs/clients.md#tls).
type routing uint8

const (
	byURL routing = iota
	byHost
)

// match is req's policy in c: the RetryPolicy upstream of its host, else the
// first rule of a route for its host that req meets (a RetryPolicy upstream
// naming the host wins over every route, docs/gateway-api.md#conflicts).
func (rt routing) match(c *config.Config, req *http.Request) *retrypolicy.Policy {
	var p *retrypolicy.Policy
	if rt == byHost {
		p = c.Set.Match(req.Host)
	} else {
		p = c.Set.MatchRequest(req)
	}
	if p != nil || c.Routes == nil {
		return p
	}
	p, _, _ = c.Routes.Match(rt.authority(req), req)
	return p
}

// authority is the name req's policy was matched by: the default SNI, verified
// name and TLS port of its upstream (docs/tls.md).
func (rt routing) authority(req *http.Request) string {
	if rt == byHost {
		return req.Host
	}
	return req.URL.Host
}

// route is the retryhttp.Transport route of a listener: the policy of a
// request, as rt names its upstream, in the configuration in force, or nil
// (pass through).
func (rt routing) route(r *config.Reloader) func(*http.Request) *retrypolicy.Policy {
	return func(req *http.Request) *retrypolicy.Policy {
		c := r.Current()
		if c == nil {
			return nil
		}
		return rt.match(c, req)
	}
}
