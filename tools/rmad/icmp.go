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
	cfg       *Config
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
		Str("route", w.cfg.routeOf(dst)).Uint64("messages", n).
		Msgf("icmp fragmentation needed: dst %s path_mtu %d engine_mtu %d (set engine.routes mtu for this destination)",
			dst, st.FragNeededMTU, w.engineMTU)
}

// routeOf names, for the log, the route the engine's frames to dst take.
// The engine has no routes yet: every destination is on its link. Where
// routes are configured (engine.routes), this is the place to name the
// one whose prefix matches dst longest, with its MTU.
func (c *Config) routeOf(dst netip.Addr) string { return "on-link" }

// watchFragNeeded runs w every period on the core's counters, read on
// the poll loop's own goroutine (runner.Exec: the loop copies them
// between two iterations, so the data path takes no lock), until stop is
// closed or the loop has stopped.
func watchFragNeeded(r *runner.Runner, w *fragWatch, period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var st engine.Stats
		if err := r.Exec(func(c *engine.Core) { st = c.Stats() }); err != nil {
			return // the loop stopped
		}
		w.check(&st)
	}
}
