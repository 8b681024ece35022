package retrypolicy

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// grpcConfig retries UNAVAILABLE (14) and RESOURCE_EXHAUSTED (8) for the
// methods of /shop.v1.Payments/Get and every method of /shop.v1.Catalogue.
func grpcConfig(c *Config) {
	c.RetryOnGRPCStatus = []uint32{14, 8}
	c.ReplayableMethods = []string{"GET", "/shop.v1.Payments/Get", "/shop.v1.Catalogue/*"}
	c.Backoff.Jitter = JitterNone
}

func TestParseGRPCTimeout(t *testing.T) {
	tests := map[string]struct {
		value   string
		want    time.Duration
		wantErr error
	}{
		"one second":                         {"1S", time.Second, nil},
		"250 milliseconds":                   {"250m", 250 * time.Millisecond, nil},
		"two hours":                          {"2H", 2 * time.Hour, nil},
		"three minutes":                      {"3M", 3 * time.Minute, nil},
		"seven microseconds":                 {"7u", 7 * time.Microsecond, nil},
		"zero nanoseconds is no time at all": {"0n", 0, nil},
		"eight digits is the most":           {"99999999n", 99999999, nil},
		"leading zeros count as digits":      {"00000001S", time.Second, nil},
		"eight digits of hours saturate":     {"99999999H", MaxDelay, nil},
		"eight digits of minutes fit":        {"99999999M", 99999999 * time.Minute, nil},
		"nine digits are refused":            {"123456789S", 0, errTimeoutDigits},
		"a unit alone is refused":            {"S", 0, errTimeoutDigits},
		"a sign is refused":                  {"+1S", 0, errTimeoutDigits},
		"a leading space is refused":         {" 1S", 0, errTimeoutDigits},
		"a decimal point is refused":         {"1.5S", 0, errTimeoutDigits},
		"a lower-case s is no unit":          {"1s", 0, errTimeoutUnit},
		"Go's ms is no unit":                 {"1ms", 0, errTimeoutUnit},
		"digits without a unit are refused":  {"100", 0, errTimeoutUnit},
		"a trailing space is no unit":        {"1S ", 0, errTimeoutUnit},
		"an empty value is refused":          {"", 0, errTimeoutEmpty},
		"a fullwidth digit is refused":       {"１S", 0, errTimeoutDigits},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseGRPCTimeout(tc.value)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParseGRPCTimeout(%q) = %v, %v; want %v, %v", tc.value, got, err, tc.want, tc.wantErr)
			}
		})
	}
	if got := errTimeoutUnit.Error(); got != "grpc-timeout: bad-unit" {
		t.Errorf("error text %q", got)
	}
}

func TestParseGRPCPushback(t *testing.T) {
	tests := map[string]struct {
		value   string
		want    time.Duration
		wantErr error
	}{
		"zero is retry now":               {"0", 0, nil},
		"800 milliseconds":                {"800", 800 * time.Millisecond, nil},
		"leading zeros":                   {"0042", 42 * time.Millisecond, nil},
		"the largest exact value":         {strconv.FormatInt(int64(MaxDelay/time.Millisecond), 10), MaxDelay / time.Millisecond * time.Millisecond, nil},
		"one more saturates":              {strconv.FormatInt(int64(MaxDelay/time.Millisecond)+1, 10), MaxDelay, nil},
		"twenty digits saturate":          {"99999999999999999999", MaxDelay, nil},
		"minus one asks for no retry":     {"-1", 0, errPushbackNeg},
		"a long negative number":          {"-99999999999999999999", 0, errPushbackNeg},
		"a plus sign is malformed":        {"+5", 0, errPushbackInteger},
		"a minus sign alone is malformed": {"-", 0, errPushbackInteger},
		"a decimal is malformed":          {"1.5", 0, errPushbackInteger},
		"a unit is malformed":             {"5ms", 0, errPushbackInteger},
		"a space is malformed":            {" 5", 0, errPushbackInteger},
		"hexadecimal is malformed":        {"0x10", 0, errPushbackInteger},
		"an empty value is malformed":     {"", 0, errPushbackEmpty},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseGRPCPushback(tc.value)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParseGRPCPushback(%q) = %v, %v; want %v, %v", tc.value, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestGRPCMethodReplayable(t *testing.T) {
	p := compile(t, grpcConfig)
	tests := map[string]struct {
		path string
		want bool
	}{
		"a listed method":                           {"/shop.v1.Payments/Get", true},
		"another method of the same service":        {"/shop.v1.Payments/Charge", false},
		"a method of a service listed with *":       {"/shop.v1.Catalogue/List", true},
		"the service's name alone":                  {"/shop.v1.Catalogue/", false},
		"a path below a method is no gRPC method":   {"/shop.v1.Catalogue/List/x", false},
		"a service whose name extends a listed one": {"/shop.v1.CatalogueAdmin/List", false},
		"a method name in another case":             {"/shop.v1.Payments/get", false},
		"an HTTP method is no gRPC method":          {"GET", false},
		"an empty path":                             {"", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := p.GRPCMethodReplayable(tc.path); got != tc.want {
				t.Fatalf("GRPCMethodReplayable(%q) = %v, want %v", tc.path, got, tc.want)
			}
		})
	}
	if p.MethodReplayable("/shop.v1.Payments/Get") || !p.MethodReplayable("GET") {
		t.Errorf("the HTTP methods are %v; a gRPC pattern is not an HTTP method", p.methods)
	}
}

