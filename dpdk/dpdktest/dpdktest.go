// Package dpdktest starts the DPDK EAL for tests and benchmarks that need
// real ethdev ports (vdevs such as net_ring and net_null), and decides when
// they may be skipped: only when the process is not root and the
// environment variable CI is not "true". In CI a DPDK test never skips: a
// missing capability is a failure (like cilium/ebpf's CI kernel gates).
//
// The EAL can be initialised once per process, so a test binary calls Main
// from its TestMain, and each test calls Require:
//
//	func TestMain(m *testing.M) { dpdktest.Main(m, "net_ring0", "net_null0") }
//
//	func TestX(t *testing.T) {
//		dpdktest.Require(t)
//		port, pool := dpdktest.Port(t, "net_ring0")
//		...
//	}
//
// The EAL runs with --no-huge --no-shconf by default (--in-memory with
// ONERMA_EAL_HUGE=1), so test binaries
// of several packages can run at once without colliding (no files, no
// hugepages needed). ONERMA_EAL_HUGE=1 drops --no-huge (use hugepages);
// ONERMA_EAL_ARGS appends extra EAL arguments (space separated).
package dpdktest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/onerma/onerma/dpdk"
)

var (
	skipReason string // non-empty: tests skip
	initErr    error  // EAL init failed: tests fail
	args       []string
)

// Args returns the EAL arguments for a test binary with the given vdevs
// (each a --vdev value, e.g. "net_ring0" or "net_null0,size=64").
func Args(vdevs ...string) []string {
	a := []string{
		"--no-pci", "--no-telemetry",
		lcores(), // one lcore, allowed on every CPU: pins nothing
		"--log-level=lib.eal:warning",
	}
	if os.Getenv("ONERMA_EAL_HUGE") == "1" {
		a = append(a, "--in-memory") // hugepages, no files, no shared config
	} else {
		// --no-huge implies legacy memory, which --in-memory refuses;
		// --no-shconf keeps processes apart all the same.
		a = append(a, "--no-huge", "--no-shconf", "-m", "512")
	}
	for _, v := range vdevs {
		a = append(a, "--vdev="+v)
	}
	if extra := strings.Fields(os.Getenv("ONERMA_EAL_ARGS")); len(extra) > 0 {
		a = append(a, extra...)
	}
	return a
}

// lcores maps lcore 0 to every CPU the process may use (like
// --lcores=0@(0-1) on a 2-CPU machine, but right on any machine).
func lcores() string {
	cpus, err := dpdk.Affinity()
	if err != nil || len(cpus) == 0 {
		return "--lcores=0@(0)"
	}
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return "--lcores=0@(" + strings.Join(s, ",") + ")"
}

