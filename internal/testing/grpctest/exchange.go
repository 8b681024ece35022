package grpctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Exchange sends msgs on a new stream of desc's shape to method, closes its
// side, reads every answer, and says what the app got: the sizes of the
// messages, the status and the trailers' x-retry-outcome and
// x-retry-attempts, as "[10 20] OK success 2".
func Exchange(ctx context.Context, cc *grpc.ClientConn, desc *grpc.StreamDesc, method string, msgs [][]byte) string {
	s, err := cc.NewStream(ctx, desc, method)
	if err != nil {
		return err.Error()
	}
	for _, m := range msgs {
		if err := s.SendMsg(&m); err != nil {
			break
		}
	}
	_ = s.CloseSend()
	var sizes []int
	for {
		var in []byte
		if err = s.RecvMsg(&in); err != nil {
			break
		}
		sizes = append(sizes, len(in))
		if !desc.ServerStreams { // one answer; RecvMsg has read the status with it
			err = io.EOF
			break
		}
	}
	code := status.Code(err)
	if errors.Is(err, io.EOF) {
		code = codes.OK
	}
	tr := s.Trailer()
	return fmt.Sprint(sizes, " ", code, " ", first(tr, "x-retry-outcome"), " ", first(tr, "x-retry-attempts"))
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// FailAt sends what an upstream sends before it fails a call where
// placement says: nothing ("trailers-only"), headers ("after-headers"), or
// a 10-byte ("after-message") or 100 KiB ("after-big-message") message.
func FailAt(st grpc.ServerStream, placement string) error {
	switch placement {
	case "after-headers":
		return st.SendHeader(metadata.Pairs("x-header-md", "h"))
	case "after-message", "after-big-message":
		m := bytes.Repeat([]byte{'m'}, 10)
		if placement == "after-big-message" {
			m = bytes.Repeat([]byte{'M'}, 100<<10)
		}
		return st.SendMsg(&m)
	}
	return nil
}
