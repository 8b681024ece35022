package retrypolicy

// Which test fails when a rule of docs/retry-semantics.md is broken
// (limits.X is a test of pkg/retrypolicy/limits). Each was checked by breaking
// the rule in the code and watching the test fail (see the closing note of
// issue 3 for the mutations used).
//
//	R1 Retry-After parsing      TestParseRetryAfter, TestParseHTTPDateFiftyYearRule,
//	                            TestParseHTTPDateAgreesWithTheStandardLibrary, FuzzParseRetryAfter
//	R2 delay and jitter         TestBackoffDelay, TestBackoffCeilingDoesNotOverflow,
//	                            TestDecideWorkedExamples (equal-jitter schedule),
//	                            TestDecideRules ("the spread is added after the hint ...")
//	R3 never shorten a wait     TestDecideWorkedExamples ("server asks 30s ...", "a 60s hint ..."),
//	                            TestDecideRules (deadline and reserve rows),
//	                            retryhttp.TestTransportOutcomes ("a hint over maxWait defers ..."), FuzzDecide
//	R4 what is retryable        TestDecideRules (replayable/connect/ambiguous/reset rows),
//	                            retryhttp.TestTransportOutcomes (POST/PUT rows),
//	                            retryhttp.TestTransportReplaysTheSameIdempotencyKeyAndBody,
//	                            retryhttp.TestTransportSendsANonRereadableBodyOnce, FuzzDecide
//	R5 attempt budget           TestDecideWorkedExamples ("retry index 3 of 3 stops"),
//	                            retryhttp.TestTransportOutcomes ("a 503 four times ...", "... already carries
//	                            X-Retry-Attempt ..."), retryhttp.TestTransport503Then429Then200
//	R6 outage budget            limits.TestBudgetSteps, limits.TestBudgetConcurrentUse,
//	                            retryhttp.TestTransportOutcomes ("an exhausted budget ...")
//	R7 admission                limits.TestGateQueue, limits.TestAdmitRateLimit, retryhttp.TestTransportShed,
//	                            retryhttp.TestTransportRateLimitShedsWithTheTimeCapacityReturns,
//	                            TestRegistryKeepsStateAcrossReload
//	R8 cancellation             retryhttp.TestTransportCancellation (before / during / right after the wait,
//	                            default sleeper, during an attempt)
//	R9 resources                retryhttp.TestTransport503Then429Then200 (the harness's sleeper fails the
//	                            test if an earlier response was not drained and closed)
//	R10 observability           retryhttp.TestTransportLogsNoSecrets, retryhttp.TestTransportErrorTextNeverReachesObservers
//
// Pacing (docs/pacing.md)     TestParseRateLimit, TestParseRateLimitRepeatedFieldLines, TestRateLimitHintHold,
//	                            FuzzRateLimitAgreesWithHTTPSFV, FuzzParseRateLimit,
//	                            limits.TestPacerHoldStartsAndEndsOnTheClock, limits.TestPacerWaitsOrAnswersByDeadline,
//	                            limits.TestPacerReleasesInArrivalOrder, limits.TestPacerExtensionRefusesWaitersItMakesLate,
//	                            TestRegistryKeepsTheHoldAcrossReload, retryhttp.TestTransportRateLimitHeadersHoldTheUpstream,
//	                            retryhttp.TestTransportHeldRequestWaitsWhenItsDeadlineAllows, retryhttp.TestTransportNotBeforeIsRoundedUp,
//	                            retryhttp.TestTransportHoldOnDeferral, retryhttp.TestTransportPacingAddsNoAllocations
//
// gRPC (docs/grpc.md)         TestDecideGRPC, TestParseGRPCTimeout, TestParseGRPCPushback, TestGRPCMethodReplayable,
//	                            TestRetriesGRPCStatus, TestCompileRejectsGRPCStatus, TestGRPCDecisionPathDoesNotAllocate,
//	                            FuzzDecideGRPC, FuzzParseGRPCTimeout, FuzzParseGRPCPushback,
//	                            retrygrpc.TestUnaryClientInterceptor, retrygrpc.TestEachAttemptCarriesTheTimeLeft
//
// Names with retryhttp. are tests of package retryhttp (the executor), with
// retrygrpc. of package retrygrpc (the gRPC interceptor).
//
// Also: TestCompileRejects (every error names the field and the allowed values),
// TestSetMatch, TestNewSetRejectsConflicts, TestDecideDoesNotAllocate,
// TestParseRetryAfterDoesNotAllocate; benchmarks in bench_test.go (the Transport's in
// retryhttp/bench_test.go).

import "testing"

func TestDecideDoesNotAllocate(t *testing.T) {
	p := compile(t, nil)
	a := Attempt{Number: 2, Status: 429, Replayable: true, Rewindable: true, Hint: hint(3e9), HasHint: true, Deadline: now.Add(20e9), Random: 0.5}
	if n := testing.AllocsPerRun(100, func() { p.DecideAt(now, a) }); n != 0 {
		t.Fatalf("DecideAt allocates %v times per call, want 0", n)
	}
}

func TestParseRetryAfterDoesNotAllocate(t *testing.T) {
	for _, v := range []string{"120", "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "-1", "soon"} {
		if n := testing.AllocsPerRun(100, func() { ParseRetryAfter(v, received, "Sun, 06 Nov 1994 08:48:37 GMT") }); n != 0 {
			t.Fatalf("ParseRetryAfter(%q) allocates %v times, want 0", v, n)
		}
	}
}
