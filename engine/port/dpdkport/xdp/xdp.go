// Package xdp is the kernel side of rmad's AF_XDP ports (DPDK's
// net_af_xdp): the XDP program DPDK attaches to the interface in place of
// its default one, which would take every frame of the queue from the
// kernel, and the control of that program once attached.
//
// The program (bpf/steer.bpf.c, compiled by `make bpf`, embedded here)
// steers the frames addressed to the engine's IPv4 address (ARP asking
// for it, UDP and ICMP to it) to the AF_XDP socket of their rx queue and
// passes every other frame to the kernel: the engine and the host's own
// stack share the interface and its MAC address, each with its own IPv4
// address. rmad writes the program to a file for DPDK's xdp_prog devarg
// (WriteObject, Vdev.WithProg); after the port has started it finds the
// program on the interface through rtnetlink, opens it and its maps by id
// with cilium/ebpf (Find) and writes the engine's address into its
// configuration map (Filter.SetAddr); until then every frame goes to the
// kernel. RemoveStale detaches a program whose engine was killed before
// DPDK could detach it; Sockets reports whether the process's AF_XDP
// sockets run in copy or zero-copy mode.
//
// DPDK (22.11) loads the program with libbpf, attaches it to the
// interface and puts each queue's socket into the map named xsks_map (an
// engine of N cores: queue_count=N, core i's socket at the i-th queue
// from start_queue). rmad writes the engine's address and its own PID into
// onerma_cfg: the PID lets the next engine tell a program a killed engine
// left (DPDK attaches only to an interface without one) from a live
// engine's. The port's mbuf pool must be one page per mbuf, page-aligned
// and back to back (dpdk.NewPagedPktmbufPool): net_af_xdp registers the
// pool as the socket's umem assuming exactly that array.
//
// It knows nothing of 1RMA and imports nothing of the engine. Everything
// here needs root (CAP_NET_ADMIN and CAP_BPF, CAP_SYS_ADMIN to open a
// program by id); the netlink calls act in the calling thread's network
// namespace.
package xdp

import (
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

//go:embed bpf/steer.bpf.o
var object []byte

// MaxQueues is the number of rx queues the program can steer to a socket
// (its xsks_map, indexed by rx queue).
const MaxQueues = 256

// Names of the program and its maps (bpf/steer.bpf.c). A map's name is
// cut to 15 bytes by the kernel; these are shorter.
const (
	progName = "onerma_steer"
	cfgMap   = "onerma_cfg"
	statsMap = "onerma_stats"
	xsksMap  = "xsks_map" // DPDK's name for it
)

// Counter indices of onerma_stats (bpf/steer.bpf.c).
const (
	cEngine = iota
	cNoSocket
	cKernel
	numCounters
)

// cfgValue is onerma_cfg's value (struct steer_cfg).
type cfgValue struct {
	IP4      [4]byte // network byte order; zero: steer nothing
	OwnerPID uint32  // the process that set it
}

// WriteObject writes the program's object file to a new file in dir (""
// for the default directory for temporary files) and returns its path,
// for net_af_xdp's xdp_prog devarg. DPDK loads it while it sets up the
// port's rx queues; the caller removes it once the port has started.
func WriteObject(dir string) (string, error) {
	f, err := os.CreateTemp(dir, "onerma-steer-*.bpf.o")
	if err != nil {
		return "", fmt.Errorf("xdp: %w", err)
	}
	_, err = f.Write(object)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("xdp: writing %s: %w", f.Name(), err)
	}
	return filepath.Clean(f.Name()), nil
}

// Stats are the program's counters, summed over CPUs.
type Stats struct {
	ToEngine uint64 // frames for the engine, redirected to its socket
	// NoSocket: frames for the engine that arrived on an rx queue
	// without a socket, passed to the kernel (which drops them: the
	// address is not its own). Steer the engine's traffic to its queue
	// or give the interface one queue.
	NoSocket uint64
	ToKernel uint64 // every other frame, passed to the kernel
}

// Filter is the steering program, opened by its id.
type Filter struct {
	// Iface and Mode (native: the driver runs the program; generic: the
	// kernel runs it on socket buffers) are what Find found; empty after
	// Open.
	Iface, Mode string
	id          ebpf.ProgramID
	prog        *ebpf.Program
	cfg, stats  *ebpf.Map
}

// Find opens the program attached to interface iface; none, or another
// program than the steering program, is an error.
func Find(iface string) (*Filter, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	l, err := queryLinkXDP(ifi.Index)
	if err != nil {
		return nil, err
	}
	if l.progID == 0 {
		return nil, fmt.Errorf("xdp: %s has no XDP program attached (%s)", iface, l.mode())
	}
	f, err := Open(ebpf.ProgramID(l.progID))
	if err != nil {
		return nil, fmt.Errorf("xdp: the program on %s: %w", iface, err)
	}
	f.Iface, f.Mode = iface, l.mode()
	return f, nil
}

// Open opens the program with id id and its maps, checking it is the
// steering program.
func Open(id ebpf.ProgramID) (*Filter, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, fmt.Errorf("xdp: program %d: %w", id, err)
	}
	f := &Filter{id: id, prog: prog}
	if err := f.openMaps(); err != nil {
		f.Close()
		return nil, fmt.Errorf("xdp: program %d: %w", id, err)
	}
	return f, nil
}

// errForeign says a program is not the steering program.
var errForeign = errors.New("not rmad's steering program")

