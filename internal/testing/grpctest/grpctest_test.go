package grpctest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
)

func TestFrame(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		msgs [][]byte
		want []byte
	}{
		"no message is no bytes":          {msgs: nil, want: nil},
		"an empty message is its prefix":  {msgs: [][]byte{{}}, want: []byte{0, 0, 0, 0, 0}},
		"each message follows its length": {msgs: [][]byte{[]byte("ok"), {7}}, want: []byte{0, 0, 0, 0, 2, 'o', 'k', 0, 0, 0, 0, 1, 7}},
	} {
		if got := Frame(c.msgs...); !bytes.Equal(got, c.want) {
			t.Errorf("%s: Frame = %v; want %v", name, got, c.want)
		}
	}
}

// A grpc-go client straight to Refusing: grpc-go sends a refused stream
// again by itself (its transparent retry), so the server sees the case
// twice and answers the second, with the request's bytes as sent.
func TestRefusingRefusesTheFirstStreamOfEachCase(t *testing.T) {
	t.Parallel()
	u := NewRefusing(t)
	cc := Client(t, u.Addr, DialTo(u.Addr))
	for _, id := range []string{"a", "b"} {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), CaseKey, id), 10*time.Second)
		m, out := []byte("req-"+id), []byte(nil)
		err := cc.Invoke(ctx, "/test.Refusing/Call", &m, &out)
		cancel()
		if err != nil || string(out) != "ok" {
			t.Fatalf("case %s: %q, %v; want ok", id, out, err)
		}
		if n := u.Streams(id); n != 2 {
			t.Errorf("case %s: %d streams; want 2", id, n)
		}
		if got, want := u.Data(id), Frame([]byte("req-"+id)); !bytes.Equal(got, want) {
			t.Errorf("case %s: the answered stream carried %v; want %v", id, got, want)
		}
	}
}
