package retrypolicy

// Which test fails when a rule of docs/retry-semantics.md is broken. Each was checked by breaking
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
//	                            TestTransportOutcomes ("a hint over maxWait defers ..."), FuzzDecide
//	R4 what is retryable        TestDecideRules (replayable/connect/ambiguous rows),
//	                            TestTransportOutcomes (POST/PUT rows),
//	                            TestTransportReplaysTheSameIdempotencyKeyAndBody,
//	                            TestTransportSendsANonRereadableBodyOnce, FuzzDecide
//	R5 attempt budget           TestDecideWorkedExamples ("retry index 3 of 3 stops"),
//	                            TestTransportOutcomes ("a 503 four times ...", "... already carries
//	                            X-Retry-Attempt ..."), TestTransport503Then429Then200
//	R6 outage budget            TestBudgetSteps, TestBudgetConcurrentUse,
//	                            TestTransportOutcomes ("an exhausted budget ...")
//	R7 admission                TestGateQueue, TestAdmitRateLimit, TestTransportShed,
//	                            TestTransportRateLimitShedsWithTheTimeCapacityReturns,
//	                            TestRegistryKeepsStateAcrossReload
//	R8 cancellation             TestTransportCancellation (before / during / right after the wait,
//	                            default sleeper, during an attempt)
//	R9 resources                TestTransport503Then429Then200 (the harness's sleeper fails the
//	                            test if an earlier response was not drained and closed)
//	R10 observability           TestTransportLogsNoSecrets, TestTransportErrorTextNeverReachesObservers
//
// Pacing (docs/pacing.md)     TestParseRateLimit, TestParseRateLimitRepeatedFieldLines, TestRateLimitHintHold,
//	                            FuzzRateLimitAgreesWithHTTPSFV, FuzzParseRateLimit,
//	                            TestPacerHoldStartsAndEndsOnTheClock, TestPacerWaitsOrAnswersByDeadline,
//	                            TestPacerReleasesInArrivalOrder, TestPacerExtensionRefusesWaitersItMakesLate,
//	                            TestRegistryKeepsTheHoldAcrossReload, TestTransportRateLimitHeadersHoldTheUpstream,
//	                            TestTransportHeldRequestWaitsWhenItsDeadlineAllows, TestTransportNotBeforeIsRoundedUp,
//	                            TestTransportHoldOnDeferral, TestTransportPacingAddsNoAllocations
//
// Also: TestCompileRejects (every error names the field and the allowed values),
// TestSetMatch, TestNewSetRejectsConflicts, TestDecideDoesNotAllocate,
// TestParseRetryAfterDoesNotAllocate; benchmarks in bench_test.go.

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
