package quota

import (
	"context"
	"strings"
	"time"
)

// StoreLoss says what a pod admits while it cannot reach the store (the
// SharedQuota's onStoreLoss).
type StoreLoss string

// The onStoreLoss values.
const (
	StoreLossLastShare StoreLoss = "LastShare"
	StoreLossEvenShare StoreLoss = "EvenShare"
	StoreLossDeny      StoreLoss = "Deny"
)

// Spec is what a Client needs of a SharedQuota.
type Spec struct {
	// Name is the SharedQuota's name: the label of its metrics and the key of
	// its state in the store.
	Name string
	// RequestsPerSecond is the fleet's rate of attempt starts.
	RequestsPerSecond float64
	// Burst is how many attempts the fleet may start above the rate: at most
	// rate × t + Burst in any window of length t.
	Burst int
	// Concurrency bounds the fleet's attempts in flight; 0 = no bound.
	Concurrency int
	// OnStoreLoss is what a pod admits while the store is lost.
	OnStoreLoss StoreLoss
}

// Store is the state the fleet shares. Lease is one atomic operation on it.
type Store interface {
	Lease(ctx context.Context, spec Spec, req LeaseRequest) (LeaseReply, error)
}

// LeaseRequest is one pod's lease operation: it reports what it holds and
// how busy it is, and asks for more.
type LeaseRequest struct {
	// Pod identifies the pod in the store (its name, or host and pid).
	Pod string
	// Want is the number of tokens asked for (Want).
	Want int64
	// Held is the number of leased tokens the pod holds, unspent, before
	// this grant: they count against the burst, so the fleet's tokens on hand
	// and in the bucket never exceed it.
	Held int64
	// Returned tokens were held and not spent for a whole interval: they go
	// back to the bucket (they are not in Held any more).
	Returned int64
	// Demand is the pod's rate of attempts, per second, admitted or not.
	Demand float64
	// Slots is the number of fleet-wide concurrency slots the pod asks to
	// hold, InUse the number in use now (it keeps them even if Slots is not
	// granted).
	Slots, InUse int64
	// Hold, if not zero, is the end of a pacing hold the pod saw: the store
	// keeps the latest for the whole fleet.
	Hold time.Time
}

// LeaseReply is the store's answer.
type LeaseReply struct {
	// Granted tokens, now the pod's to spend (at most Want).
	Granted int64
	// Slots the pod may hold until its next lease operation.
	Slots int64
	// FleetDemand is the demand of every live pod, this one included, and
	// Pods their number.
	FleetDemand float64
	Pods        int
	// Hold is the end of the fleet's pacing hold, zero if none.
	Hold time.Time
}

// RefusalCode is the Redis error code by which the server refused the
// credentials or the command — WRONGPASS, NOAUTH or NOPERM — at the start of
// the reply or inside it (a script's error quotes the refused call); ok is
// false for any other error. The sidecar's store (redisstore) and the
// manager's checks (quotastore) both use it, so they call the same replies a
// refusal.
func RefusalCode(err error) (code string, ok bool) {
	msg := err.Error()
	for _, code := range []string{"WRONGPASS", "NOAUTH", "NOPERM"} {
		if strings.HasPrefix(msg, code) || strings.Contains(msg, " "+code+" ") {
			return code, true
		}
	}
	return "", false
}
