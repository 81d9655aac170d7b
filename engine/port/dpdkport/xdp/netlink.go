package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// What IFLA_XDP_ATTACHED says of an interface (linux/if_link.h).
const (
	attachedNone  = 0
	attachedDrv   = 1 // native: the driver runs the program
	attachedSKB   = 2 // generic: the kernel runs it on socket buffers
	attachedHW    = 3 // offloaded to the device
	attachedMulti = 4 // more than one mode at once
)

// linkXDP is an interface's XDP state as rtnetlink reports it (IFLA_XDP).
type linkXDP struct {
	attached uint8  // attached* above
	progID   uint32 // the program (0: none, or several: attachedMulti)
}

// mode names the attachment mode.
func (l linkXDP) mode() string {
	switch l.attached {
	case attachedNone:
		return "none"
	case attachedDrv:
		return "native"
	case attachedSKB:
		return "generic"
	case attachedHW:
		return "offload"
	case attachedMulti:
		return "multi"
	}
	return fmt.Sprintf("mode(%d)", l.attached)
}

// flags is the XDP_FLAGS_*_MODE bit that addresses the program in its
// mode (0 when no single mode is attached).
func (l linkXDP) flags() uint32 {
	switch l.attached {
	case attachedDrv:
		return unix.XDP_FLAGS_DRV_MODE
	case attachedSKB:
		return unix.XDP_FLAGS_SKB_MODE
	case attachedHW:
		return unix.XDP_FLAGS_HW_MODE
	}
	return 0
}

// queryLinkXDP asks rtnetlink (RTM_GETLINK) for the XDP program of the
// interface with index ifindex, in the calling thread's network namespace.
func queryLinkXDP(ifindex int) (linkXDP, error) {
	req := newLinkMsg(unix.RTM_GETLINK, 0, ifindex)
	var out linkXDP
	found := false
	err := rtnetlink(req, func(typ uint16, body []byte) error {
		if typ != unix.RTM_NEWLINK || len(body) < unix.SizeofIfInfomsg {
			return nil
		}
		found = true
		return forAttrs(body[unix.SizeofIfInfomsg:], func(t uint16, v []byte) error {
			if t != unix.IFLA_XDP {
				return nil
			}
			return forAttrs(v, func(t uint16, v []byte) error {
				switch {
				case t == unix.IFLA_XDP_ATTACHED && len(v) >= 1:
					out.attached = v[0]
				case t == unix.IFLA_XDP_PROG_ID && len(v) >= 4:
					out.progID = binary.NativeEndian.Uint32(v)
				}
				return nil
			})
		})
	})
	if err != nil {
		return linkXDP{}, fmt.Errorf("xdp: RTM_GETLINK of interface %d: %w", ifindex, err)
	}
	if !found {
		return linkXDP{}, fmt.Errorf("xdp: RTM_GETLINK of interface %d: no link in the reply", ifindex)
	}
	return out, nil
}

// setLinkXDP attaches the program fd to the interface (fd -1: detaches)
// with XDP_FLAGS flags; with XDP_FLAGS_REPLACE, only if the program
// attached is the one expectedFD refers to (an atomic compare and swap in
// the kernel, Linux 5.7 and later).
func setLinkXDP(ifindex, fd, expectedFD int, flags uint32) error {
	req := newLinkMsg(unix.RTM_SETLINK, unix.NLM_F_ACK, ifindex)
	var nested []byte
	nested = appendAttr(nested, unix.IFLA_XDP_FD, binary.NativeEndian.AppendUint32(nil, uint32(int32(fd))))
	if flags != 0 {
		nested = appendAttr(nested, unix.IFLA_XDP_FLAGS, binary.NativeEndian.AppendUint32(nil, flags))
	}
	if flags&unix.XDP_FLAGS_REPLACE != 0 {
		nested = appendAttr(nested, unix.IFLA_XDP_EXPECTED_FD, binary.NativeEndian.AppendUint32(nil, uint32(int32(expectedFD))))
	}
	req = appendAttr(req, unix.IFLA_XDP|unix.NLA_F_NESTED, nested)
	if err := rtnetlink(req, func(uint16, []byte) error { return nil }); err != nil {
		return fmt.Errorf("xdp: RTM_SETLINK of interface %d (fd %d, flags %#x): %w", ifindex, fd, flags, err)
	}
	return nil
}

// newLinkMsg starts an rtnetlink request about one link: the netlink
// header (its length set by rtnetlink) and a struct ifinfomsg.
func newLinkMsg(typ, flags uint16, ifindex int) []byte {
	b := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(b[8:], 1) // sequence number: one request per socket
	h := b[unix.SizeofNlMsghdr:]
	h[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(h[4:], uint32(int32(ifindex)))
	return b
}

// appendAttr appends a netlink attribute (struct rtattr and its value,
// padded to 4 bytes).
func appendAttr(b []byte, typ uint16, v []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(unix.SizeofRtAttr+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%unix.NLMSG_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

// forAttrs calls f with each attribute of b (type without its flag bits).
func forAttrs(b []byte, f func(typ uint16, v []byte) error) error {
	for len(b) >= unix.SizeofRtAttr {
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if n < unix.SizeofRtAttr || n > len(b) {
			return fmt.Errorf("netlink attribute of %d bytes in %d", n, len(b))
		}
		if err := f(typ, b[unix.SizeofRtAttr:n]); err != nil {
			return err
		}
		n = (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		b = b[min(n, len(b)):]
	}
	return nil
}

// rtnetlink sends req (its length filled in) on a new NETLINK_ROUTE
// socket and hands each message of the reply, up to its end (the
// acknowledgement of a request with NLM_F_ACK, NLMSG_DONE, or the last
// message without NLM_F_MULTI) to f. An error message is returned as its
// errno.
func rtnetlink(req []byte, f func(typ uint16, body []byte) error) error {
	binary.NativeEndian.PutUint32(req, uint32(len(req)))
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(s)
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return os.NewSyscallError("bind", err)
	}
	if err := unix.Sendto(s, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return os.NewSyscallError("sendto", err)
	}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(s, buf, 0)
		if err != nil {
			return os.NewSyscallError("recvfrom", err)
		}
		b := buf[:n]
		for len(b) >= unix.SizeofNlMsghdr {
			l := int(binary.NativeEndian.Uint32(b))
			typ := binary.NativeEndian.Uint16(b[4:])
			flags := binary.NativeEndian.Uint16(b[6:])
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return errors.New("truncated netlink message")
			}
			body := b[unix.SizeofNlMsghdr:l]
			switch typ {
			case unix.NLMSG_ERROR:
				if len(body) < 4 {
					return errors.New("truncated netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(body)); e != 0 {
					return unix.Errno(-e)
				}
				return nil // the acknowledgement
			case unix.NLMSG_DONE:
				return nil
			}
			if err := f(typ, body); err != nil {
				return err
			}
			if flags&unix.NLM_F_MULTI == 0 && binary.NativeEndian.Uint16(req[6:])&unix.NLM_F_ACK == 0 {
				return nil
			}
			l = (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
			b = b[min(l, len(b)):]
		}
	}
}