func TestRetriesGRPCStatus(t *testing.T) {
	p := compile(t, grpcConfig)
	for code := uint32(0); code <= 40; code++ {
		if got, want := p.RetriesGRPCStatus(code), code == 14 || code == 8; got != want {
			t.Errorf("RetriesGRPCStatus(%d) = %v, want %v", code, got, want)
		}
	}
	if got := p.RetriesGRPCStatus(1 << 31); got {
		t.Errorf("RetriesGRPCStatus(1<<31) = true")
	}
	c := p.Config()
	if !slices.Equal(c.RetryOnGRPCStatus, []uint32{14, 8}) {
		t.Fatalf("Config().RetryOnGRPCStatus = %v, want [14 8]", c.RetryOnGRPCStatus)
	}
	c.RetryOnGRPCStatus[0] = 13
	if p.Config().RetryOnGRPCStatus[0] != 14 {
		t.Errorf("Config() shares RetryOnGRPCStatus with the policy")
	}
}

func TestCompileRejectsGRPCStatus(t *testing.T) {
	tests := map[string]struct {
		codes []uint32
		want  string
	}{
		"OK is never retried": {[]uint32{14, 0},
			"retryOn.grpcStatusCodes[1]: must be a gRPC status code from 1 (CANCELLED) to 16 (UNAUTHENTICATED); 0, OK, is never retried (got 0)"},
		"17 is no gRPC status": {[]uint32{17},
			"retryOn.grpcStatusCodes[0]: must be a gRPC status code from 1 (CANCELLED) to 16 (UNAUTHENTICATED); 0, OK, is never retried (got 17)"},
		"a code listed twice": {[]uint32{14, 8, 14},
			"retryOn.grpcStatusCodes[2]: duplicate of retryOn.grpcStatusCodes[0] (14)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := baseConfig()
			c.RetryOnGRPCStatus = tc.codes
			_, err := Compile(c)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Compile: %v\nwant: %s", err, tc.want)
			}
		})
	}
	c := baseConfig()
	c.ReplayableMethods = []string{"/shop.v1.*/Get"}
	if _, err := Compile(c); err == nil || !strings.HasPrefix(err.Error(), "replayableMethods[0]: must be a gRPC method pattern") {
		t.Errorf("a wildcard service compiled: %v", err)
	}
}

