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

// LeaseRequest is one pod's lease operation: it reports how busy it is and
// asks for send times and slots. It and LeaseReply are also the JSON body of
// the manager's lease endpoint (docs/quota.md#trust): plain data, with Pod
// and Namespace never taken from the wire. Nothing in it can raise the
// quota's rate, burst or concurrency: those come with the Spec, from the
// trusted side, and the store bounds every number here (Model).
type LeaseRequest struct {
	// Pod identifies the pod in the store (its name, or host and pid).
	Pod string `json:"-"`
	// Namespace is the pod's namespace: the unit of fairness between the
	// consumers of a quota. Behind the manager's lease endpoint both Pod and
	// Namespace come from the pod's verified identity, never from what the
	// pod sends (docs/quota.md#trust).
	Namespace string `json:"-"`
	// Want is the number of send times asked for, Due how many of them are
	// for attempts waiting now: the store may place those in the past (up
	// to the quota's tolerance) so they start at once, and the others from
	// now on, so they stay good longest.
	Want int64 `json:"want"`
	Due  int64 `json:"due,omitempty"`
	// Demand is the pod's rate of attempts, per second, admitted or not: its
	// claim in the store's division of the rate (FairShares).
	Demand float64 `json:"demand"`
	// Slots is the number of fleet-wide concurrency slots the pod asks to
	// hold (SlotsWant), InUse the number in use now (it keeps them even if
	// Slots is not granted).
	Slots int64 `json:"slots,omitempty"`
	InUse int64 `json:"inUse,omitempty"`
	// Hold, if not zero, is the end of a pacing hold the pod saw: the store
	// keeps the latest for the whole fleet.
	Hold time.Time `json:"hold,omitzero"`
}

// LeaseReply is the store's answer. The send times are relative to the
// store's clock at the lease: the pod puts them on its own clock at the
// moment the reply arrives, so they are never early (Client).
type LeaseReply struct {
	// Granted is the number of send times granted: the first First after
	// the store's now (negative: already due), then one every Spacing. An
	// attempt may start at a send time or up to Lateness after it; a send
	// time not used by then is dropped.
	Granted  int64         `json:"granted"`
	First    time.Duration `json:"first"`
	Spacing  time.Duration `json:"spacing"`
	Lateness time.Duration `json:"lateness"`
	// Rate is the pod's share of the quota's rate as the store divides it
	// now, per second: what it admits under onStoreLoss LastShare.
	Rate float64 `json:"rate"`
	// Slots the pod may hold until its next lease operation.
	Slots int64 `json:"slots,omitempty"`
	// FleetDemand is the demand of the pods drawing on the quota (leased
	// within Drawing), this one included; Pods the number of pods the store
	// knows (seen within LeaseTTL): what onStoreLoss EvenShare divides by.
	FleetDemand float64 `json:"fleetDemand"`
	Pods        int     `json:"pods"`
	// Hold is the end of the fleet's pacing hold, zero if none.
	Hold time.Time `json:"hold,omitzero"`
}

// RefusalCode is the Redis error code by which the server refused the
// credentials or the command — WRONGPASS, NOAUTH or NOPERM — at the start of
// the reply or inside it (a script's error quotes the refused call); ok is
// false for any other error. The sidecar's store (redisstore) and the
// manager's checks (storeadmin) both use it, so they call the same replies a
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
