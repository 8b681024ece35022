package sidecar

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h),
// which x/sys/unix does not name.
const ip6tSOOriginalDst = 80

// OriginalDst is the destination a NATed (REDIRECTed) TCP connection was
// addressed to before the redirect: getsockopt SO_ORIGINAL_DST (IPv4) or
// IP6T_SO_ORIGINAL_DST (IPv6), answered from the connection's conntrack entry.
// A connection made straight to the listener reports the listener's address.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(tc.LocalAddr().String())
	v6 := local.Addr().Is6() && !local.Addr().Is4In6()
	var addr netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		var buf [28]byte // sockaddr_in6; a sockaddr_in is its first 16 bytes
		if v6 {
			if serr = getsockopt(fd, unix.SOL_IPV6, ip6tSOOriginalDst, buf[:28]); serr == nil {
				ip := netip.AddrFrom16([16]byte(buf[8:24]))
				addr = netip.AddrPortFrom(ip, binary.BigEndian.Uint16(buf[2:4]))
			}
			return
		}
		if serr = getsockopt(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST, buf[:16]); serr == nil {
			ip := netip.AddrFrom4([4]byte(buf[4:8]))
			addr = netip.AddrPortFrom(ip, binary.BigEndian.Uint16(buf[2:4]))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination (SO_ORIGINAL_DST): %w", err)
	}
	if !addr.IsValid() {
		return netip.AddrPort{}, errors.New("original destination (SO_ORIGINAL_DST): none")
	}
	return addr, nil
}

func getsockopt(fd uintptr, level, name int, buf []byte) error {
	n := uint32(len(buf))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), uintptr(name),
		uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
