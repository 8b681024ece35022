// Package retrygrpc retries unary gRPC calls in-process by a
// retrypolicy.Policy, with the decisions the retry-sidecar makes
// (docs/grpc.md): a status of retryOn.grpcStatusCodes is retried only for a
// method replayableMethods lists; grpc-retry-pushback-ms is the exact minimum
// wait (longer than retryAfter.maxWait: deferred; negative or malformed: no
// retry); no attempt starts after the caller's deadline or the policy's, and
// each carries the time left as its own deadline (grpc-timeout); a caller that
// cancels ends the call. The outage budget and admission (rateLimit,
// concurrency, quotaRef) apply per attempt as for HTTP.
//
//	conn, err := grpc.NewClient(target,
//		grpc.WithTransportCredentials(insecure.NewCredentials()),
//		grpc.WithUnaryInterceptor(retrygrpc.UnaryClientInterceptor(policy)))
//	var rep retrygrpc.Report
//	err = conn.Invoke(ctx, "/shop.v1.Payments/Get", req, reply, retrygrpc.ReportTo(&rep))
//	// rep.Attempts, rep.Outcome ("success", "exhausted", "deferred", …), rep.NotBefore
//
// A stream the server refused unprocessed is retried by grpc-go itself
// (transparent retry); what reaches the interceptor carries no sign of
// whether the server processed it, so a method that is not replayable is never
// sent twice. Do not combine it with grpc-go's own retryPolicy of a service
// config: attempts would multiply.
package retrygrpc
