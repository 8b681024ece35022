// Package wire holds the JSON the end-to-end programs exchange: what the flaky
// upstream records per attempt, and what the demo app answers for one call. The
// upstream, the demo app, the demo timeline and the e2e suite all use these types,
// so the four cannot drift apart.
package wire

import "time"

// Arrival is one attempt as the flaky upstream saw it (GET /arrivals?id=X).
type Arrival struct {
	Path           string    `json:"path"`
	Method         string    `json:"method"`
	At             time.Time `json:"at"`
	Attempt        string    `json:"attempt,omitempty"` // X-Retry-Attempt
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	BodyBytes      int       `json:"bodyBytes"`
	Status         int       `json:"status"`
	RetryAfter     string    `json:"retryAfter,omitempty"` // the Retry-After it answered with
	// TLS: the attempt arrived on the upstream's TLS listener (the sidecar
	// originated TLS, docs/tls.md) and the SNI it carried.
	TLS bool   `json:"tls,omitempty"`
	SNI string `json:"sni,omitempty"`
	// GRPCCode is the status a gRPC arrival was answered with (its
	// canonical name, e.g. "UNAVAILABLE"); Status is then 200, as on the wire.
	GRPCCode string `json:"grpcCode,omitempty"`
}

// Report is the demo app's answer to GET /call: the caller's view of one logical
// request, joined with the upstream's arrivals for the same X-Request-Id.
type Report struct {
	RequestID     string            `json:"requestId"`
	Method        string            `json:"method"`
	URL           string            `json:"url"`
	Status        int               `json:"status,omitempty"`
	Error         string            `json:"error,omitempty"`
	Headers       map[string]string `json:"headers"`
	ElapsedMillis int64             `json:"elapsedMillis"`
	StartedAt     time.Time         `json:"startedAt"`
	Arrivals      []Arrival         `json:"arrivals,omitempty"`
}

// LoadReport is the demo app's answer to GET /load: an open-loop load of GETs
// through the sidecar, and what came back.
type LoadReport struct {
	URL  string `json:"url"`
	Rate int    `json:"rate"` // requests started per second
	// StartedAt and StoppedAt bound the starts: the first request started at
	// StartedAt, none after StoppedAt.
	StartedAt time.Time `json:"startedAt"`
	StoppedAt time.Time `json:"stoppedAt"`
	Sent      int       `json:"sent"`
	// Dropped are starts skipped because the in-flight limit was reached.
	Dropped int `json:"dropped"`
	// Outcomes counts the answers by "<status> <X-Retry-Outcome>", e.g.
	// "200 success", "503 shed"; "error" is a call that got no answer.
	Outcomes map[string]int `json:"outcomes"`
}

// GRPCReport is the demo app's answer to GET /grpc-call: the caller's view of
// one unary gRPC call, joined with the upstream's arrivals for the same
// x-request-id.
type GRPCReport struct {
	RequestID string `json:"requestId"`
	Method    string `json:"method"` // the full method, /package.Service/Method
	Target    string `json:"target"` // host:port dialled
	// Code and Message are the call's status as the app received it.
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
	// Trailers holds the x-retry-* and grpc-retry-pushback-ms trailers.
	Trailers      map[string]string `json:"trailers"`
	ElapsedMillis int64             `json:"elapsedMillis"`
	StartedAt     time.Time         `json:"startedAt"`
	Arrivals      []Arrival         `json:"arrivals,omitempty"`
}