func (f *Filter) openMaps() error {
	info, err := f.prog.Info()
	if err != nil {
		return err
	}
	if info.Type != ebpf.XDP || info.Name != progName {
		return fmt.Errorf("%w: %s program %q", errForeign, info.Type, info.Name)
	}
	ids, ok := info.MapIDs()
	if !ok {
		return errors.New("the kernel does not say which maps it uses")
	}
	var xsks bool
	for _, mid := range ids {
		m, err := ebpf.NewMapFromID(mid)
		if err != nil {
			return fmt.Errorf("map %d: %w", mid, err)
		}
		mi, err := m.Info()
		if err != nil {
			m.Close()
			return fmt.Errorf("map %d: %w", mid, err)
		}
		var want *ebpf.Map
		switch {
		case mi.Name == cfgMap && mi.Type == ebpf.Array && mi.KeySize == 4 && mi.ValueSize == 8 && mi.MaxEntries == 1:
			f.cfg, want = m, m
		case mi.Name == statsMap && mi.Type == ebpf.PerCPUArray && mi.KeySize == 4 && mi.ValueSize == 8 && mi.MaxEntries == numCounters:
			f.stats, want = m, m
		case mi.Name == xsksMap && mi.Type == ebpf.XSKMap && mi.MaxEntries == MaxQueues:
			xsks = true
		}
		if want == nil {
			m.Close()
		}
	}
	if f.cfg == nil || f.stats == nil || !xsks {
		return fmt.Errorf("%w: maps %s, %s and %s of this build not all found", errForeign, cfgMap, statsMap, xsksMap)
	}
	return nil
}

// ID is the program's id.
func (f *Filter) ID() ebpf.ProgramID { return f.id }

// SetAddr makes the program steer the frames for ip (IPv4, not 0.0.0.0)
// to the sockets, recording this process as their owner (RemoveStale).
func (f *Filter) SetAddr(ip netip.Addr) error {
	if !ip.Is4() || ip.IsUnspecified() {
		return fmt.Errorf("xdp: engine address %v: want a unicast IPv4 address", ip)
	}
	return f.put(cfgValue{IP4: ip.As4(), OwnerPID: uint32(os.Getpid())})
}

// Clear makes the program pass every frame to the kernel.
func (f *Filter) Clear() error { return f.put(cfgValue{}) }

func (f *Filter) put(v cfgValue) error {
	if err := f.cfg.Put(uint32(0), v); err != nil {
		return fmt.Errorf("xdp: program %d: %s: %w", f.id, cfgMap, err)
	}
	return nil
}

// Addr is the address the program steers (the zero Addr: none) and the
// process that set it.
func (f *Filter) Addr() (netip.Addr, int, error) {
	var v cfgValue
	if err := f.cfg.Lookup(uint32(0), &v); err != nil {
		return netip.Addr{}, 0, fmt.Errorf("xdp: program %d: %s: %w", f.id, cfgMap, err)
	}
	if v.IP4 == ([4]byte{}) {
		return netip.Addr{}, int(v.OwnerPID), nil
	}
	return netip.AddrFrom4(v.IP4), int(v.OwnerPID), nil
}

// Stats reads the program's counters.
func (f *Filter) Stats() (Stats, error) {
	var c [numCounters]uint64
	for i := range c {
		var perCPU []uint64
		if err := f.stats.Lookup(uint32(i), &perCPU); err != nil {
			return Stats{}, fmt.Errorf("xdp: program %d: %s: %w", f.id, statsMap, err)
		}
		for _, v := range perCPU {
			c[i] += v
		}
	}
	return Stats{ToEngine: c[cEngine], NoSocket: c[cNoSocket], ToKernel: c[cKernel]}, nil
}

// Close releases the program and maps (it stays attached: DPDK detaches
// it when it closes the port).
func (f *Filter) Close() error {
	var err error
	for _, m := range []*ebpf.Map{f.cfg, f.stats} {
		if m != nil {
			err = errors.Join(err, m.Close())
		}
	}
	return errors.Join(err, f.prog.Close())
}

// RemoveStale detaches the steering program from interface iface if the
// process that configured it no longer holds it: an engine killed before
// DPDK could detach its program leaves it attached, and DPDK attaches its
// own only to an interface without one. It returns the id of the program
// it removed (0: there was none). A program that is not the steering
// program, or whose engine still runs (in this PID namespace), is an
// error naming it.
func RemoveStale(iface string) (ebpf.ProgramID, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return 0, fmt.Errorf("xdp: %w", err)
	}
	l, err := queryLinkXDP(ifi.Index)
	if err != nil || l.progID == 0 {
		return 0, err
	}
	id := ebpf.ProgramID(l.progID)
	f, err := Open(id)
	if errors.Is(err, errForeign) {
		return 0, fmt.Errorf("xdp: %s has another XDP program attached (id %d, %s): detach it (ip link set dev %s xdp off) if nothing needs it", iface, id, l.mode(), iface)
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	_, pid, err := f.Addr()
	if err != nil {
		return 0, err
	}
	if pid != 0 && pid != os.Getpid() && holdsProgram(pid, id) {
		return 0, fmt.Errorf("xdp: %s: the steering program (id %d) belongs to process %d, which still runs: one engine per interface", iface, id, pid)
	}
	// Only this program, in the mode it is attached in: a program
	// attached meanwhile stays.
	if err := setLinkXDP(ifi.Index, -1, f.prog.FD(), l.flags()|unix.XDP_FLAGS_REPLACE); err != nil {
		return 0, err
	}
	return id, nil
}

// holdsProgram reports whether process pid has a file descriptor of BPF
// program id open (its /proc/PID/fdinfo says "prog_id: id").
func holdsProgram(pid int, id ebpf.ProgramID) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fdinfo")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "prog_id:\t" + strconv.FormatUint(uint64(id), 10) + "\n"
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(string(b), want) {
			return true
		}
	}
	return false
}
