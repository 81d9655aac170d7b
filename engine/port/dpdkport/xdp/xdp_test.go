package xdp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// needRoot skips outside CI when the test cannot load BPF programs or
// change interfaces, and fails in CI.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("XDP tests need root in CI")
	}
	t.Skip("loading XDP programs and changing interfaces needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN)")
}

// loadSteer loads the embedded program (not attached) and opens it the
// way rmad does, by id.
func loadSteer(t *testing.T) (*ebpf.Collection, *Filter) {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(object))
	if err != nil {
		t.Fatal(err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coll.Close() })
	info, err := coll.Programs[progName].Info()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := info.ID()
	if !ok {
		t.Fatal("the kernel gives no program id")
	}
	f, err := Open(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return coll, f
}

var (
	engineIP = netip.MustParseAddr("10.1.0.2")
	kernelIP = netip.MustParseAddr("10.1.0.9")
	peerIP   = netip.MustParseAddr("10.1.0.3")
	macA     = []byte{0x02, 0, 0, 0, 0, 0xa}
	bcast    = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

func eth(dst []byte, etherType uint16) []byte {
	b := append(append([]byte(nil), dst...), macA...)
	return binary.BigEndian.AppendUint16(b, etherType)
}

// arp is an IPv4-over-Ethernet ARP frame: op 1 request, 2 reply.
func arp(op uint16, spa, tpa netip.Addr) []byte {
	b := eth(bcast, unix.ETH_P_ARP)
	b = binary.BigEndian.AppendUint16(b, 1) // Ethernet
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_IP)
	b = append(b, 6, 4)
	b = binary.BigEndian.AppendUint16(b, op)
	s, d := spa.As4(), tpa.As4()
	b = append(append(b, macA...), s[:]...)
	b = append(append(b, make([]byte, 6)...), d[:]...)
	return b
}

// ipv4 is an IPv4 frame of protocol proto from src to dst with 8 bytes of
// payload.
func ipv4(proto byte, src, dst netip.Addr) []byte {
	b := eth(macA, unix.ETH_P_IP)
	s, d := src.As4(), dst.As4()
	b = append(b, 0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, proto, 0, 0)
	b = append(append(b, s[:]...), d[:]...)
	return append(b, make([]byte, 8)...)
}

func vlan(f []byte) []byte {
	b := append([]byte(nil), f[:12]...)
	b = append(b, 0x81, 0x00, 0x00, 0x05)
	return append(b, f[12:]...)
}

// steered runs frame through the program and reports whether it was
// steered to the engine: unattached, it has no socket, so a frame for the
// engine is passed and counted NoSocket, any other frame counted ToKernel.
func steered(t *testing.T, coll *ebpf.Collection, f *Filter, frame []byte) bool {
	t.Helper()
	before, err := f.Stats()
	if err != nil {
		t.Fatal(err)
	}
	ret, err := coll.Programs[progName].Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		t.Fatal(err)
	}
	after, err := f.Stats()
	if err != nil {
		t.Fatal(err)
	}
	d := Stats{after.ToEngine - before.ToEngine, after.NoSocket - before.NoSocket, after.ToKernel - before.ToKernel}
	if ret != 2 { // XDP_PASS
		t.Fatalf("program returned %d without a socket, want XDP_PASS", ret)
	}
	switch d {
	case Stats{NoSocket: 1}:
		return true
	case Stats{ToKernel: 1}:
		return false
	}
	t.Fatalf("counters moved by %+v for one frame", d)
	return false
}

