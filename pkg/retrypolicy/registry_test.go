package retrypolicy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/clock/clocktest"
	"github.com/retrydev/retry-operator/pkg/retrypolicy/limits"
)

// TestRegistryKeepsStateAcrossReload: a reload compiles new policies; adopting
// them keeps the budget counts and in-flight slots of each upstream.
func TestRegistryKeepsStateAcrossReload(t *testing.T) {
	reg := &Registry{}
	cfg := func(c *Config) {
		c.Budget = &limits.BudgetConfig{RetryPercent: 20}
		c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 1}
	}
	old := compile(t, cfg)
	s1, _ := NewSet(old)
	reg.AdoptAt(now, s1)
	for range 10 {
		old.Limits().Budget().RecordFirstAt(now)
	}
	if !old.Limits().Gate().TryAcquire() {
		t.Fatal("could not take the only slot")
	}

	fresh := compile(t, func(c *Config) { cfg(c); c.Concurrency.MaxInFlight = 2 })
	s2, _ := NewSet(fresh)
	reg.AdoptAt(now, s2)
	if fresh.Limits() != old.Limits() {
		t.Fatal("the reloaded policy did not adopt the upstream's state")
	}
	if f, _ := fresh.Limits().Budget().CountsAt(now); f != 10 {
		t.Fatalf("budget after reload counts %d first attempts, want 10", f)
	}
	if g := fresh.Limits().Gate(); g.InFlight() != 1 || !g.TryAcquire() || g.TryAcquire() {
		t.Fatal("gate after reload: want the held slot kept and the new limit of 2 applied")
	}

	other := compile(t, func(c *Config) { c.Name = "other"; c.Hosts = []string{"other.example"} })
	s3, _ := NewSet(other)
	reg.AdoptAt(now, s3)
	if reg.Get("payments-api") != nil || reg.Get("other") == nil {
		t.Fatal("the registry did not forget the removed upstream or learn the new one")
	}
	noLimits := compile(t, nil)
	s4, _ := NewSet(noLimits)
	reg.AdoptAt(now, s4)
	if noLimits.Limits().Budget() != nil || noLimits.Limits().Gate() != nil {
		t.Fatal("a policy without budget and concurrency got them")
	}
}

// TestRegistrySharesOneStateBetweenPoliciesOfOneName: the rules of one
// upstream chosen per request (a Service's route rules) share its budget,
// from the first adoption and across a reload.
func TestRegistrySharesOneStateBetweenPoliciesOfOneName(t *testing.T) {
	reg := &Registry{}
	budget := func(c *Config) { c.Budget = &limits.BudgetConfig{RetryPercent: 20} }
	a, b := compile(t, budget), compile(t, budget)
	reg.AdoptPoliciesAt(now, a, b)
	if a.Limits() != b.Limits() || reg.Get("payments-api") != a.Limits() {
		t.Fatal("two policies of one name adopted two states")
	}
	a.Limits().Budget().RecordFirstAt(now)
	c := compile(t, budget)
	reg.AdoptPoliciesAt(now, c)
	if f, _ := c.Limits().Budget().CountsAt(now); c.Limits() != a.Limits() || f != 1 {
		t.Fatalf("after reload: shared %v, %d first attempts; want the state kept with 1", c.Limits() == a.Limits(), f)
	}
}

// TestAdmitGivesTheStartTokenBackWhenTheGateSheds: an attempt shed by the
// concurrency gate never started, so it does not spend a rate-limit token.
func TestAdmitGivesTheStartTokenBackWhenTheGateSheds(t *testing.T) {
	clk := clocktest.NewClock(now)
	p := compile(t, func(c *Config) {
		c.RateLimit = &limits.RateLimitConfig{RequestsPerSecond: 1, Burst: 2}
		c.Concurrency = &limits.ConcurrencyConfig{MaxInFlight: 1, MaxQueued: 0, QueueTimeout: time.Second}
	})
	l := p.limits.Load()
	sleep := func(context.Context, time.Duration) error { t.Fatal("no wait expected"); return nil }
	held, _, err := l.Admit(context.Background(), clk, sleep, time.Minute)
	if err != nil {
		t.Fatalf("first Admit: %v", err)
	}
	if _, _, err := l.Admit(context.Background(), clk, sleep, time.Minute); !errors.Is(err, limits.ErrShed) {
		t.Fatalf("second Admit with the gate full = %v, want limits.ErrShed", err)
	}
	if got := l.Limiter().TokensAt(clk.Now()); got != 1 {
		t.Fatalf("tokens left after the shed = %v, want 1 (the shed attempt's token given back)", got)
	}
	held.Release(clk.Now())
}

// TestRegistryKeepsTheHoldAcrossReload: the pacer is part of the upstream's
// limits.State, so a reloaded policy is still held.
func TestRegistryKeepsTheHoldAcrossReload(t *testing.T) {
	clk := clocktest.NewClock(now)
	reg := &Registry{}
	paced := func(c *Config) { c.Pacing = limits.PacingConfig{RateLimitHeaders: true} }
	old := compile(t, paced)
	s1, _ := NewSet(old)
	reg.AdoptAt(now, s1)
	old.Limits().Pacer().HoldAt(now, clk, now.Add(time.Minute), limits.HoldRateLimit, nil)

	fresh := compile(t, func(c *Config) { paced(c); c.MaxAttempts = 2 })
	s2, _ := NewSet(fresh)
	reg.AdoptAt(now, s2)
	if u, r := fresh.Limits().Pacer().Hold(); !u.Equal(now.Add(time.Minute)) || r != limits.HoldRateLimit {
		t.Fatalf("hold after reload = %v, %v; want now+1m, rate-limit", u, r)
	}
	if _, _, err := fresh.Limits().Pacer().Wait(context.Background(), clk, time.Second); !errors.Is(err, limits.ErrHeld) {
		t.Fatalf("Wait on the reloaded policy = %v, want limits.ErrHeld", err)
	}
	off := compile(t, nil)
	s3, _ := NewSet(off)
	reg.AdoptAt(now, s3)
	if off.Limits().Pacer() != nil {
		t.Fatal("a policy without pacing kept a pacer")
	}
}
