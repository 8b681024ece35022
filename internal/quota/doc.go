// Package quota is the sidecar's side of a SharedQuota (docs/quota.md): a
// Client keeps, per pod, the send times and concurrency slots it leased from a
// Store that the whole fleet shares, so that admitting an attempt is a local
// operation (limits.Quota) and the store sees a few operations per second
// per pod, never one per request.
//
// The package is pure: time comes from an injected clock.Clock and the store
// is an interface. Package redisstore is the Store of the sidecar (atomic
// scripts on the Redis server's clock); Model is the same arithmetic in Go,
// which the virtual-clock rehearsal (internal/retrysim) and the unit tests
// use. Everything here is safe for concurrent use unless it says otherwise.
package quota