func TestSteer(t *testing.T) {
	needRoot(t)
	coll, f := loadSteer(t)
	badHW := arp(1, peerIP, engineIP)
	badHW[15] = 6 // hardware type 6 (IEEE 802)
	badLen := arp(1, peerIP, engineIP)
	badLen[18] = 8 // hardware address length
	ver6 := ipv4(unix.IPPROTO_UDP, peerIP, engineIP)
	ver6[14] = 0x65
	cases := []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"ARP request for the engine", arp(1, peerIP, engineIP), true},
		{"ARP reply to the engine", arp(2, peerIP, engineIP), true},
		{"gratuitous ARP of the engine's address", arp(1, engineIP, engineIP), true},
		{"UDP to the engine", ipv4(unix.IPPROTO_UDP, peerIP, engineIP), true},
		{"ICMP to the engine", ipv4(unix.IPPROTO_ICMP, peerIP, engineIP), true},
		{"ARP request for the kernel", arp(1, peerIP, kernelIP), false},
		{"ARP request from the engine's address", arp(1, engineIP, kernelIP), false},
		{"ARP of another hardware type", badHW, false},
		{"ARP with another address length", badLen, false},
		{"ARP cut before its target address", arp(1, peerIP, engineIP)[:41], false},
		{"TCP to the engine", ipv4(unix.IPPROTO_TCP, peerIP, engineIP), false},
		{"UDP to the kernel", ipv4(unix.IPPROTO_UDP, peerIP, kernelIP), false},
		{"ICMP to the kernel", ipv4(unix.IPPROTO_ICMP, peerIP, kernelIP), false},
		{"UDP from the engine's address", ipv4(unix.IPPROTO_UDP, engineIP, peerIP), false},
		{"IPv4 header of version 6", ver6, false},
		{"IPv4 cut inside its header", ipv4(unix.IPPROTO_UDP, peerIP, engineIP)[:33], false},
		{"VLAN-tagged UDP to the engine", vlan(ipv4(unix.IPPROTO_UDP, peerIP, engineIP)), false},
		{"IPv6", eth(macA, unix.ETH_P_IPV6), false},
		{"Ethernet header alone", eth(macA, unix.ETH_P_IP), false},
	}
	run := func(want func(bool) bool) {
		t.Helper()
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if got := steered(t, coll, f, c.frame); got != want(c.want) {
					t.Errorf("steered = %v, want %v", got, want(c.want))
				}
			})
		}
	}
	// No address yet: everything to the kernel.
	run(func(bool) bool { return false })
	if err := f.SetAddr(engineIP); err != nil {
		t.Fatal(err)
	}
	if got, pid, err := f.Addr(); err != nil || got != engineIP || pid != os.Getpid() {
		t.Fatalf("Addr() = %v, %d, %v; want %v, %d", got, pid, err, engineIP, os.Getpid())
	}
	run(func(w bool) bool { return w })
	// Every byte of the engine's address, flipped: the frame is the
	// kernel's.
	for _, base := range [][]byte{ipv4(unix.IPPROTO_UDP, peerIP, engineIP), arp(1, peerIP, engineIP)} {
		off := 30 // IPv4 destination
		if binary.BigEndian.Uint16(base[12:]) == unix.ETH_P_ARP {
			off = 38 // ARP target protocol address
		}
		for i := off; i < off+4; i++ {
			fr := append([]byte(nil), base...)
			fr[i] ^= 0x01
			if steered(t, coll, f, fr) {
				t.Errorf("frame with byte %d of the engine's address flipped was steered", i)
			}
		}
	}
	if err := f.Clear(); err != nil {
		t.Fatal(err)
	}
	run(func(bool) bool { return false })
	if err := f.SetAddr(netip.MustParseAddr("0.0.0.0")); err == nil {
		t.Error("SetAddr(0.0.0.0) succeeded")
	}
	if err := f.SetAddr(netip.MustParseAddr("fe80::1")); err == nil {
		t.Error("SetAddr(fe80::1) succeeded")
	}
}

// A program that is not the steering program is refused by Open.
func TestOpenForeign(t *testing.T) {
	needRoot(t)
	p := passProgram(t)
	info, _ := p.Info()
	id, _ := info.ID()
	if f, err := Open(id); err == nil {
		f.Close()
		t.Fatal("Open of a foreign program succeeded")
	} else if !strings.Contains(err.Error(), errForeign.Error()) {
		t.Fatalf("Open of a foreign program: %v", err)
	}
}

// passProgram loads an XDP program of one instruction pair (return
// XDP_PASS) named "pass".
func passProgram(t *testing.T) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "pass", Type: ebpf.XDP, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// veth creates a veth pair in this network namespace for the test and
// returns one end and its index.
func veth(t *testing.T) (string, int) {
	t.Helper()
	a, b := fmt.Sprintf("oxdp%da", os.Getpid()%10000), fmt.Sprintf("oxdp%db", os.Getpid()%10000)
	exec.Command("ip", "link", "del", a).Run()
	if out, err := exec.Command("ip", "link", "add", a, "type", "veth", "peer", "name", b).CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", a).Run() })
	ifi, err := net.InterfaceByName(a)
	if err != nil {
		t.Fatal(err)
	}
	return a, ifi.Index
}

