package retryhttp

import "testing"

func TestReplayMemory(t *testing.T) {
	m := NewReplayMemory(100)
	steps := []struct {
		op   string
		n    int64
		ok   bool
		used int64
	}{
		{"reserve", 60, true, 60},
		{"reserve", 41, false, 60},
		{"reserve", 40, true, 100},
		{"reserve", 1, false, 100},
		{"release", 60, true, 40},
		{"reserve", -1, false, 40},
		{"reserve", 60, true, 100},
	}
	for i, s := range steps {
		ok := true
		if s.op == "reserve" {
			ok = m.tryReserve(s.n)
		} else {
			m.release(s.n)
		}
		if ok != s.ok || m.InUse() != s.used {
			t.Fatalf("step %d: %s %d = %v with %d in use; want %v with %d", i, s.op, s.n, ok, m.InUse(), s.ok, s.used)
		}
	}
	var none *ReplayMemory
	if !none.tryReserve(1 << 40) {
		t.Fatal("a nil ReplayMemory refused a reservation; want no cap")
	}
}
