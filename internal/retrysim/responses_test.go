package retrysim

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseResponses(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []Response
	}{
		"the manual's example: a hint, a bare status, a success": {
			in:   "429 ra=2, 503, 200",
			want: []Response{{Status: 429, RetryAfter: "2"}, {Status: 503}, {Status: 200}},
		},
		"HTTP-dates are quoted because they hold commas": {
			in: `503 ra="Sun, 06 Nov 1994 08:49:37 GMT" date="Sun, 06 Nov 1994 08:49:07 GMT"`,
			want: []Response{{Status: 503, RetryAfter: "Sun, 06 Nov 1994 08:49:37 GMT",
				Date: "Sun, 06 Nov 1994 08:49:07 GMT"}},
		},
		"transport failures and rate-limit headers": {
			in: "timeout,refused , 200 ratelimit-remaining=0 ratelimit-reset=30",
			want: []Response{{Failure: FailureTimeout}, {Failure: FailureRefused},
				{Status: 200, RateLimitRemaining: "0", RateLimitReset: "30"}},
		},
		"the gRPC example: status names, one with a pushback": {
			in:   "UNAVAILABLE, UNAVAILABLE pushback=800, OK",
			want: []Response{{GRPCStatus: "UNAVAILABLE"}, {GRPCStatus: "UNAVAILABLE", Pushback: "800"}, {GRPCStatus: "OK"}},
		},
		"negative and garbage pushbacks are kept verbatim for the interceptor to refuse": {
			in: `RESOURCE_EXHAUSTED pushback=-1, DEADLINE_EXCEEDED pushback=soon, UNAVAILABLE pushback="1 5"`,
			want: []Response{{GRPCStatus: "RESOURCE_EXHAUSTED", Pushback: "-1"},
				{GRPCStatus: "DEADLINE_EXCEEDED", Pushback: "soon"}, {GRPCStatus: "UNAVAILABLE", Pushback: "1 5"}},
		},
		"a malformed Retry-After value is kept verbatim for the transport to reject": {
			in:   "503 ra=soon",
			want: []Response{{Status: 503, RetryAfter: "soon"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseResponses(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseResponsesErrorsNameTokenAndPosition(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string
	}{
		"a status out of range":              {"200, 700", `--responses: token 2 "700": want a status 100..599, a gRPC status name (UNAVAILABLE, OK, …), timeout or refused first`},
		"an unknown attribute":               {"429 rb=2", `--responses: token 1 "429 rb=2": unknown attribute "rb"; want ra, date, ratelimit-remaining or ratelimit-reset`},
		"an empty token between commas":      {"200,,200", `--responses: token 2 "": empty token; want a status such as 503 or UNAVAILABLE, timeout or refused`},
		"an attribute without a value":       {"503 ra=", `--responses: token 1 "503 ra=": ra needs a value`},
		"an attribute without =":             {"503 ra", `--responses: token 1 "503 ra": want name=value after the status (got "ra")`},
		"an attribute twice":                 {"503 ra=1 ra=2", `--responses: token 1 "503 ra=1 ra=2": attribute ra given twice`},
		"an unterminated quote":              {`503 ra="Sun, 06`, `--responses: token 1 "503 ra=\"Sun, 06": ra: unterminated quoted value`},
		"attributes on a failure":            {"timeout ra=1", `--responses: token 1 "timeout ra=1": timeout takes no attributes`},
		"an HTTP status among gRPC names":    {"UNAVAILABLE, 503", `--responses: token 2 "503": an HTTP status after gRPC answers; one call is HTTP or gRPC, not both`},
		"a gRPC name among HTTP statuses":    {"503 ra=1, OK", `--responses: token 2 "OK": a gRPC status after HTTP answers; one call is HTTP or gRPC, not both`},
		"refused among gRPC names":           {"UNAVAILABLE, refused", `--responses: token 2 "refused": refused is not simulated for gRPC calls; give a status name such as UNAVAILABLE or DEADLINE_EXCEEDED`},
		"a gRPC name in lower case":          {"ok", `--responses: token 1 "ok": gRPC status names are upper case: OK`},
		"an HTTP attribute on a gRPC status": {"UNAVAILABLE ra=2", `--responses: token 1 "UNAVAILABLE ra=2": unknown attribute "ra" of a gRPC status; want pushback (grpc-retry-pushback-ms)`},
		"a pushback without a value":         {"UNAVAILABLE pushback=", `--responses: token 1 "UNAVAILABLE pushback=": pushback needs a value`},
		"a number is not a gRPC status":      {"UNAVAILABLE, 14", `--responses: token 2 "14": want a status 100..599, a gRPC status name (UNAVAILABLE, OK, …), timeout or refused first`},
		"rate-limit values are digits":       {"200 ratelimit-reset=soon", `--responses: token 1 "200 ratelimit-reset=soon": ratelimit-reset must be digits (got "soon")`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseResponses(tc.in)
			var te *TokenError
			if !errors.As(err, &te) {
				t.Fatalf("want a *TokenError, got %v", err)
			}
			if err.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", err, tc.want)
			}
		})
	}
}

// FuzzParseResponses: any accepted list prints back (Response.String) to a list
// that parses to the same responses.
func FuzzParseResponses(f *testing.F) {
	for _, s := range []string{"429 ra=2, 503, 200", `503 ra="Sun, 06 Nov 1994 08:49:37 GMT"`, "timeout, refused",
		"200 ratelimit-remaining=0 ratelimit-reset=30", `503 ra="a\"b"`, "503 date=x,,",
		"UNAVAILABLE, UNAVAILABLE pushback=800, OK", `ABORTED pushback="-1 x"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rs, err := ParseResponses(s)
		if err != nil {
			return
		}
		var parts []string
		for _, r := range rs {
			parts = append(parts, r.String())
		}
		again, err := ParseResponses(join(parts))
		if err != nil {
			t.Fatalf("%q parsed, but its printed form %q does not: %v", s, join(parts), err)
		}
		if diff := cmp.Diff(rs, again); diff != "" {
			t.Fatalf("round trip of %q changed it (-first +again):\n%s", s, diff)
		}
	})
}

func join(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}