// Find opens the program attached to an interface; RemoveStale detaches
// it when its owner is gone, never while its owner holds it, and never a
// program that is not the steering program.
func TestFindAndRemoveStale(t *testing.T) {
	needRoot(t)
	iface, idx := veth(t)
	if _, err := Find(iface); err == nil {
		t.Fatal("Find on an interface without a program succeeded")
	}
	if id, err := RemoveStale(iface); id != 0 || err != nil {
		t.Fatalf("RemoveStale without a program = %d, %v", id, err)
	}

	// Another program: found by neither, left attached.
	foreign := passProgram(t)
	if err := setLinkXDP(idx, foreign.FD(), -1, unix.XDP_FLAGS_UPDATE_IF_NOEXIST); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(iface); err == nil {
		t.Error("Find of a foreign program succeeded")
	}
	if _, err := RemoveStale(iface); err == nil || !strings.Contains(err.Error(), "another XDP program") {
		t.Errorf("RemoveStale of a foreign program: %v", err)
	}
	if l, err := queryLinkXDP(idx); err != nil || l.progID == 0 {
		t.Fatalf("the foreign program was detached: %+v, %v", l, err)
	}
	if err := setLinkXDP(idx, -1, -1, 0); err != nil {
		t.Fatal(err)
	}

	// The steering program, attached as DPDK attaches it.
	coll, _ := loadSteer(t)
	prog := coll.Programs[progName]
	if err := setLinkXDP(idx, prog.FD(), -1, unix.XDP_FLAGS_UPDATE_IF_NOEXIST); err != nil {
		t.Fatal(err)
	}
	f, err := Find(iface)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := prog.Info()
	if id, _ := info.ID(); f.ID() != id || f.Iface != iface || f.Mode != "native" {
		t.Fatalf("Find: id %d iface %q mode %q, want %d %q native (veth runs XDP in its driver)", f.ID(), f.Iface, f.Mode, id, iface)
	}

	// Its owner alive: a child process holding the program.
	dup, err := unix.Dup(prog.FD())
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{os.NewFile(uintptr(dup), "prog")}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	child.ExtraFiles[0].Close()
	defer child.Process.Kill()
	if err := f.put(cfgValue{IP4: engineIP.As4(), OwnerPID: uint32(child.Process.Pid)}); err != nil {
		t.Fatal(err)
	}
	if !holdsProgram(child.Process.Pid, f.ID()) {
		t.Fatal("holdsProgram: the child's program not found in its fdinfo")
	}
	if _, err := RemoveStale(iface); err == nil || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("RemoveStale while its owner runs: %v", err)
	}
	// Its owner killed: stale.
	child.Process.Kill()
	child.Wait()
	if id, err := RemoveStale(iface); err != nil || id != f.ID() {
		t.Fatalf("RemoveStale after its owner died = %d, %v; want %d", id, err, f.ID())
	}
	if l, err := queryLinkXDP(idx); err != nil || l.progID != 0 || l.attached != attachedNone {
		t.Fatalf("after RemoveStale: %+v, %v", l, err)
	}
}

// Sockets finds the process's AF_XDP sockets, and only those.
func TestSockets(t *testing.T) {
	needRoot(t)
	before, err := Sockets()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no AF_XDP sockets in this kernel: %v", err)
	}
	other, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	if _, err := ReadSocket(other); err == nil {
		t.Error("ReadSocket of a UDP socket succeeded")
	}
	got, err := Sockets()
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(before)+1 {
		t.Fatalf("Sockets() found %d, want %d", len(got), len(before)+1)
	}
	var s *Socket
	for i := range got {
		if got[i].FD == fd {
			s = &got[i]
		}
	}
	if s == nil || s.ZeroCopy || s.Stats != (unix.XDPStatistics{}) {
		t.Fatalf("socket %d: %+v, want an unbound copy-mode socket with zero counters", fd, s)
	}
}
