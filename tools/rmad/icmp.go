package main

import (
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/runner"
)

// fragWatchPeriod is how often rmad looks at the core's record of ICMP
// "fragmentation needed": a log line at most this often however many
// arrive (forged ones included: the record is unauthenticated).
const fragWatchPeriod = time.Second

// fragWatch logs the ICMP "fragmentation needed" messages the core
// records (Stats.ICMPFragNeeded, the latest one's FragNeededDst and
// FragNeededMTU): a router on the way to dst cannot forward the engine's
// frames, which otherwise shows only as TIMEOUTs. The engine does not
// lower its MTU on an unauthenticated ICMP message; the operator sets
// the route's MTU.
type fragWatch struct {
	log       zerolog.Logger
	routes    []engine.Route // the core's routing table, longest prefix first
	engineMTU int
	seen      uint64 // ICMPFragNeeded when last looked at
}

// check logs a warning when the core recorded fragmentation needed since
// the last check, naming the latest destination and MTU and how many
// arrived.
func (w *fragWatch) check(st *engine.Stats) {
	if st.ICMPFragNeeded == w.seen {
		return
	}
	n := st.ICMPFragNeeded - w.seen
	w.seen = st.ICMPFragNeeded
	var a [4]byte
	binary.BigEndian.PutUint32(a[:], st.FragNeededDst)
	dst := netip.AddrFrom4(a)
	w.log.Warn().Str("dst", dst.String()).Uint64("path_mtu", st.FragNeededMTU).Int("engine_mtu", w.engineMTU).
		Str("route", routeOf(w.routes, dst)).Uint64("messages", n).
		Msgf("icmp fragmentation needed: dst %s path_mtu %d engine_mtu %d (set engine.routes mtu for this destination)",
			dst, st.FragNeededMTU, w.engineMTU)
}

// routeOf names, for the log, the route the engine's frames to dst take:
// the first of table (longest prefix first) whose prefix holds dst, as
// `ip route` shows it, or "none".
func routeOf(table []engine.Route, dst netip.Addr) string {
	for _, r := range table {
		if r.Dst.Contains(dst) {
			return r.String()
		}
	}
	return "none"
}

// watchFragNeeded runs a copy of w for each core every period on the
// core's counters, read on its poll loop's own goroutine (runner.Exec:
// the loop copies them between two iterations, so the data path takes no
// lock), until stop is closed or a loop has stopped. Each core records
// the messages it received itself.
func watchFragNeeded(rs []*runner.Runner, w *fragWatch, period time.Duration, stop <-chan struct{}) {
	ws := make([]fragWatch, len(rs))
	for i := range ws {
		ws[i] = *w
		if len(rs) > 1 {
			ws[i].log = w.log.With().Int("core", i).Logger()
		}
	}
	t := time.NewTicker(period)
	defer t.Stop()
	// One Stats and one closure for the life of the watch: a fresh
	// engine.Stats (about 3 KB) escaping to the heap every second was
	// most of what a running engine allocated, and its garbage kept the
	// heap's pages, and rmad's RSS, growing between two collections.
	var st engine.Stats
	read := func(c *engine.Core) { st = c.Stats() }
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for i, r := range rs {
			if err := r.Exec(read); err != nil {
				return // the loop stopped
			}
			ws[i].check(&st)
		}
	}
}
