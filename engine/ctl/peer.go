package ctl

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// peer is what the kernel says about the process at the other end of a
// control connection, as of its connect(2). Nothing of it comes from the
// application.
type peer struct {
	pid    int32    // in the engine's PID namespace; 0 when the peer is not visible there (logs only)
	uid    uint32   // SO_PEERCRED, in the engine's user namespace
	gid    uint32   // the peer's effective gid
	groups []uint32 // its supplementary groups (SO_PEERGROUPS)
	// ino is the pidfs inode of the peer process (SO_PEERPIDFD, fstat):
	// the kernel allocates one per process from a 64-bit counter that
	// never goes back within a boot, whatever PID namespace the process
	// is in (checkPidfs).
	ino uint64
}

// inGroup reports whether gid is the peer's effective gid or one of its
// supplementary groups.
func (p *peer) inGroup(gid uint32) bool {
	if p.gid == gid {
		return true
	}
	for _, g := range p.groups {
		if g == gid {
			return true
		}
	}
	return false
}

// pidfsMagic is PID_FS_MAGIC, the f_type of a pidfd's file system.
const pidfsMagic = 0x50494446

// readPeer reads the peer's credentials, groups and process inode.
func readPeer(uc *net.UnixConn) (peer, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return peer{}, err
	}
	var (
		p    peer
		perr error
	)
	if err := rc.Control(func(fd uintptr) { p, perr = peerOf(int(fd)) }); err != nil {
		return peer{}, err
	}
	return p, perr
}

func peerOf(fd int) (peer, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return peer{}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	p := peer{pid: cred.Pid, uid: cred.Uid, gid: cred.Gid}
	if p.groups, err = peerGroups(fd); err != nil {
		return peer{}, err
	}
	if p.ino, err = peerIno(fd); err != nil {
		return peer{}, err
	}
	return p, nil
}

// peerIno returns the pidfs inode of the socket's peer process.
func peerIno(fd int) (uint64, error) {
	pfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		return 0, fmt.Errorf("SO_PEERPIDFD: %w", err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return 0, fmt.Errorf("fstat of the peer's pidfd: %w", err)
	}
	if st.Ino == 0 {
		return 0, errors.New("the peer's pidfd has inode 0")
	}
	return st.Ino, nil
}

// maxPeerGroups bounds the supplementary groups read (NGROUPS_MAX).
const maxPeerGroups = 65536

// peerGroups reads SO_PEERGROUPS: the peer's supplementary groups as of
// connect(2).
func peerGroups(fd int) ([]uint32, error) {
	n := 32
	for {
		buf := make([]uint32, n)
		l := uint32(4 * n)
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
		switch {
		case e == 0:
			return buf[:l/4], nil
		case e == unix.ERANGE && int(l/4) > n && int(l/4) <= maxPeerGroups:
			n = int(l / 4) // the kernel says how many there are
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
		}
	}
}

// checkPidfs verifies that this kernel gives what identities rest on:
// SO_PEERPIDFD, and pidfds on pidfs whose inode names the process (the
// same inode for two pidfds of one process). Kernels before 6.9 put
// pidfds on one shared anonymous inode, which would make every process
// one identity; rmad refuses to start there.
func checkPidfs() error {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return errors.New("ctl: identities need a 64-bit kernel (pidfs inode numbers are unique per boot only there)")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ctl: socketpair: %w", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	ino, err := peerIno(fds[0])
	if err != nil {
		return fmt.Errorf("ctl: this kernel cannot name a control socket's peer process (Linux 6.9 or later is needed): %w", err)
	}
	self, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return fmt.Errorf("ctl: pidfd_open: %w", err)
	}
	defer unix.Close(self)
	var (
		sf unix.Statfs_t
		st unix.Stat_t
	)
	if err := unix.Fstatfs(self, &sf); err != nil {
		return fmt.Errorf("ctl: fstatfs of a pidfd: %w", err)
	}
	if sf.Type != pidfsMagic {
		return fmt.Errorf("ctl: pidfds are not on pidfs here (f_type %#x): processes cannot be told apart by their pidfd (Linux 6.9 or later is needed)", sf.Type)
	}
	if err := unix.Fstat(self, &st); err != nil {
		return fmt.Errorf("ctl: fstat of a pidfd: %w", err)
	}
	if st.Ino != ino {
		return fmt.Errorf("ctl: two pidfds of this process have inodes %d and %d: pidfs does not name processes by inode here", ino, st.Ino)
	}
	return nil
}

// bootID reads the kernel's boot id: pidfs inodes are unique within one
// boot only, so the identity table remembers whose boot its inodes are.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("ctl: boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if len(id) != 36 || strings.ContainsAny(id, " \t\n") {
		return "", fmt.Errorf("ctl: boot id %q is not a UUID", id)
	}
	return id, nil
}
