package xdp

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket is one AF_XDP socket of this process.
type Socket struct {
	FD int
	// ZeroCopy: frames move between the driver and the socket's memory
	// without a copy (XDP_OPTIONS_ZEROCOPY); else copy mode, the kernel
	// copies each frame (drivers without zero-copy support, such as veth).
	ZeroCopy bool
	Stats    unix.XDPStatistics // the kernel's counters (XDP_STATISTICS)
}

// Sockets lists this process's AF_XDP sockets (those DPDK opened for its
// net_af_xdp ports), found among its open files.
func Sockets() ([]Socket, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	var out []Socket
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || !strings.HasPrefix(l, "socket:") {
			continue
		}
		if s, err := ReadSocket(fd); err == nil {
			out = append(out, s)
		} // else not an AF_XDP socket (or closed meanwhile)
	}
	return out, nil
}

// ReadSocket reads the mode and counters of the AF_XDP socket fd.
func ReadSocket(fd int) (Socket, error) {
	opts, err := unix.GetsockoptInt(fd, unix.SOL_XDP, unix.XDP_OPTIONS)
	if err != nil {
		return Socket{}, fmt.Errorf("xdp: socket %d: %w", fd, os.NewSyscallError("getsockopt XDP_OPTIONS", err))
	}
	s := Socket{FD: fd, ZeroCopy: opts&unix.XDP_OPTIONS_ZEROCOPY != 0}
	n := uint32(unsafe.Sizeof(s.Stats))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&s.Stats)), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return Socket{}, fmt.Errorf("xdp: socket %d: %w", fd, os.NewSyscallError("getsockopt XDP_STATISTICS", e))
	}
	return s, nil
}
