package soak

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/portal"
	"github.com/onerma/onerma/wire"
)

// Report is what a run counted and whether every check held.
type Report struct {
	Planned   time.Duration // the load's duration asked for
	Duration  time.Duration // the load's duration
	Hosts     string
	LoadStart float64
	LoadEnd   float64
	Floors    Floors

	Raw          opCounts
	Exec         execCounts
	RekeyPosted  uint64
	RekeyDone    map[string]uint64
	Kills        int
	Flaps        int
	LocalRekeys  int
	RemoteRekeys int
	Reconnects   int // raw and executor applications redialled after their engine's restart
	OwnerRedials int // owners redialled (one per kill)
	KeyFetches   uint64

	Frames      uint64 // captured by the filter
	FramesRMA   [16]uint64
	NotRMA      uint64
	NotRMAWhy   map[string]uint64
	Nonces      uint64 // distinct
	Repeats     uint64
	CaptureDrop uint64
	NonceBytes  uint64
	Incarns     []string // per engine incarnation: frames and counter range

	RSS       []string // per engine incarnation: its memory
	RSSFailed []string // those that broke the ceiling or the trend bound
	// Leaks are the engines' counters that differ from what they must
	// be once the load has stopped.
	Leaks []string
	// Engines are some counters of each engine's last incarnation.
	Engines []string
	// Stalls are the stall windows (stalls.go), longest first, and the
	// loop time stalled in them in all.
	Stalls  []string
	Stalled time.Duration

	Errors   int
	ErrFirst []string
	Failures []string // floors and checks that did not hold
	OK       bool
}

func (r *Report) addErr(err error) {
	if err != nil {
		r.Errors++
		r.ErrFirst = append(r.ErrFirst, err.Error())
	}
}

// VerifiedOps are the ops whose data was checked: raw ops completed OK
// and verified, and the ops (one per 4 KB chunk) of executor transfers
// completed OK and verified byte for byte.
func (r *Report) VerifiedOps() (raw, chunks uint64) {
	for k := range nKinds {
		for s := range sizes {
			raw += r.Raw.Verified[k][s]
		}
	}
	return raw, r.Exec.Chunks
}

// collect gathers the applications' counters (call once the load has
// stopped).
func (s *soak) collect(r *Report) {
	for _, w := range s.raw {
		r.Raw.add(&w.St)
		r.Reconnects += w.Reconnects
		r.KeyFetches += w.ring.Fetches
	}
	for _, x := range s.exec {
		x.collect()
		r.Exec.add(&x.St)
		r.Reconnects += x.Reconnects
		r.KeyFetches += x.ring.Fetches
	}
	r.RekeyPosted = s.rekeys.posted.Load()
	r.RekeyDone = map[string]uint64{}
	for st := range s.rekeys.done {
		if n := s.rekeys.done[st].Load(); n > 0 {
			r.RekeyDone[portal.Status(st).String()] = n
		}
	}
	r.Kills, r.Flaps = int(s.kills.Load()), int(s.flaps.Load())
	for _, o := range s.owners {
		r.OwnerRedials += o.gen - 1
	}
	s.stallMu.Lock()
	stalls := append([]stallRecord(nil), s.stalls...)
	s.stallMu.Unlock()
	sort.Slice(stalls, func(a, b int) bool { return stalls[a].stall > stalls[b].stall })
	for _, st := range stalls {
		r.Stalls = append(r.Stalls, st.String())
		r.Stalled += st.stall
	}
	r.LocalRekeys, r.RemoteRekeys = int(s.rekeys.local.Load()), int(s.rekeys.remote.Load())
	// Engine counters before the applications close the portals: the
	// per-worker holdings add up.
	s.bed.mu.Lock()
	for _, t := range s.bed.tracks {
		v := t.judge(rssWarm(s.cfg.Duration))
		line := t.describe(v, rssWarm(s.cfg.Duration))
		r.RSS = append(r.RSS, line)
		if !v.Held {
			r.RSSFailed = append(r.RSSFailed, line)
		}
	}
	s.bed.mu.Unlock()
}

// rssWarm is an incarnation's warm-up in a run of d: an eighth of the
// run, at least 15 s and at most 4 minutes. An engine's memory first
// grows: its applications connect, its heap grows to its collector's
// goal (twice the live heap) and its pages to about 1.1 times that, and
// its preallocated tables are touched for the first time. The ceiling
// counts from the end of the warm-up; the trend is taken over the second
// half of the incarnation's life, later still.
func rssWarm(d time.Duration) time.Duration { return min(max(15*time.Second, d/8), 4*time.Minute) }

