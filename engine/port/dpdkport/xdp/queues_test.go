package xdp

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// xdpMD is struct xdp_md, the context of an XDP program's test run: the
// frame arrives on rx queue RxQueueIndex of interface IngressIfindex.
type xdpMD struct {
	Data, DataEnd, DataMeta      uint32
	IngressIfindex, RxQueueIndex uint32
	EgressIfindex                uint32
}

// An engine of several cores has an AF_XDP socket on each rx queue of its
// interface (DPDK puts socket q at xsks_map[q]): the program steers a
// frame for the engine to the socket of the queue it arrived on, and to
// no other. A veth of two queues, a socket bound to its queue 1: a frame
// on queue 1 is redirected to it; the same frame on queue 0, whose socket
// is missing, is counted NoSocket and passed.
func TestSteerByRxQueue(t *testing.T) {
	needRoot(t)
	a, b := fmt.Sprintf("oxq%da", os.Getpid()%10000), fmt.Sprintf("oxq%db", os.Getpid()%10000)
	exec.Command("ip", "link", "del", a).Run()
	q := []string{"numrxqueues", "2", "numtxqueues", "2"}
	args := append(append(append([]string{"link", "add", a}, q...), "type", "veth", "peer", "name", b), q...)
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
	for _, i := range []string{a, b} {
		if out, err := exec.Command("ip", "link", "set", i, "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s up: %v: %s", i, err, out)
		}
	}
	ifi, err := net.InterfaceByName(a)
	if err != nil {
		t.Fatal(err)
	}
	coll, f := loadSteer(t)
	if err := f.SetAddr(engineIP); err != nil {
		t.Fatal(err)
	}
	fd := boundSocket(t, ifi.Index, 1)
	if err := coll.Maps["xsks_map"].Put(uint32(1), uint32(fd)); err != nil {
		t.Fatal(err)
	}
	frame := ipv4(unix.IPPROTO_UDP, peerIP, engineIP)
	for _, c := range []struct {
		queue uint32
		ret   uint32
		want  Stats
	}{
		{1, 4, Stats{ToEngine: 1}}, // XDP_REDIRECT to queue 1's socket
		{0, 2, Stats{NoSocket: 1}}, // XDP_PASS: queue 0 has none
		{1, 4, Stats{ToEngine: 1}},
	} {
		before, err := f.Stats()
		if err != nil {
			t.Fatal(err)
		}
		ret, err := coll.Programs[progName].Run(&ebpf.RunOptions{Data: frame,
			Context: xdpMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(ifi.Index), RxQueueIndex: c.queue}})
		if err != nil {
			t.Fatal(err)
		}
		after, err := f.Stats()
		if err != nil {
			t.Fatal(err)
		}
		d := Stats{after.ToEngine - before.ToEngine, after.NoSocket - before.NoSocket, after.ToKernel - before.ToKernel}
		if ret != c.ret || d != c.want {
			t.Errorf("frame on rx queue %d: returned %d, counters moved by %+v; want %d, %+v", c.queue, ret, d, c.ret, c.want)
		}
	}
}

// boundSocket is an AF_XDP socket in copy mode bound to rx queue queue of
// interface ifindex, with a small umem and rings (never mapped: the test
// only needs it in the map).
func boundSocket(t *testing.T, ifindex, queue int) int {
	t.Helper()
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets in this kernel: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	const frames, size = 16, 4096
	mem, err := unix.Mmap(-1, 0, frames*size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), Len: frames * size, Size: size}
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
		uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
		t.Fatalf("XDP_UMEM_REG: %v", e)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, frames); err != nil {
			t.Fatalf("ring %d: %v", opt, err)
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}); err != nil {
		t.Fatalf("bind to queue %d: %v", queue, err)
	}
	return fd
}
