package main

import (
	"fmt"
	"os"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// nVethRounds is how many interleaved rounds vethRun runs.
const nVethRounds = 5

// vethSpecs are the veth setups' workloads.
var vethSpecs = []spec{{"read_bw", 64, 64}, {"read_bw", 4096, 64}, {"read_lat", 64, 1}, {"read_lat", 4096, 1}}

// vethSetups are the two ports measured on one veth pair, in the order of
// an even round.
var vethSetups = []struct {
	setup string
	port  func(rmad, dir, name, ip, ns, iface string) testbed.Options
}{{"af_packet", testbed.AFPacket}, {"af_xdp", testbed.AFXDP}}

// vethNote says how the two engines and the application share two cores
// (as memif's: memifNote); the kernel's share of each frame's journey
// runs on the sending engine's CPU, inside its send call.
const vethNote = "engines busy on CPU 0 and 1 in two network namespaces joined by a veth pair; app on CPU 0 sleeps on the completion doorbell"

// vethRun measures the ports a host without a NIC of DPDK's own offers an
// engine, on one veth pair between two network namespaces: af_packet
// (the kernel's packet sockets: every frame through the kernel's stack
// and a copy each way) and af_xdp (AF_XDP sockets behind rmad's XDP
// program, which hands the engine's frames over before the stack; veth
// has no zero-copy, so the kernel still copies each one). nVethRounds
// rounds of both, every other round in the other order; in each, a pair
// of engines on that port (A reading, B serving through an rmaperf
// server, as memif's) runs vethSpecs for max(1 s, dur/nVethRounds) each
// and stops. printVeth prints the medians of the rounds' af_xdp /
// af_packet ratios.
func vethRun(rmad, rmaperf, dir string, dur time.Duration, emit emitFunc) error {
	d := max(time.Second, dur/nVethRounds)
	v, err := testbed.NewVethPair(fmt.Sprintf("orb%d", os.Getpid()%1000))
	if err != nil {
		return err
	}
	defer v.Close()
	for k := range nVethRounds {
		for i := range vethSetups {
			if k%2 == 1 {
				i = len(vethSetups) - 1 - i
			}
			s := vethSetups[i]
			// One name per side for both ports: the engine of an
			// address keeps its IV counters from run to run.
			oa := s.port(rmad, dir, "bench-va", "10.99.2.1", v.NSA, v.IfA)
			ob := s.port(rmad, dir, "bench-vb", "10.99.2.2", v.NSB, v.IfB)
			if err := pinnedPair(rmaperf, oa, ob, s.setup, vethSpecs, d, vethNote, emit); err != nil {
				return fmt.Errorf("%s: %w", s.setup, err)
			}
		}
	}
	return nil
}

// printVeth prints, for each of vethSpecs, the median over the rounds of
// af_xdp / af_packet ops/s (and p50 latency of the latency tests), with
// every round's ratio.
func printVeth(rows []Row) {
	type key struct {
		test        string
		size, depth int
	}
	by := map[key]map[string][]Row{}
	for _, r := range rows {
		if r.Setup != "af_packet" && r.Setup != "af_xdp" {
			continue
		}
		k := key{r.Test, r.Size, r.Outstanding}
		if by[k] == nil {
			by[k] = map[string][]Row{}
		}
		by[k][r.Setup] = append(by[k][r.Setup], r)
	}
	for _, s := range vethSpecs {
		m := by[key{s.test, s.size, s.depth}]
		xs, ps := m["af_xdp"], m["af_packet"]
		n := min(len(xs), len(ps))
		if n == 0 || ps[0].OpsPerSec == 0 {
			continue
		}
		ops, p50 := make([]float64, 0, n), make([]float64, 0, n)
		for i := range n {
			if ps[i].OpsPerSec > 0 {
				ops = append(ops, xs[i].OpsPerSec/ps[i].OpsPerSec)
			}
			if xs[i].P50us > 0 {
				p50 = append(p50, ps[i].P50us/xs[i].P50us)
			}
		}
		fmt.Printf("af_xdp/af_packet %-9s %5d B O=%-3d %d interleaved rounds: ops/s median %.2f (ratios %s)", s.test, s.size, s.depth, n, median(ops), ratioList(ops))
		if s.depth == 1 && len(p50) > 0 {
			fmt.Printf("; p50 af_packet/af_xdp median %.2f (ratios %s)", median(p50), ratioList(p50))
		}
		fmt.Println()
	}
}
