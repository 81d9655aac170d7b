package main

import (
	"strconv"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
)

// benchLoopback is the loopback engine of every loopback setup (and of
// the PGO profile): net_ring, busy polling on CPU 1 (rmaperf runs on CPU
// 0), frames to itself out of the port and back through the ring, so the
// port's I/O is part of the per-op cost; MTU mtu, then extra rmad flags.
func benchLoopback(rmad, dir, name, ip, mtu string, extra ...string) testbed.Options {
	o := testbed.Loopback(rmad, dir, name, ip)
	o.Busy, o.CPU = true, 1
	o.Extra = append([]string{"-log-level", "warn", "-hairpin-self=true", "-mtu", mtu}, extra...)
	return o
}

// cryptoArgs is rmad's -crypto flag for rmabench's -crypto (none: rmad's
// default).
func cryptoArgs(crypto string) []string {
	if crypto == "" {
		return nil
	}
	return []string{"-crypto", crypto}
}

// holBg is the transfer that runs behind the head-of-line measurement.
const holBg = 4 << 20

// execSpec is the 4 MB READ through portal.Executor (rmaperf moves sizes
// above 4096 through it): two transfers in flight, so the pipeline does
// not drain between consecutive transfers; the executor's own window
// (package cc, up to its 64 slots) bounds the ops in flight.
var execSpec = spec{"read_bw", 4 << 20, 2}

// loopbackSpecs is specs with execSpec right after the raw 4 KB read_bw it
// is compared with.
func loopbackSpecs(specs []spec) []spec {
	var out []spec
	for _, s := range specs {
		out = append(out, s)
		if s.test == execSpec.test && s.size == abi.MaxOpBytes {
			out = append(out, execSpec)
		}
	}
	return out
}

// nPairs is how many interleaved rounds loopbackPairs runs.
const nPairs = 7

// loopbackPairs measures the executor's goodput against raw 4 KB READs in
// nPairs interleaved rounds on the loopback engine at socket, each run
// max(1 s, dur/nPairs) long: a host's throughput drifts over minutes,
// which a ratio of single rows taken minutes apart includes; a
// round's runs are seconds apart. A round is raw 4 KB READs
// (setup "loopback-pairs"), then execSpec through the executor, then raw
// 4 KB READs over the executor's memory footprint (setup
// "loopback-pairs-footprint": the region it reads, one transfer's size,
// and the one destination its transfers share, walked 4 KB at a time),
// which separates what the executor costs from what touching 8 MB
// instead of 1.25 MB costs. Every other round runs backwards
// (interleaved), so the executor run is always next to both raw runs and
// a steady drift does not favour one side. printTable prints the median
// of each round's ratios.
func loopbackPairs(rmaperf, socket string, dur time.Duration, emit emitFunc) error {
	d := max(time.Second, dur/nPairs)
	raw := spec{execSpec.test, abi.MaxOpBytes, 64}
	footprint := []string{"-region-bytes", strconv.Itoa(execSpec.size), "-local-bytes", strconv.Itoa(execSpec.size)}
	run := func(s spec, setup string, args ...string) func() (Row, error) {
		return func() (Row, error) {
			return rmaperfRun(rmaperf, "0", s, d, setup, nil, append([]string{"-socket", socket, "-self"}, args...)...)
		}
	}
	return interleaved(nPairs, emit, run(raw, "loopback-pairs"), run(execSpec, "loopback-pairs"), run(raw, "loopback-pairs-footprint", footprint...))
}

// loopbackRun starts the loopback engine of rmad (benchLoopback: MTU mtu,
// rmabench's -crypto) and measures specs on it, rows of setup; the
// loopback setup adds the head-of-line rows and the interleaved pairs on
// the same engine.
func loopbackRun(rmad, rmaperf, dir, setup, mtu, crypto string, specs []spec, dur time.Duration, emit emitFunc) error {
	e, err := testbed.Start(benchLoopback(rmad, dir, "bench-lo", "10.99.0.1", mtu, cryptoArgs(crypto)...))
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	for _, s := range specs {
		r, err := rmaperfRun(rmaperf, "0", s, dur, setup, nil, "-socket", e.Socket, "-self")
		if err != nil {
			return err
		}
		emit(r)
	}
	if setup == "loopback" {
		// Head-of-line isolation (paper Fig. 12/13): 64 B READs
		// through the executor alone, then while a 4 MB READ runs
		// on the same executor (same portal, slots and windows).
		for _, h := range []struct {
			setup string
			args  []string
		}{{"loopback-hol-idle", []string{"-exec"}}, {"loopback-hol", []string{"-exec", "-bg", strconv.Itoa(holBg)}}} {
			r, err := rmaperfRun(rmaperf, "0", spec{"read_lat", 64, 1}, dur, h.setup, nil, append([]string{"-socket", e.Socket, "-self"}, h.args...)...)
			if err != nil {
				return err
			}
			emit(r)
		}
		if err := loopbackPairs(rmaperf, e.Socket, dur, emit); err != nil {
			return err
		}
	}
	return e.Stop(10 * time.Second)
}

// loopbackOnce starts the loopback engine of rmad (benchLoopback: named
// name, MTU mtu, rmabench's -crypto), runs one rmaperf measurement of s
// for d on it, and stops it: for setups whose engine runs alternate with
// runs that need the engine's CPU, or with another build of the engine.
func loopbackOnce(rmad, rmaperf, dir, name, mtu, crypto string, s spec, d time.Duration, setup string) (Row, error) {
	e, err := testbed.Start(benchLoopback(rmad, dir, name, "10.99.0.1", mtu, cryptoArgs(crypto)...))
	if err != nil {
		return Row{}, err
	}
	r, err := rmaperfRun(rmaperf, "0", s, d, setup, nil, "-socket", e.Socket, "-self")
	if serr := e.Stop(10 * time.Second); err == nil {
		err = serr
	}
	return r, err
}