// describe says what the memory check found of t.
func (t *rssTrack) describe(v rssVerdict, warm time.Duration) string {
	if !v.Checked {
		return fmt.Sprintf("%s #%d: %d samples, none after its %v warm-up", t.Engine, t.Inc, len(t.Samples), warm)
	}
	ceiling := "held"
	if v.CeilingOver > 0 {
		ceiling = fmt.Sprintf("EXCEEDED by %d KB", v.CeilingOver>>10)
	}
	trend := "not judged: shorter than " + trendSpan.String()
	switch {
	case v.TrendJudged && (math.IsNaN(v.LiveSlope) || math.IsNaN(v.RestSlope)):
		trend = "FAILED: the engine's metrics page was not read"
	case v.TrendJudged && v.trendOver():
		trend = "EXCEEDED"
	case v.TrendJudged:
		trend = "held"
	}
	rest := func(s rssSample) float64 { r, _ := s.rest(); return r / (1 << 20) }
	return fmt.Sprintf("%s #%d: anon %.1f MB at %v, %.1f MB at %v, max %.1f MB (ceiling +%d MB %s); "+
		"Go live heap %.1f to %.1f MB, rest %.1f to %.1f MB, threads %d to %d; "+
		"%v..%v: live heap %+.2f MB/h, rest %+.2f MB/h (bound +%d MB/h %s), anon %+.2f MB/h",
		t.Engine, t.Inc, mb(v.Warm.Anon), v.Warm.At.Round(time.Second), mb(v.Last.Anon), v.Last.At.Round(time.Second), mb(v.MaxAnon),
		memCeiling>>20, ceiling, mb(v.Warm.GoLive), mb(v.Last.GoLive), rest(v.Warm), rest(v.Last), v.Warm.Threads, v.Last.Threads,
		v.From.Round(time.Second), v.To.Round(time.Second), v.LiveSlope/(1<<20), v.RestSlope/(1<<20), trendBound>>20, trend, v.Slope/(1<<20))
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// checkHoldings compares each engine's counters with what must be:
// nothing in flight, no window or pull context in use, and the slots and
// regions the applications hold (apps) or, once they have closed,
// exactly what the engine held when it started (its baseline, before
// any application): no portal, slot, region or tenant memory.
func (s *soak) checkHoldings(apps bool, r *Report) []string {
	var out []string
	for i := range engines {
		name := s.bed.Hosts[i].Name
		st, err := s.bed.stats(s.bed.socket(i))
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if apps {
			r.Engines = append(r.Engines, describeEngine(name, s.bed.inc[i], st))
		}
		base := s.bed.baseline[i]
		wantSlots, wantRegions, wantPortals := uint64(base.SlotsInUse), regions(base), len(base.Portals)
		if apps {
			wantSlots += uint64(s.raw[i].p.Slots() + s.exec[i].p.Slots())
			wantRegions += 5 // owner: data, exec; raw: local; executor: source, sink
			wantPortals += 3
		}
		bad := func(what string, got, want any) {
			out = append(out, fmt.Sprintf("%s (apps open %v): %s %v, want %v", name, apps, what, got, want))
		}
		if st.OpsInFlight != base.OpsInFlight {
			bad("ops_in_flight", st.OpsInFlight, base.OpsInFlight)
		}
		if st.WindowInUse != base.WindowInUse {
			bad("window_in_use", st.WindowInUse, base.WindowInUse)
		}
		if st.PullsInUse != base.PullsInUse {
			bad("pulls_in_use", st.PullsInUse, base.PullsInUse)
		}
		if st.SlotsInUse != wantSlots {
			bad("slots_in_use", st.SlotsInUse, wantSlots)
		}
		if got := regions(st); got != wantRegions {
			bad("regions", got, wantRegions)
		}
		if len(st.Portals) != wantPortals {
			bad("portals", len(st.Portals), wantPortals)
		}
		var done uint64
		for _, n := range st.Completed {
			done += n
		}
		if done+st.Orphaned != st.Posted {
			bad("completions + orphaned", done+st.Orphaned, st.Posted)
		}
		if !apps && tenantMemory(st) != tenantMemory(base) {
			bad("tenants' memory_bytes", tenantMemory(st), tenantMemory(base))
		}
	}
	return out
}

// describeEngine sums up an engine incarnation's counters: what it did,
// and how often its loop could not run (a starved engine times ops out).
func describeEngine(name string, inc int, st *ctlmsg.Stats) string {
	var done uint64
	for _, n := range st.Completed {
		done += n
	}
	d := fmt.Sprintf("%s #%d: %d ops posted, %d completed; %d requests served, %d pulls expired, %d requests expired, %d answered REMOTE_AUTHENTICATION_FAILURE; %d rekeys (%d remote)",
		name, inc, st.Posted, done, st.ReqServed, st.PullsExpired, st.ReqExpired, st.ReqAuthFailed, st.Rekeys, st.RemoteRekeys)
	if l := st.Loop; l != nil {
		d += fmt.Sprintf("; loop stalls %d (%.1f s in all)", l.Stalls, float64(l.StalledNs)/1e9)
	}
	return d
}

func regions(st *ctlmsg.Stats) uint64 {
	var n uint64
	for _, p := range st.Portals {
		n += uint64(p.Regions)
	}
	return n
}

func tenantMemory(st *ctlmsg.Stats) uint64 {
	var n uint64
	for _, t := range st.Tenants {
		n += t.MemoryBytes
	}
	return n
}

// collectCapture gathers what the capture saw (call after it stopped).
func (s *soak) collectCapture(r *Report) {
	c := s.cap
	r.Frames, r.FramesRMA, r.NotRMA, r.NotRMAWhy = c.Captured, c.ByType, c.NotRMA, c.lastErrs
	r.Nonces, r.Repeats, r.CaptureDrop, r.NonceBytes = s.nonces.distinct, s.nonces.repeats, c.Drops, s.nonces.Bytes()
	for _, sd := range s.nonces.sortedSenders() {
		name := addrOf(sd.addr).String()
		for i, h := range s.bed.Hosts {
			if addr32(h.Addr) == sd.addr {
				name = s.bed.Hosts[i].Name
			}
		}
		for k, in := range sd.incs {
			r.Incarns = append(r.Incarns, fmt.Sprintf("%s #%d: %d frames, counters %d..%d", name, k+1, in.Frames, in.Min, in.Max))
		}
	}
}

// judge decides OK: no error, every floor reached, every check held.
func (r *Report) judge(s *soak) {
	n, first := s.errs.snapshot()
	r.Errors += n
	r.ErrFirst = append(r.ErrFirst, first...)
	fail := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	if r.Errors > 0 {
		fail("%d errors", r.Errors)
	}
	raw, chunks := r.VerifiedOps()
	if raw+chunks < r.Floors.VerifiedOps {
		fail("verified ops %d (raw %d + executor chunks %d), floor %d", raw+chunks, raw, chunks, r.Floors.VerifiedOps)
	}
	for _, f := range []struct {
		what      string
		got, want int
	}{{"kills", r.Kills, r.Floors.Kills}, {"flaps", r.Flaps, r.Floors.Flaps},
		{"local rekeys", r.LocalRekeys, r.Floors.LocalRekeys}, {"remote rekeys", r.RemoteRekeys, r.Floors.RemoteRekeys}} {
		if f.got < f.want {
			fail("%s %d, floor %d", f.what, f.got, f.want)
		}
	}
	var posted, done uint64
	for k := range nKinds {
		for sz := range sizes {
			posted += r.Raw.Posted[k][sz]
			for st := range 64 {
				done += r.Raw.Done[k][sz][st]
			}
		}
	}
	if posted != done {
		fail("raw ops: %d posted, %d completed", posted, done)
	}
	var rk uint64
	for _, v := range r.RekeyDone {
		rk += v
	}
	if rk != r.RekeyPosted {
		fail("REKEY ops: %d posted, %d completed", r.RekeyPosted, rk)
	}
	if len(r.Leaks) > 0 {
		fail("%d engine counters not back to their baseline", len(r.Leaks))
	}
	for _, v := range r.RSSFailed {
		fail("memory: %s", v)
	}
	for _, p := range s.nonces.check() {
		fail("nonces: %s", p)
	}
	if r.CaptureDrop > 0 {
		fail("the capture lost %d frames: the nonce check did not see every frame", r.CaptureDrop)
	}
	if r.Nonces == 0 {
		fail("no OneRMA frame captured")
	}
	r.OK = len(r.Failures) == 0
}

// Print writes the report, ending with "soak: ok" only if OK.
func (r *Report) Print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("soak: %v of load on %s; load average %.2f at the start, %.2f at the end", r.Duration.Round(time.Second), r.Hosts, r.LoadStart, r.LoadEnd)
	p("raw ops (every engine to every other, %d slots each way):", laneSlots)
	p("  %-10s %5s %10s %10s %10s  %s", "kind", "size", "posted", "completed", "verified", "failures by status")
	for k := range nKinds {
		for s, size := range sizes {
			var done uint64
			var fails []string
			for st := range 64 {
				n := r.Raw.Done[k][s][st]
				done += n
				if n > 0 && st != int(portal.StatusOK) {
					fails = append(fails, fmt.Sprintf("%v %d", portal.Status(st), n))
				}
			}
			p("  %-10s %5d %10d %10d %10d  %s", kindNames[k], size, r.Raw.Posted[k][s], done, r.Raw.Verified[k][s], strings.Join(fails, ", "))
		}
	}
	p("  failures explained: by kills %d, flaps %d, rekeys %d, engine stalls %d", r.Raw.Explained[winKill], r.Raw.Explained[winFlap], r.Raw.Explained[winRekey], r.Raw.Explained[winStall])
	e := &r.Exec
	p("executor transfers (1-16 MB, portal.Executor, %d slots):", execSlots)
	p("  WRITE %d, verified %d (%.1f GB); READ back %d, verified %d (%.1f GB); ops posted %d (%d retries), verified chunks %d",
		e.Transfers[1], e.Verified[1], float64(e.Bytes[1])/1e9, e.Transfers[0], e.Verified[0], float64(e.Bytes[0])/1e9, e.Ops, e.Retries, e.Chunks)
	p("  failed: %s; explained by kills %d, flaps %d, rekeys %d, engine stalls %d", sortedCounts(e.Failed), e.Explained[winKill], e.Explained[winFlap], e.Explained[winRekey], e.Explained[winStall])
	raw, chunks := r.VerifiedOps()
	p("verified ops: %d (raw %d + executor chunks %d); floor %d", raw+chunks, raw, chunks, r.Floors.VerifiedOps)
	p("faults: kills %d (floor %d), flaps %d (floor %d); rekeys: local %d (floor %d), remote %d (floor %d; REKEY ops %d: %s)",
		r.Kills, r.Floors.Kills, r.Flaps, r.Floors.Flaps, r.LocalRekeys, r.Floors.LocalRekeys, r.RemoteRekeys, r.Floors.RemoteRekeys,
		r.RekeyPosted, sortedCounts(r.RekeyDone))
	p("reconnects: raw and executor applications redialled %d times on ENGINE_GONE, owners %d; %d K_d fetched over keyx", r.Reconnects, r.OwnerRedials, r.KeyFetches)
	p("engine stalls (a loop that did not run for %v or more, the host's doing): %d windows, %v stalled in them", stallFloor, len(r.Stalls), r.Stalled.Round(time.Millisecond))
	for i, s := range r.Stalls {
		if i == 10 {
			p("  (the longest 10 of them)")
			break
		}
		p("  %s", s)
	}
	var types []string
	for t, n := range r.FramesRMA {
		if n > 0 {
			types = append(types, fmt.Sprintf("%s %d", wireTypeName(wire.Type(t)), n))
		}
	}
	p("capture: %d frames, %d not OneRMA%s, %d lost; by type: %s", r.Frames, r.NotRMA, whyNot(r.NotRMAWhy), r.CaptureDrop, strings.Join(types, ", "))
	p("nonces: %d distinct, %d repeated (set of %.1f MB)", r.Nonces, r.Repeats, mb(r.NonceBytes))
	for _, s := range r.Incarns {
		p("  %s", s)
	}
	p("memory (anonymous, per incarnation after a %v warm-up: at most +%d MB; over the second half, if %v or longer, "+
		"the Go live heap and the rest beyond the Go heap's pages grow at most %d MB/h):", rssWarm(r.Planned), memCeiling>>20, trendSpan, trendBound>>20)
	for _, s := range r.RSS {
		p("  %s", s)
	}
	p("engines (their last incarnations):")
	for _, s := range r.Engines {
		p("  %s", s)
	}
	if len(r.Leaks) == 0 {
		p("engine counters: nothing in flight, no window, pull context, slot or region beyond the applications', and none once they closed")
	}
	for _, s := range r.Leaks {
		p("  leak: %s", s)
	}
	p("errors: %d", r.Errors)
	for _, s := range r.ErrFirst {
		p("  %s", s)
	}
	for _, s := range r.Failures {
		p("FAILED: %s", s)
	}
	if r.OK {
		p("soak: ok")
	} else {
		p("soak: FAILED")
	}
}

func sortedCounts(m map[string]uint64) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func whyNot(m map[string]uint64) string {
	if len(m) == 0 {
		return ""
	}
	return " (" + sortedCounts(m) + ")"
}

func wireTypeName(t wire.Type) string {
	names := map[wire.Type]string{wire.TypeReadReq: "read-req", wire.TypeReadResp: "read-resp", wire.TypeNack: "nack",
		wire.TypeError: "error", wire.TypeRekeyReq: "rekey-req", wire.TypeAck: "ack", wire.TypeWriteReq: "write-req",
		wire.TypePullReq: "pull", wire.TypeWriteData: "write-data"}
	if n, ok := names[t]; ok {
		return n
	}
	return fmt.Sprintf("type-%d", t)
}

// describe names the engines and their ports.
func (b *bed) describe() string {
	var out []string
	for _, h := range b.Hosts {
		out = append(out, fmt.Sprintf("%s %s %s", h.Name, h.Kind, h.Addr))
	}
	return "the routed testbed (" + strings.Join(out, ", ") + ")"
}
