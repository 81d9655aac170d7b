package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// rttSpecs are what the rtt setup measures on each port: a READ alone
// (the port's round trip: the engine's total_delay of an unloaded op is
// its time in service), 4 KB READs keeping the whole solicitation window
// in flight (rmad's 256 KB: 64 ops), the longest an op stays in service
// when its initiator alone loads the serving engine, and the same with
// WRITEs (four hops: two round trips, the serving engine pulling the
// data under its own window).
var rttSpecs = []spec{{"read_lat", 64, 1}, {"read_lat", 4096, 1}, {"read_bw", 4096, 64}, {"write_bw", 4096, 64}}

// rttBench is one pass of the rtt setup: its setups' prefix, the
// engines' timeout flags, and the ports it runs (nil: all).
type rttBench struct {
	prefix   string
	timeouts []string // none: rmad's defaults
	note     string
	ports    []string
}

// newRTTBench is the pass -rtt-timeout asks for: "1s" (the default)
// measures round trips, TIMEOUT and DISPATCH_TIMEOUT far above any, so a
// slow op is measured, not failed (setups rtt-PORT); "default" keeps
// rmad's default TIMEOUT per port type, counting the ops it fails
// (rtt-default-PORT); another duration runs with that TIMEOUT
// (rtt-timeout-DUR-PORT). ports (comma separated, "": all) picks among
// memif, memif-backoff, af_packet, af_xdp, net_ring and net_tap.
func newRTTBench(timeout, ports string) (rttBench, error) {
	var b rttBench
	switch timeout {
	case "1s":
		b = rttBench{"rtt-", []string{"-timeout", "1s", "-dispatch-timeout", "100ms"}, "TIMEOUT 1 s", nil}
	case "default":
		b = rttBench{"rtt-default-", nil, "rmad's default TIMEOUT", nil}
	default:
		d, err := time.ParseDuration(timeout)
		if err != nil || d <= 0 {
			return b, fmt.Errorf("-rtt-timeout %q: want 1s, default or a duration", timeout)
		}
		b = rttBench{"rtt-timeout-" + d.String() + "-", []string{"-timeout", d.String()}, "TIMEOUT " + d.String(), nil}
	}
	if ports != "" {
		b.ports = strings.Split(ports, ",")
	}
	return b, nil
}

// runs reports whether the pass includes port.
func (b rttBench) runs(port string) bool { return b.ports == nil || slices.Contains(b.ports, port) }

