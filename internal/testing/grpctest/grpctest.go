// Package grpctest is what the gRPC tests of the sidecar share (the
// black-box tests of cmd/retry-sidecar and the in-package tests of
// internal/sidecar): real grpc-go servers and clients on 127.0.0.1 that send
// message bytes as they are, so that no generated code is needed. Only test
// files import it.
//
//	addr := grpctest.Serve(t, func(_ any, st grpc.ServerStream) error {
//		var m []byte
//		if err := st.RecvMsg(&m); err != nil {
//			return err
//		}
//		return st.SendMsg(&m) // an echo of one message
//	})
//	cc := grpctest.Client(t, addr, grpctest.DialTo(proxyAddr))
package grpctest

import (
	"context"
	"encoding/binary"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
)

// RawCodec sends a *[]byte as the message bytes, unchanged, and reads a
// message into one.
type RawCodec struct{}

// Marshal is the bytes *v points to.
func (RawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

// Unmarshal copies the message into *v.
func (RawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// Name is the codec's name in content-type (application/grpc+raw).
func (RawCodec) Name() string { return "raw" }

// Serve serves every method with handler on a new listener of 127.0.0.1
// until the test ends, and returns its address.
func Serve(t testing.TB, handler grpc.StreamHandler, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeOn(t, ln, handler, opts...)
	return ln.Addr().String()
}

// ServeOn serves every method with handler on ln until the test ends.
func ServeOn(t testing.TB, ln net.Listener, handler grpc.StreamHandler, opts ...grpc.ServerOption) {
	srv := grpc.NewServer(append(opts, grpc.ForceServerCodecV2(RawCodec{}), grpc.UnknownServiceHandler(handler))...)
	go srv.Serve(ln) //nolint:errcheck // ends with Stop at the test's end
	t.Cleanup(srv.Stop)
}

// Dialer opens a client's connections.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// DialTo is a Dialer whose connections all go to addr (a proxy), whatever
// the target.
func DialTo(addr string) Dialer {
	return func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// Client is a grpc-go client of target (its :authority) in cleartext, its
// connections opened by dial and its messages sent with RawCodec; it is
// closed when the test ends.
func Client(t testing.TB, target string, dial Dialer) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(RawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// Frame is msgs as gRPC messages on the wire: each uncompressed, its length
// before it.
func Frame(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(m))) //nolint:gosec // test messages are far below 4 GiB
		b = append(b, m...)
	}
	return b
}