// TestDecideGRPC is DecideAt's table for gRPC calls (docs/grpc.md): the
// status, the method, the pushback and the deadline. Backoff 1s·2^i, no
// jitter, 4 attempts, maxWait 30s, no spread, reserve 100ms.
func TestDecideGRPC(t *testing.T) {
	const unavailable, exhausted, internal = 14, 8, 13
	pushback := func(d time.Duration) Hint { return Hint{Delay: d} }
	tests := map[string]struct {
		a    Attempt
		want Decision
	}{
		"OK is success": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: 0, Replayable: true},
			Decision{Action: Stop, Outcome: OutcomeSuccess}},
		"OK with an HTTP status field left over is still success": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: 0, Status: 503, Replayable: true},
			Decision{Action: Stop, Outcome: OutcomeSuccess}},
		"an unlisted status is not retryable": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: internal, Replayable: true},
			Decision{Action: Stop, Outcome: OutcomeNotRetryable}},
		"a listed status of a replayable method is retried after the local backoff": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: unavailable, Replayable: true},
			Decision{Action: Retry, Delay: time.Second}},
		"a listed status of a method that is not replayable is given back": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: unavailable},
			Decision{Action: Stop, Outcome: OutcomeNotReplayable}},
		"a pushback longer than the backoff is waited exactly": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: exhausted, Replayable: true, Hint: pushback(2500 * time.Millisecond), HasHint: true},
			Decision{Action: Retry, Delay: 2500 * time.Millisecond}},
		"a pushback shorter than the backoff never shortens it": {
			Attempt{Number: 2, GRPC: true, GRPCStatus: unavailable, Replayable: true, Hint: pushback(300 * time.Millisecond), HasHint: true},
			Decision{Action: Retry, Delay: 2 * time.Second}},
		"a pushback of 0 keeps the local backoff": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: unavailable, Replayable: true, Hint: pushback(0), HasHint: true},
			Decision{Action: Retry, Delay: time.Second}},
		"a negative or malformed pushback stops a listed status": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: unavailable, Replayable: true, NoRetry: true},
			Decision{Action: Stop, Outcome: OutcomeNotRetryable}},
		"a pushback over maxWait defers, never shortened": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: exhausted, Replayable: true, Hint: pushback(31 * time.Second), HasHint: true},
			Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(31 * time.Second)}},
		"a pushback past the call's deadline defers": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: exhausted, Replayable: true, Hint: pushback(2 * time.Second), HasHint: true, Deadline: now.Add(2 * time.Second)},
			Decision{Action: Defer, Outcome: OutcomeDeferred, NotBefore: now.Add(2 * time.Second)}},
		"a backoff past the call's deadline is deadline-exceeded": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: unavailable, Replayable: true, Deadline: now.Add(1050 * time.Millisecond)},
			Decision{Action: Defer, Outcome: OutcomeDeadlineExceeded, NotBefore: now.Add(time.Second)}},
		"a backoff and the reserve that fit the call's deadline exactly retry": {
			Attempt{Number: 1, GRPC: true, GRPCStatus: unavailable, Replayable: true, Deadline: now.Add(1100 * time.Millisecond)},
			Decision{Action: Retry, Delay: time.Second}},
		"the last attempt is exhausted": {
			Attempt{Number: 4, GRPC: true, GRPCStatus: unavailable, Replayable: true},
			Decision{Action: Stop, Outcome: OutcomeExhausted}},
		"a refused stream of a method that is not replayable is retried": {
			Attempt{Number: 1, Err: Refused, Rewindable: true},
			Decision{Action: Retry, Delay: time.Second}},
		"a refused stream is retried with retryOn.connectFailure off": {
			Attempt{Number: 2, Err: Refused, Rewindable: true},
			Decision{Action: Retry, Delay: 2 * time.Second}},
		"a refused stream whose messages are gone is not replayable": {
			Attempt{Number: 1, Err: Refused},
			Decision{Action: Stop, Outcome: OutcomeNotReplayable}},
		"a refused stream on the last attempt is exhausted": {
			Attempt{Number: 4, Err: Refused, Rewindable: true},
			Decision{Action: Stop, Outcome: OutcomeExhausted}},
		"a canceled call stops": {
			Attempt{Number: 1, GRPC: true, Err: Canceled, Replayable: true},
			Decision{Action: Stop, Outcome: OutcomeCanceled}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := compile(t, func(c *Config) {
				grpcConfig(c)
				if strings.Contains(name, "connectFailure off") {
					c.RetryOn = 0
				}
			})
			if got := p.DecideAt(now, tc.a); got != tc.want {
				t.Fatalf("DecideAt = %+v\nwant       %+v", got, tc.want)
			}
		})
	}
}

// NoRetry is the server's word for HTTP too: a retryable status is given back.
func TestDecideNoRetryStopsHTTP(t *testing.T) {
	p := compile(t, nil)
	a := Attempt{Number: 1, Status: 503, Replayable: true, Rewindable: true, NoRetry: true}
	if got, want := p.DecideAt(now, a), (Decision{Action: Stop, Outcome: OutcomeNotRetryable}); got != want {
		t.Fatalf("DecideAt = %+v, want %+v", got, want)
	}
}

func TestGRPCDecisionPathDoesNotAllocate(t *testing.T) {
	p := compile(t, grpcConfig)
	a := Attempt{Number: 2, GRPC: true, GRPCStatus: 14, Replayable: true, Hint: Hint{Delay: 800 * time.Millisecond}, HasHint: true,
		Deadline: now.Add(20 * time.Second), Random: 0.5}
	n := testing.AllocsPerRun(100, func() {
		ParseGRPCTimeout("250m")
		ParseGRPCTimeout("123456789S")
		ParseGRPCPushback("800")
		ParseGRPCPushback("-1")
		p.GRPCMethodReplayable("/shop.v1.Catalogue/List")
		p.RetriesGRPCStatus(14)
		p.DecideAt(now, a)
	})
	if n != 0 {
		t.Fatalf("the gRPC decision path allocates %v times per call, want 0", n)
	}
}
