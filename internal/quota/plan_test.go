package quota

import (
	"testing"
	"time"
)

func TestWant(t *testing.T) {
	tests := map[string]struct {
		demand, fleet, rate float64
		held                int64
		carry               float64
		want                int64
		wantCarry           float64
	}{
		"a busy pod of an overloaded fleet asks for its scaled share":  {600, 1200, 1000, 0, 0, 57, 0.5},
		"tokens on hand are subtracted":                                {600, 1200, 1000, 25, 0, 32, 0.5},
		"less than a token per interval is carried, not rounded up":    {1, 10, 1.5, 0, 0, 0, 0.01725},
		"the carry makes a token once it reaches one":                  {1, 10, 1.5, 0, 0.99, 1, 0.00725},
		"a first attempt after an idle spell asks for a token at once": {10, 10, 1000, 0, 0, 1, 0.15},
		"holding more than the share asks for nothing":                 {10, 10, 1000, 5, 0.5, 0, 0},
		"a roomy quota's slow pod with none on hand asks for a token":  {1, 10, 1000, 0, 0, 1, 0},
		"a roomy quota's slow pod holding a token asks for nothing":    {1, 10, 1000, 1, 0, 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, carry := Want(tc.demand, tc.fleet, tc.rate, 100*time.Millisecond, tc.held, tc.carry)
			if got != tc.want || carry < tc.wantCarry-1e-9 || carry > tc.wantCarry+1e-9 {
				t.Errorf("Want = %d, carry %g; want %d, carry %g", got, carry, tc.want, tc.wantCarry)
			}
		})
	}
}

func TestFallbackFor(t *testing.T) {
	spec := Spec{RequestsPerSecond: 1000, Burst: 100}
	tests := map[string]struct {
		mode          StoreLoss
		demand, fleet float64
		pods          int
		want          Fallback
	}{
		"LastShare admits the pod's share of the fleet's demand": {StoreLossLastShare, 600, 1200, 10, Fallback{Rate: 500, Burst: 50}},
		"EvenShare admits the rate divided by the pods":          {StoreLossEvenShare, 600, 1200, 10, Fallback{Rate: 100, Burst: 10}},
		"Deny admits nothing":                                    {StoreLossDeny, 600, 1200, 10, Fallback{Deny: true}},
		"a pod that never reached the store admits nothing":      {StoreLossLastShare, 0, 0, 0, Fallback{Deny: true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := FallbackFor(tc.mode, spec, tc.demand, tc.fleet, tc.pods); got != tc.want {
				t.Errorf("FallbackFor = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHorizonLeasesForTheStepsAsTheyCome(t *testing.T) {
	ms := time.Millisecond
	tests := map[string]struct {
		gap, dev, dt         time.Duration
		short                bool
		wantGap, wantDev, hz time.Duration
	}{
		"the first gap seen is taken whole":                                            {0, 0, 100 * ms, false, 100 * ms, 0, 200 * ms},
		"a late step moves the gap a quarter of the way":                               {100 * ms, 0, 180 * ms, false, 120 * ms, 20 * ms, 260 * ms},
		"a short fleet leases for the gap alone":                                       {100 * ms, 0, 180 * ms, true, 120 * ms, 20 * ms, 120 * ms},
		"an early step never leases for less than the interval, + one":                 {100 * ms, 0, 60 * ms, false, 90 * ms, 10 * ms, 210 * ms},
		"a machine running timers very late leases for three intervals at most, + one": {250 * ms, 50 * ms, 250 * ms, false, 250 * ms, 37500 * time.Microsecond, 400 * ms},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gap, dev := Lateness(tc.gap, tc.dev, tc.dt)
			if gap != tc.wantGap || dev != tc.wantDev {
				t.Errorf("Lateness = %s, %s; want %s, %s", gap, dev, tc.wantGap, tc.wantDev)
			}
			if hz := Horizon(gap, dev, tc.short); hz != tc.hz {
				t.Errorf("Horizon = %s, want %s", hz, tc.hz)
			}
		})
	}
}

func TestEntitlement(t *testing.T) {
	tests := map[string]struct {
		credit, demand, fleet, rate float64
		elapsed                     time.Duration
		want                        float64
		capped                      bool
	}{
		"a busy pod of a short fleet earns its share of the rate": {0, 600, 1200, 1000, 100 * time.Millisecond, 50, true},
		"credit left from the last lease is kept":                 {2, 20, 1200, 1000, 100 * time.Millisecond, 2 + 20.0/1200*1000*0.1, true},
		"at most one second of the share is earned":               {0, 20, 1200, 1000, 5 * time.Second, 20.0 / 1200 * 1000, true},
		"a slow pod may save up to one token":                     {0.95, 1, 10, 1.5, time.Second, 1, true},
		"a pod of a fleet that fits the rate takes what it asks":  {7, 600, 900, 1000, 100 * time.Millisecond, 0, false},
		"a pod the store has not seen takes what it asks":         {0, 600, 1200, 1000, -1, 0, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, capped := Entitlement(tc.credit, tc.demand, tc.fleet, tc.rate, tc.elapsed)
			if capped != tc.capped || got < tc.want-1e-9 || got > tc.want+1e-9 {
				t.Errorf("Entitlement = %g, capped %v; want %g, capped %v", got, capped, tc.want, tc.capped)
			}
		})
	}
}
