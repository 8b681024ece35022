//go:build !linux

package sidecar

import (
	"errors"
	"net"
	"net/netip"
)

// OriginalDst needs Linux's conntrack (SO_ORIGINAL_DST).
func OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: transparent interception needs Linux")
}