// Main initialises the EAL with Args(vdevs...) when DPDK tests may run,
// runs the tests and exits. Call it from TestMain.
func Main(m *testing.M, vdevs ...string) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		skipReason = "DPDK tests need root (EAL memory, vdevs); not root and CI is not \"true\""
	} else {
		args = Args(vdevs...)
		initErr = dpdk.Init(args)
	}
	code := m.Run()
	if initErr == nil && skipReason == "" {
		if err := teardown(); err != nil {
			fmt.Fprintf(os.Stderr, "dpdktest: teardown: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// teardown stops and closes every port Port set up, checks that every mbuf
// came back to its pool, frees the pools and cleans the EAL up.
func teardown() error {
	portsMu.Lock()
	defer portsMu.Unlock()
	var errs []error
	for name, p := range ports {
		if p.err != nil {
			continue
		}
		if err := p.id.Stop(); err != nil {
			errs = append(errs, err)
		}
		if err := p.id.Close(); err != nil {
			errs = append(errs, err)
		}
		// Closing the port freed the mbufs its rx ring held.
		if n := p.pool.InUse(); n != 0 {
			errs = append(errs, fmt.Errorf("port %s: %d mbufs never returned to the pool", name, n))
		}
		p.pool.Free()
	}
	if err := dpdk.Cleanup(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Require skips tb when DPDK tests may not run here, and fails it when they
// must run but the EAL did not start.
func Require(tb testing.TB) {
	tb.Helper()
	if skipReason != "" {
		tb.Skip(skipReason)
	}
	if initErr != nil {
		tb.Fatalf("EAL init: %v", initErr)
	}
	if !dpdk.Initialized() {
		tb.Fatal("EAL not initialised: call dpdktest.Main from TestMain")
	}
}

// Mbufs and DataRoom size the pool Port creates for each port.
const (
	Mbufs    = 8191
	DataRoom = dpdk.DefaultDataRoom
)

type port struct {
	id     dpdk.PortID
	pool   *dpdk.Mempool
	queues uint16
	err    error
}

var (
	portsMu sync.Mutex
	ports   = map[string]*port{}
)

// Port returns the vdev called name, configured with one rx/tx queue pair
// on a pool of its own (Mbufs mbufs of DataRoom bytes) and started. The
// first call per name sets it up; later calls (other tests, benchmark
// rounds) get the same port. Ports stay up for the life of the process.
func Port(tb testing.TB, name string) (dpdk.PortID, *dpdk.Mempool) {
	return PortWith(tb, name, Mbufs, DataRoom)
}

// PortWith is Port with a chosen pool size and data room (effective on the
// first call for a name).
func PortWith(tb testing.TB, name string, mbufs uint32, dataRoom uint16) (dpdk.PortID, *dpdk.Mempool) {
	return PortQueues(tb, name, 1, mbufs, dataRoom)
}

// PortQueues is PortWith with queues rx/tx queue pairs (effective on the
// first call for a name; a later call asking for another number fails).
func PortQueues(tb testing.TB, name string, queues uint16, mbufs uint32, dataRoom uint16) (dpdk.PortID, *dpdk.Mempool) {
	tb.Helper()
	Require(tb)
	portsMu.Lock()
	defer portsMu.Unlock()
	p, ok := ports[name]
	if !ok {
		p = &port{queues: queues}
		p.id, p.pool, p.err = setup(name, queues, mbufs, dataRoom)
		ports[name] = p
	}
	if p.err != nil {
		tb.Fatalf("port %s: %v", name, p.err)
	}
	if p.queues != queues {
		tb.Fatalf("port %s: set up with %d queues, asked for %d", name, p.queues, queues)
	}
	return p.id, p.pool
}

var (
	pairsMu sync.Mutex
	pairs   = map[[2]string]error{}
)

// RingPair creates two ports joined back to back (dpdk.NewRingPair, rings
// of 4096 entries; their device names are "net_ring_"+a and
// "net_ring_"+b), sets both up like Port and returns them. The first call per pair creates it; later calls get the
// same ports.
func RingPair(tb testing.TB, a, b string) (pa, pb dpdk.PortID, poolA, poolB *dpdk.Mempool) {
	return RingPairQueues(tb, a, b, 1)
}

// RingPairQueues is RingPair with queues queue pairs on each port
// (dpdk.NewRingPairQueues: a's queue q sends to b's queue q).
func RingPairQueues(tb testing.TB, a, b string, queues uint16) (pa, pb dpdk.PortID, poolA, poolB *dpdk.Mempool) {
	tb.Helper()
	Require(tb)
	pairsMu.Lock()
	err, ok := pairs[[2]string{a, b}]
	if !ok {
		_, _, err = dpdk.NewRingPairQueues(a, b, 4096, queues, dpdk.SocketAny)
		pairs[[2]string{a, b}] = err
	}
	pairsMu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	pa, poolA = PortQueues(tb, "net_ring_"+a, queues, Mbufs, DataRoom)
	pb, poolB = PortQueues(tb, "net_ring_"+b, queues, Mbufs, DataRoom)
	return pa, pb, poolA, poolB
}

func setup(name string, queues uint16, mbufs uint32, dataRoom uint16) (dpdk.PortID, *dpdk.Mempool, error) {
	id, err := dpdk.PortByName(name)
	if err != nil {
		return 0, nil, fmt.Errorf("%w (EAL args %q)", err, args)
	}
	pool, err := dpdk.NewPktmbufPool("pool_"+name, mbufs, 256, 0, dataRoom, dpdk.SocketAny)
	if err != nil {
		return 0, nil, err
	}
	if err := id.Setup(dpdk.PortConfig{Queues: queues, Pool: pool, Promiscuous: true}); err != nil {
		pool.Free()
		return 0, nil, err
	}
	return id, pool, nil
}