// rttRun measures the round trip of the ports rmad runs on, as the memif
// and veth setups arrange two engines and an application on two CPUs
// (engines at nice 0: the application shares a CPU): memif (busy, and in
// backoff mode), af_packet and af_xdp on a veth pair between two network
// namespaces, net_tap ports joined by a Linux bridge, and the loopback
// engine's net_ring port. Each row's engine percentiles (eng_p50_us ..
// eng_max_us) are what TIMEOUT must stay above; tools/rmad/timeout.go
// derives rmad's default per port type from them, and printRTT prints
// them per port.
func rttRun(rmad, rmaperf, dir string, b rttBench, dur time.Duration, emit emitFunc) error {
	tag := os.Getpid() % 1000
	ma, mb := testbed.MemifPair(rmad, dir, "bench-rma", "bench-rmb", "10.99.3.1", "10.99.3.2")
	if b.runs("memif") {
		if err := b.pair(rmaperf, ma, mb, "memif", nil, true, dur, emit); err != nil {
			return fmt.Errorf("memif: %w", err)
		}
	}
	if b.runs("memif-backoff") {
		// The same engines polling in backoff mode: idle, each sleeps up
		// to poll.max_sleep between polls, and a frame waits for its
		// wake-up.
		if err := b.pair(rmaperf, ma, mb, "memif-backoff", nil, false, dur, emit); err != nil {
			return fmt.Errorf("memif, backoff: %w", err)
		}
	}

	if b.runs("af_packet") || b.runs("af_xdp") {
		v, err := testbed.NewVethPair(fmt.Sprintf("orr%d", tag))
		if err != nil {
			return err
		}
		defer v.Close()
		for _, s := range vethSetups {
			if !b.runs(s.setup) {
				continue
			}
			oa := s.port(rmad, dir, "bench-rva", "10.99.3.1", v.NSA, v.IfA)
			ob := s.port(rmad, dir, "bench-rvb", "10.99.3.2", v.NSB, v.IfB)
			if err := b.pair(rmaperf, oa, ob, s.setup, nil, true, dur, emit); err != nil {
				return fmt.Errorf("%s: %w", s.setup, err)
			}
		}
	}

	if b.runs("net_ring") {
		// The bench's loopback engine (one engine serving its own READs
		// through its port), the test port of single-host runs.
		lo, err := testbed.Start(benchLoopback(rmad, dir, "bench-rlo", "10.99.3.5", "1500", b.timeouts...))
		if err != nil {
			return err
		}
		for _, s := range rttSpecs {
			r, err := rmaperfRun(rmaperf, "0", s, dur, b.prefix+"net_ring", nil, "-socket", lo.Socket, "-self")
			if err != nil {
				lo.Stop(10 * time.Second)
				return fmt.Errorf("net_ring: %w", err)
			}
			r.Note = addNote(r.Note, "one engine busy on CPU 1 serving its own READs through a net_ring port; app on CPU 0 spinning; "+b.note)
			emit(r)
		}
		if err := lo.Stop(10 * time.Second); err != nil {
			return err
		}
	}

	if !b.runs("net_tap") {
		return nil
	}
	ta, tb := fmt.Sprintf("orrta%d", tag), fmt.Sprintf("orrtb%d", tag)
	oa := testbed.Tap(rmad, dir, "bench-rta", "10.99.3.1", ta, "02:99:03:00:00:01")
	ob := testbed.Tap(rmad, dir, "bench-rtb", "10.99.3.2", tb, "02:99:03:00:00:02")
	var br *testbed.Bridge
	defer func() {
		if br != nil {
			br.Close()
		}
	}()
	bridge := func() error {
		var err error
		br, err = testbed.NewBridge(fmt.Sprintf("orrbr%d", tag), ta, tb)
		return err
	}
	if err := b.pair(rmaperf, oa, ob, "net_tap", bridge, true, dur, emit); err != nil {
		return fmt.Errorf("net_tap: %w", err)
	}
	return nil
}

// pair starts engines oa and ob on CPU 0 and 1, busy polling or in
// backoff mode (then runs wire, if not nil, to join their ports), an
// rmaperf server on ob, and measures rttSpecs from oa for dur each.
func (b rttBench) pair(rmaperf string, oa, ob testbed.Options, port string, wire func() error, busy bool, dur time.Duration, emit emitFunc) error {
	oa.Busy, oa.CPU = busy, 0
	ob.Busy, ob.CPU = busy, 1
	extra := append([]string{"-log-level", "warn", "-poll-nice", "0"}, b.timeouts...)
	oa.Extra = append(append([]string(nil), oa.Extra...), extra...)
	ob.Extra = append(append([]string(nil), ob.Extra...), extra...)
	a, err := testbed.Start(oa)
	if err != nil {
		return err
	}
	defer a.Stop(10 * time.Second)
	e, err := testbed.Start(ob)
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	if wire != nil {
		if err := wire(); err != nil {
			return err
		}
	}
	srv, err := startPerfServer(rmaperf, e.Socket)
	if err != nil {
		return err
	}
	defer srv.stop()
	mode := "busy"
	if !busy {
		mode = "in backoff mode (sleeping up to 200 µs when idle)"
	}
	for _, s := range rttSpecs {
		r, err := rmaperfRun(rmaperf, "0", s, dur, b.prefix+port, srv.cliCreds, "-socket", a.Socket, "-server", srv.kx, "-region", srv.region, "-event", "-spins=-1")
		if err != nil {
			return err
		}
		r.Note = addNote(r.Note, "engines "+mode+" on CPU 0 and 1; app on CPU 0 sleeps on the completion doorbell; "+b.note)
		emit(r)
	}
	return nil
}

// printRTT prints each port's engine round trips, and the errors (ops
// TIMEOUT failed) of the rows run with rmad's default TIMEOUT.
func printRTT(rows []Row) {
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Setup, "rtt-") {
			continue
		}
		fmt.Printf("%-26s %-8s %5d B O=%-3d engine total_delay µs: p50 %s p99 %s p99.9 %s max %s; %d ops, %d errors\n",
			r.Setup, r.Test, r.Size, r.Outstanding, f(r.EngP50us), f(r.EngP99us), f(r.EngP999us), f(r.EngMaxUs), r.Ops, r.Errors)
	}
}
