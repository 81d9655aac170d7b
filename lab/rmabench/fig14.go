package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// Figure 14 of the 1RMA paper (§7.3): a client probes a server's region
// with READs while the server rotates the region's key, under three
// designs. Here two engines run over memif (spinning on CPU 0 and 1 and
// giving the CPU to any other runnable thread when idle: poll mode yield,
// TIMEOUT 20 ms, as the kv setup's memif engines, whose comment says
// why), the owner's portal holds a region on engine B, and a
// client on engine A reads 64 B of it back to back, one READ in flight;
// every fig14Every the key is rotated, fig14Rotations times per design
// (setup fig14-VARIANT, system onerma):
//
//   - driver: the owner's portal.Rekey through rmad's control socket. The
//     client holds the next K_d, handed out before the rotation, and
//     takes it at its first REMOTE_AUTHENTICATION_FAILURE.
//   - rekey-op: a REKEY op from engine A, posted by a control-plane
//     portal that holds the region's REKEY K_d and chooses the new K_r;
//     the client switches as above.
//   - keyx: the driver's rekey, inside the owner's keyx.Server.Update;
//     the client learns the new K_d only after its first failure, by a
//     keyx fetch over a fresh TLS 1.3 connection to the owner (what
//     RDMA's reconnection is to the paper: out-of-band, a handshake).
//
// Unavailability, per rotation: of the probes in the client's order, F
// is the first that failed (REMOTE_AUTHENTICATION_FAILURE) under the old
// key (after one had succeeded under it), N the first that completed OK
// under the new one. The row of test
// "unavail" reports post(N) - post(F): how long the client had no READ
// that would succeed, N's own round trip left out, so a client that
// switched at once shows F's round trip (the fast failure) and nothing
// more; "unavail_raw" reports done(N) - post(F), what a READ posted with
// F waited in all. Both as p50, p99 and, in the p99.9 column, the max
// over the rotations (Ops: rotations measured, Errors: rotations
// without an F or an N). "probe_lat" is the probes' own round trip (OK
// probes), "rekey_call" the owner's Rekey call (driver, keyx; on these
// engines: the fig14-rekey-call rows have it in backoff),
// "rekey_op" the REKEY op's latency at the control plane (the engine's
// total_delay in eng_*), "keyx_fetch" the client's fetch. The "unavail"
// row carries the probes around the rotation whose unavailability is
// the median (Timeline), which rmafigures -fig14 draws.
//
// The paper's "< 1 µs" for the Rekey op is the time in which an op
// with neither key succeeds. The fig14-driver-neither and
// fig14-rekey-op-neither rows measure it: the client keeps fig14Pairs
// pairs of READs in flight, each pair one READ under the old K_d and
// one under the new, posted together (one ring flush: the engine takes
// both in one poll), and the rotations go on as above. Requests leave
// engine A in order and engine B serves them in order, so the old key
// last worked, and the new one first, at B's serving of the last OK
// request under the old key and the first OK one under the new: the
// window when neither key worked lies between, and its length is at most
// their departures' distance, departure = post + issue_delay (the
// engine's, command seen -> entered service; the command's pickup by the
// spinning engine, an iteration or a yield, is left out). Per rotation
// that bound is the row's sample (test "neither": p50, p99, the max in
// p99.9); Errors counts pairs in which neither READ succeeded. The bound
// is only as fine as the requests are dense at the switch: the pairs go
// out in bursts a round trip apart, so it is mostly the gap between two
// bursts. A pair whose two READs both succeeded saw the key change
// between them, one request apart (the note counts them, with their
// departures' distance on engine A's clock, which it reads once per
// iteration: 0 is one burst).
//
// fig14-rekey-call: the driver path's own latency, portal.Rekey through
// rmad's control socket back to back, on engines of one and two polling
// cores (Cores) in backoff with GOMAXPROCS 4, as engine/ctl's
// BenchmarkRegionControl measures it in process.

var (
	fig14Rotations = 50                    // -fig14-rotations
	fig14Every     = 50 * time.Millisecond // -fig14-every
	fig14Calls     = 2000                  // -fig14-calls
)

const (
	fig14Size  = 64
	fig14Pairs = 16 // pairs of READs in flight in the neither rows
	// fig14Before and fig14After bound a Timeline around its rotation:
	// from before F's post to after N's completion.
	fig14Before = time.Millisecond
	fig14After  = time.Millisecond
)

var fig14IPA, fig14IPB = netip.MustParseAddr("10.99.14.1"), netip.MustParseAddr("10.99.14.2")

// fig14Run runs the fig14 setup: the three designs and the neither rows
// on spinning engines, then the driver path's latency in backoff.
func fig14Run(rmad, dir string, emit emitFunc) error {
	if err := fig14Rotate(rmad, dir, emit); err != nil {
		return err
	}
	for _, cores := range []int{1, 2} {
		if err := fig14RekeyCalls(rmad, dir, cores, emit); err != nil {
			return err
		}
	}
	r, err := socketFloor(fig14Calls)
	if err != nil {
		return err
	}
	emit(r)
	return nil
}

// fig14Pair starts engines on a memif wire: spinning on CPU 0 and 1 in
// poll mode yield, TIMEOUT 20 ms (as the kv setup's memif engines), or in
// backoff with cores polling cores and GOMAXPROCS 4.
func fig14Pair(rmad, dir string, spin bool, cores int) (a, b *testbed.Engine, err error) {
	oa, ob := testbed.MemifPair(rmad, dir, "bench-fa", "bench-fb", fig14IPA.String(), fig14IPB.String())
	extra := []string{"-log-level", "warn"}
	if spin {
		oa.Mode, oa.CPU = "yield", 0
		ob.Mode, ob.CPU = "yield", 1
		extra = append(extra, "-timeout", "20ms")
	} else {
		oa.Mode, ob.Mode = "backoff", "backoff"
		extra = append(extra, "-cores", fmt.Sprint(cores))
		oa.Env = []string{"GOMAXPROCS=4"}
		ob.Env = oa.Env
	}
	oa.Extra, ob.Extra = extra, extra
	if a, err = testbed.Start(oa); err != nil {
		return nil, nil, err
	}
	if b, err = testbed.Start(ob); err != nil {
		a.Stop(10 * time.Second)
		return nil, nil, err
	}
	return a, b, nil
}

// fig14Bed is the client, the control plane and the owner, each a portal
// of this process.
type fig14Bed struct {
	cli, cp, own *portal.Portal
	sink, keyBuf *portal.Region
	slots        []portal.SlotID // the client's
	cslot        portal.SlotID   // the control plane's
	epoch        time.Time
}

func (b *fig14Bed) now() int64 { return int64(time.Since(b.epoch)) }

func (b *fig14Bed) close() {
	for _, p := range []*portal.Portal{b.cli, b.cp, b.own} {
		if p != nil {
			p.Close()
		}
	}
}

func newFig14Bed(sockA, sockB string) (*fig14Bed, error) {
	b := &fig14Bed{epoch: time.Now()}
	var err error
	// The client sleeps on its completion doorbell at once, as the kv
	// setup's memif client: it shares engine A's CPU.
	if b.cli, err = portal.DialOptions(sockA, "fig14-client", portal.Options{WaitSpins: -1}); err != nil {
		return nil, err
	}
	fail := func(e error) (*fig14Bed, error) { b.close(); return nil, e }
	if b.cp, err = portal.DialOptions(sockA, "fig14-control", portal.Options{WaitSpins: -1}); err != nil {
		return fail(err)
	}
	if b.own, err = portal.Dial(sockB, "fig14-owner"); err != nil {
		return fail(err)
	}
	if b.slots, err = b.cli.AllocSlots(2 * fig14Pairs); err != nil {
		return fail(err)
	}
	if b.sink, err = b.cli.RegisterRegion(uint64(2*fig14Pairs*fig14Size), abi.PermLocalWrite); err != nil {
		return fail(err)
	}
	cs, err := b.cp.AllocSlots(1)
	if err != nil {
		return fail(err)
	}
	b.cslot = cs[0]
	if b.keyBuf, err = b.cp.RegisterRegion(4096, abi.PermLocalRead); err != nil {
		return fail(err)
	}
	return b, nil
}

// fig14Keys are a variant's region keys, one per generation (rotation i
// moves the region from generation i to i+1), and the client's K_d of
// each.
type fig14Keys struct {
	kr, kd []aesni.Key
}

func newFig14Keys(n int, cli portal.Identity) (*fig14Keys, error) {
	k := &fig14Keys{kr: make([]aesni.Key, n), kd: make([]aesni.Key, n)}
	for i := range k.kr {
		for k.kr[i] == (aesni.Key{}) {
			if _, err := rand.Read(k.kr[i][:]); err != nil {
				return nil, err
			}
		}
		k.kd[i] = aesni.DeriveKey(k.kr[i], cli.Addr.As4(), cli.PID, uint8(abi.OpRead))
	}
	return k, nil
}

// fig14Probe is one READ of the client.
type fig14Probe struct {
	post, done int64 // ns since the bed's epoch: before posting, after its completion was seen
	status     abi.Status
	gen        int32 // the key generation it was posted with
}

// fig14Variant is one design: how the region's key is rotated, and how
// the client gets the key of a generation.
type fig14Variant struct {
	name string
	// rotate moves the region from generation i to i+1.
	rotate func(i int) error
	// next is the client's K_d of generation g, asked after a failure
	// under g-1 (ok false: not to be had yet, keep the old one).
	next func(g int) (aesni.Key, bool, error)
	// calls are the rotations' latencies (rekey_call or rekey_op), eng
	// the REKEY ops' total_delay, fetches the keyx fetches'.
	calls, eng, fetches []int64
	retries             int // REKEY ops posted again (TIMEOUT, NACK)
}

// fig14Rotate runs the three designs and the neither rows on spinning
// engines.
func fig14Rotate(rmad, dir string, emit emitFunc) error {
	a, b, err := fig14Pair(rmad, dir, true, 1)
	if err != nil {
		return err
	}
	defer b.Stop(10 * time.Second)
	defer a.Stop(10 * time.Second)
	bed, err := newFig14Bed(a.Socket, b.Socket)
	if err != nil {
		return err
	}
	defer bed.close()
	for _, v := range []string{"driver", "rekey-op", "keyx"} {
		if err := bed.run(v, false, emit); err != nil {
			return fmt.Errorf("fig14-%s: %w", v, err)
		}
	}
	for _, v := range []string{"driver", "rekey-op"} {
		if err := bed.run(v, true, emit); err != nil {
			return fmt.Errorf("fig14-%s-neither: %w", v, err)
		}
	}
	return nil
}

// run measures one design: single probes, or pairs of them (neither).
func (b *fig14Bed) run(name string, neither bool, emit emitFunc) error {
	keys, err := newFig14Keys(fig14Rotations+2, b.cli.Identity())
	if err != nil {
		return err
	}
	r, err := b.own.RegisterRegionKey(4096, abi.PermRemoteRead|abi.PermRemoteRekey, keys.kr[0])
	if err != nil {
		return err
	}
	defer b.own.DeregisterRegion(r)
	for i := range r.Bytes() {
		r.Bytes()[i] = byte(i * 7)
	}
	v, cleanup, err := b.variant(name, r, keys)
	if err != nil {
		return err
	}
	defer cleanup()
	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		cerr  error
		probe []fig14Probe
		dual  *fig14Dual
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if neither {
			dual, cerr = b.pairs(r, keys, &stop)
		} else {
			probe, cerr = b.probes(r, keys, v, &stop)
		}
	}()
	start := time.Now()
	var rerr error
	for i := range fig14Rotations {
		time.Sleep(fig14Every)
		if rerr = v.rotate(i); rerr != nil {
			break
		}
	}
	time.Sleep(fig14Every / 2) // the client catches up with the last one
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(rerr, cerr); err != nil {
		return err
	}
	setup := "fig14-" + name
	if neither {
		emit(fig14NeitherRow(setup+"-neither", dual, elapsed))
		return nil
	}
	gaps, missing := fig14Gaps(probe, fig14Rotations)
	for _, row := range fig14Rows(setup, probe, gaps, missing, elapsed) {
		emit(row)
	}
	switch name {
	case "rekey-op":
		row := fig14LatRow(setup, "rekey_op", v.calls, fmt.Sprintf("the REKEY op from the control plane's portal on engine A to the region on engine B, post to completion seen; eng_*: its total_delay (command seen -> completion); errors: REKEY ops that timed out or were refused and were posted again (%d)", v.retries))
		row.Errors = uint64(v.retries)
		if e := fig14Quantiles(v.eng); e != nil {
			row.EngP50us, row.EngP99us, row.EngMaxUs = benchrow.F(e[0]), benchrow.F(e[1]), benchrow.F(e[2])
		}
		emit(row)
	default:
		emit(fig14LatRow(setup, "rekey_call", v.calls, "the owner's portal.Rekey through rmad's control socket, engine B in poll mode yield (fig14-rekey-call: in backoff)"))
	}
	if name == "keyx" {
		emit(fig14LatRow(setup, "keyx_fetch", v.fetches, "the client's keyx fetch of the new K_d after its first failure: a fresh TLS 1.3 connection to the owner, handshake and request"))
	}
	return nil
}

// variant sets up design name on region r.
func (b *fig14Bed) variant(name string, r *portal.Region, keys *fig14Keys) (*fig14Variant, func(), error) {
	v := &fig14Variant{name: name}
	var handed atomic.Int32 // the newest generation whose K_d the client has been given
	pre := func(g int) (aesni.Key, bool, error) {
		if int(handed.Load()) < g {
			return aesni.Key{}, false, nil
		}
		return keys.kd[g], true, nil
	}
	nop := func() {}
	switch name {
	case "driver":
		v.next = pre
		v.rotate = func(i int) error {
			handed.Store(int32(i + 1))
			t0 := b.now()
			err := b.own.Rekey(r, keys.kr[i+1])
			v.calls = append(v.calls, b.now()-t0)
			return err
		}
		return v, nop, nil
	case "rekey-op":
		v.next = pre
		cid := b.cp.Identity()
		cpl := make([]abi.Completion, 1)
		v.rotate = func(i int) error {
			handed.Store(int32(i + 1))
			copy(b.keyBuf.Bytes(), keys.kr[i+1][:])
			// One that timed out or was refused for room is posted
			// again; one that timed out may have installed its key all
			// the same (its acknowledgment late), and then the next
			// fails authentication under the old key: done.
			timedOut := false
			for try := 0; ; try++ {
				t0 := b.now()
				err := b.cp.Submit(&portal.Op{
					Type: portal.OpRekey, Slot: b.cslot, Cookie: uint64(i),
					Remote: fig14IPB, RemoteRegion: r.ID(), Local: b.keyBuf,
					Key: aesni.DeriveKey(keys.kr[i], cid.Addr.As4(), cid.PID, uint8(abi.OpRekey)),
				})
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err = b.cp.Wait(ctx, cpl)
				cancel()
				if err != nil {
					return fmt.Errorf("REKEY op %d: %w", i, err)
				}
				c := cpl[0]
				if (c.Status == abi.StatusTimeout || c.Status == abi.StatusNack) && try < 3 {
					v.retries++
					timedOut = timedOut || c.Status == abi.StatusTimeout
					continue
				}
				if c.Status == abi.StatusRemoteAuthFailure && timedOut {
					return nil
				}
				if c.Status != abi.StatusOK || c.Op != abi.OpRekey {
					return fmt.Errorf("REKEY op %d: %v", i, c.Status)
				}
				v.calls = append(v.calls, b.now()-t0)
				v.eng = append(v.eng, int64(c.TotalDelayNs))
				return nil
			}
		}
		return v, nop, nil
	case "keyx":
		srvCreds, cliCreds, err := keyx.NewPair("fig14", 0)
		if err != nil {
			return nil, nil, err
		}
		srv, err := keyx.NewServer(keyx.Config{Credentials: srvCreds, Owner: b.own.Identity().Addr,
			Permits: []keyx.Permit{{Client: cliCreds.Name(), Addrs: []netip.Prefix{keyx.AnyAddress}}}})
		if err != nil {
			return nil, nil, err
		}
		srv.Add(r)
		addr, err := srv.Start("127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		req := keyx.RequestFor(b.cli.Identity(), r.ID(), portal.OpRead)
		v.next = func(int) (aesni.Key, bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t0 := b.now()
			g, err := keyx.Fetch(ctx, addr.String(), cliCreds, req)
			v.fetches = append(v.fetches, b.now()-t0)
			return g.Key, err == nil, err
		}
		v.rotate = func(i int) error {
			t0 := b.now()
			err := srv.Update(func() error { return b.own.Rekey(r, keys.kr[i+1]) })
			v.calls = append(v.calls, b.now()-t0)
			return err
		}
		return v, func() { srv.Close() }, nil
	}
	return nil, nil, fmt.Errorf("no design %q", name)
}

// probes reads r back to back, one READ in flight, until stop.
func (b *fig14Bed) probes(r *portal.Region, keys *fig14Keys, v *fig14Variant, stop *atomic.Bool) ([]fig14Probe, error) {
	out := make([]fig14Probe, 0, 1<<17)
	cpl := make([]abi.Completion, 1)
	g, key := 0, keys.kd[0]
	for n := uint64(0); !stop.Load(); n++ {
		t0 := b.now()
		if err := b.cli.Submit(&portal.Op{
			Type: portal.OpRead, Slot: b.slots[0], Cookie: n,
			Remote: fig14IPB, RemoteRegion: r.ID(), Key: key,
			Local: b.sink, Length: fig14Size,
		}); err != nil {
			return out, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := b.cli.Wait(ctx, cpl)
		cancel()
		if err != nil {
			return out, fmt.Errorf("probe %d: %w", n, err)
		}
		c := cpl[0]
		out = append(out, fig14Probe{post: t0, done: b.now(), status: c.Status, gen: int32(g)})
		if c.Status == abi.StatusRemoteAuthFailure {
			k, ok, err := v.next(g + 1)
			if err != nil {
				return out, err
			}
			if ok {
				g, key = g+1, k
			}
		}
	}
	return out, nil
}

// fig14Gap is one rotation as the client saw it: probes[first] is F,
// probes[ok] is N.
type fig14Gap struct {
	first, ok int
}

func (g fig14Gap) net(p []fig14Probe) int64 { return p[g.ok].post - p[g.first].post }
func (g fig14Gap) raw(p []fig14Probe) int64 { return p[g.ok].done - p[g.first].post }

// fig14Gaps finds each rotation's F and N among the probes: rotation i
// moves the key from generation i to i+1; F is the first probe that
// failed under generation i after one had succeeded under it (a new
// key tried before its rotation took effect fails too: that is not its
// end), N the first that succeeded under i+1. missing counts the
// rotations in which the client saw no such failure or no success
// after it.
func fig14Gaps(p []fig14Probe, rotations int) (gaps []fig14Gap, missing int) {
	firstOK := make([]int, rotations+1) // by generation
	first := make([]int, rotations)
	for i := range firstOK {
		firstOK[i] = -1
	}
	for i := range first {
		first[i] = -1
	}
	for k, x := range p {
		g := int(x.gen)
		switch {
		case g > rotations:
		case x.status == abi.StatusOK && firstOK[g] < 0:
			firstOK[g] = k
		case x.status == abi.StatusRemoteAuthFailure && g < rotations && first[g] < 0 && firstOK[g] >= 0:
			first[g] = k
		}
	}
	for i := range rotations {
		if first[i] < 0 || firstOK[i+1] < first[i] {
			missing++
			continue
		}
		gaps = append(gaps, fig14Gap{first: first[i], ok: firstOK[i+1]})
	}
	return gaps, missing
}

// fig14Quantiles returns the p50, p99 and max of ns in µs (nil when
// empty).
func fig14Quantiles(ns []int64) []float64 {
	if len(ns) == 0 {
		return nil
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	us := func(v int64) float64 { return float64(v) / 1e3 }
	return []float64{us(s[len(s)/2]), us(s[len(s)*99/100]), us(s[len(s)-1])}
}

// fig14LatRow is a row of latencies ns (p50, p99, the max in p99.9).
func fig14LatRow(setup, test string, ns []int64, note string) Row {
	r := Row{System: "onerma", Setup: setup, Test: test, Size: fig14Size, Outstanding: 1, Cores: 1, Ops: uint64(len(ns)), Note: note}
	if q := fig14Quantiles(ns); q != nil {
		r.P50us, r.P99us, r.P999us = q[0], benchrow.F(q[1]), benchrow.F(q[2])
	}
	return r
}

// fig14Rows are a design's rows from its probes: unavail (with the
// Timeline of the median rotation), unavail_raw and probe_lat.
func fig14Rows(setup string, p []fig14Probe, gaps []fig14Gap, missing int, elapsed time.Duration) []Row {
	var net, raw, lat []int64
	other := 0
	for _, g := range gaps {
		net, raw = append(net, g.net(p)), append(raw, g.raw(p))
	}
	for _, x := range p {
		switch x.status {
		case abi.StatusOK:
			lat = append(lat, x.done-x.post)
		case abi.StatusRemoteAuthFailure:
		default:
			other++
		}
	}
	rate := float64(len(p)) / elapsed.Seconds()
	rotated := fmt.Sprintf("%d rotations %v apart, %d probes at %.0f/s", len(gaps)+missing, fig14Every, len(p), rate)
	u := fig14LatRow(setup, "unavail", net, "unavailability per rotation: post of the first READ that failed under the old key to the post of the first that then succeeded under the new one (its own round trip left out); p99.9 column: the max; "+rotated)
	u.Errors, u.OpsPerSec, u.Seconds = uint64(missing), rate, elapsed.Seconds()
	u.Timeline = fig14Timeline(p, gaps)
	w := fig14LatRow(setup, "unavail_raw", raw, "as unavail, to the completion of the first READ OK under the new key (what a READ posted with the first failure waited); p99.9 column: the max; "+rotated)
	w.Errors, w.OpsPerSec, w.Seconds = uint64(missing), rate, elapsed.Seconds()
	l := fig14LatRow(setup, "probe_lat", lat, fmt.Sprintf("the probes' round trip, OK ones; errors: probes ending neither OK nor REMOTE_AUTHENTICATION_FAILURE (%d)", other))
	l.Errors, l.OpsPerSec, l.Seconds = uint64(other), rate, elapsed.Seconds()
	return []Row{u, w, l}
}

// fig14Timeline is the probes around the rotation whose unavailability
// is the median, times from that rotation's F.
func fig14Timeline(p []fig14Probe, gaps []fig14Gap) []benchrow.Probe {
	if len(gaps) == 0 {
		return nil
	}
	byNet := slices.Clone(gaps)
	slices.SortStableFunc(byNet, func(a, b fig14Gap) int { return int(a.net(p) - b.net(p)) })
	g := byNet[len(byNet)/2]
	f, n := p[g.first], p[g.ok]
	from, to := f.post-int64(fig14Before), n.done+int64(fig14After)
	old := f.gen
	var out []benchrow.Probe
	for _, x := range p {
		if x.post < from || x.post > to {
			continue
		}
		out = append(out, benchrow.Probe{AtUs: float64(x.post-f.post) / 1e3, LatUs: float64(x.done-x.post) / 1e3,
			Status: x.status.String(), New: x.gen != old})
	}
	return out
}

// fig14Dual is what the neither rows accumulate, per key generation k:
// the departures of the last READ that succeeded with k and of the first
// (ns since the bed's epoch), and per rotation the pairs neither of whose
// READs succeeded.
type fig14Dual struct {
	lastOK, firstOK []int64
	neither         []int
	ops, other      int
	// both counts the pairs both of whose READs succeeded: the key
	// changed between the two (the old one's READ left first), bothNs
	// the widest distance between their departures.
	both   int
	bothNs int64
}

func newFig14Dual(gens int) *fig14Dual {
	d := &fig14Dual{lastOK: make([]int64, gens), firstOK: make([]int64, gens), neither: make([]int, gens)}
	for k := range d.firstOK {
		d.lastOK[k], d.firstOK[k] = -1, -1
	}
	return d
}

// ok notes a READ under generation k that left engine A at dep and
// succeeded.
func (d *fig14Dual) ok(k int, dep int64) {
	if k >= len(d.lastOK) {
		return
	}
	d.lastOK[k] = max(d.lastOK[k], dep)
	if d.firstOK[k] < 0 || dep < d.firstOK[k] {
		d.firstOK[k] = dep
	}
}

// bounds are, per rotation i (generation i to i+1) that has both, the
// distance from the last OK departure under i to the first under i+1
// (at least 0), and how many rotations had one or none.
func (d *fig14Dual) bounds(rotations int) (ns []int64, missing int) {
	for i := range rotations {
		if i+1 >= len(d.firstOK) || d.lastOK[i] < 0 || d.firstOK[i+1] < 0 {
			missing++
			continue
		}
		ns = append(ns, max(d.firstOK[i+1]-d.lastOK[i], 0))
	}
	return ns, missing
}

// fig14NeitherRow is a neither row from d.
func fig14NeitherRow(setup string, d *fig14Dual, elapsed time.Duration) Row {
	ns, missing := d.bounds(fig14Rotations)
	neither := 0
	for _, n := range d.neither {
		neither += n
	}
	rate := float64(d.ops) / elapsed.Seconds()
	r := fig14LatRow(setup, "neither", ns, fmt.Sprintf("window in which neither key worked, per rotation: at most the distance between the departures (post + engine issue_delay) of the last READ OK under the old key and the first OK under the new, %d pairs (old, new) in flight (the pairs leave in bursts, so the distance is mostly the gap between two bursts); p99.9 column: the max; errors: pairs with neither READ OK (%d); pairs with both OK, the key changed between their READs (%d, departures at most %.2f us apart on engine A's clock, read once per iteration); %d rotations without both; %d READs at %.0f/s, %d ending neither OK nor REMOTE_AUTHENTICATION_FAILURE",
		fig14Pairs, neither, d.both, float64(d.bothNs)/1e3, missing, d.ops, rate, d.other))
	r.Outstanding = 2 * fig14Pairs
	r.Errors, r.OpsPerSec, r.Seconds = uint64(neither), rate, elapsed.Seconds()
	return r
}

// pairs keeps fig14Pairs pairs of READs of r in flight until stop, each
// pair one under the current generation's K_d and one under the next's,
// and moves to the next generation at its first success.
func (b *fig14Bed) pairs(r *portal.Region, keys *fig14Keys, stop *atomic.Bool) (*fig14Dual, error) {
	d := newFig14Dual(len(keys.kd))
	type pair struct {
		gen    int
		post   int64
		left   int      // READs in flight
		ok     [2]bool  // the old key's READ, the new key's
		dep    [2]int64 // their departures
		failed int      // REMOTE_AUTHENTICATION_FAILUREs
	}
	ps := make([]pair, fig14Pairs)
	g := 0
	post := func(j int) error {
		p := &ps[j]
		*p = pair{gen: g, post: b.now(), left: 2}
		for h := range 2 {
			k := min(g+h, len(keys.kd)-1)
			s := 2*j + h
			if err := b.cli.Post(&portal.Op{
				Type: portal.OpRead, Slot: b.slots[s], Cookie: uint64(s),
				Remote: fig14IPB, RemoteRegion: r.ID(), Key: keys.kd[k],
				Local: b.sink, LocalOffset: uint64(s * fig14Size), Length: fig14Size,
			}); err != nil {
				return err
			}
		}
		return nil
	}
	for j := range ps {
		if err := post(j); err != nil {
			return d, err
		}
	}
	b.cli.Flush()
	cpl := make([]abi.Completion, 2*fig14Pairs)
	inflight := 2 * fig14Pairs
	for inflight > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n, err := b.cli.Wait(ctx, cpl)
		cancel()
		if err != nil {
			return d, fmt.Errorf("after %d READs: %w", d.ops, err)
		}
		var again []int
		for _, c := range cpl[:n] {
			inflight--
			d.ops++
			s := int(c.Cookie)
			j, h := s/2, s%2
			p := &ps[j]
			p.left--
			p.dep[h] = p.post + int64(c.IssueDelayNs)
			switch c.Status {
			case abi.StatusOK:
				p.ok[h] = true
				d.ok(p.gen+h, p.dep[h])
				if h == 1 && p.gen == g {
					g++ // the new key works: pairs go on with it and the one after
				}
			case abi.StatusRemoteAuthFailure:
				p.failed++
			default:
				d.other++
			}
			if p.left == 0 {
				switch {
				case p.failed == 2 && p.gen < len(d.neither):
					d.neither[p.gen]++
				case p.ok[0] && p.ok[1]:
					d.both++
					d.bothNs = max(d.bothNs, p.dep[1]-p.dep[0])
				}
				if !stop.Load() {
					again = append(again, j)
				}
			}
		}
		for _, j := range again {
			if err := post(j); err != nil {
				return d, err
			}
			inflight += 2
		}
		b.cli.Flush()
	}
	return d, nil
}

// fig14RekeyCalls times fig14Calls Rekeys of a region on engine B, both
// engines in backoff with cores polling cores and GOMAXPROCS 4.
func fig14RekeyCalls(rmad, dir string, cores int, emit emitFunc) error {
	a, b, err := fig14Pair(rmad, dir, false, cores)
	if err != nil {
		return err
	}
	defer b.Stop(10 * time.Second)
	defer a.Stop(10 * time.Second)
	own, err := portal.Dial(b.Socket, "fig14-owner")
	if err != nil {
		return err
	}
	defer own.Close()
	r, err := own.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		return err
	}
	k := aesni.Key{0xf1, 0x4}
	ns := make([]int64, 0, fig14Calls)
	start := time.Now()
	for i := range fig14Calls {
		k[2], k[3] = byte(i), byte(i>>8)
		t0 := time.Now()
		if err := own.Rekey(r, k); err != nil {
			return err
		}
		ns = append(ns, int64(time.Since(t0)))
	}
	elapsed := time.Since(start)
	row := fig14LatRow("fig14-rekey-call", "rekey_call", ns, fmt.Sprintf("the driver path: portal.Rekey through rmad's control socket, back to back; the engines' %d polling cores in backoff, GOMAXPROCS 4; p99.9 column: the max", cores))
	row.Cores, row.Seconds, row.OpsPerSec = cores, elapsed.Seconds(), float64(len(ns))/elapsed.Seconds()
	emit(row)
	return nil
}

// fig14CallGoal is issue 32's target for the driver path: a rekey
// through the control socket, one engine core in backoff (µs, p50).
const fig14CallGoal = 30

// fig14CallMetric is the headline's driver path: fig14-rekey-call's p50
// on an engine of one core, goal at most fig14CallGoal.
func fig14CallMetric(rows []Row) (measure, bool) {
	for _, r := range rows {
		if r.Setup == "fig14-rekey-call" && r.Test == "rekey_call" && r.Cores == 1 && r.P50us > 0 {
			v := fmtUs(r.P50us)
			if r.P99us != nil {
				v += fmt.Sprintf(" (p99 %s)", fmtUs(*r.P99us))
			}
			if i := slices.IndexFunc(rows, func(f Row) bool { return f.Setup == "fig14-socket-floor" && f.P50us > 0 }); i >= 0 {
				v += fmt.Sprintf("; a bare socket round trip between two processes %s", fmtUs(rows[i].P50us))
			}
			return measure{v, fmt.Sprintf("≤ %d µs", fig14CallGoal), judge(r.P50us <= fig14CallGoal)}, true
		}
	}
	return measure{}, false
}

// fig14UnavailMetric is the headline's Figure 14: each design's p50
// unavailability, beside the paper's.
func fig14UnavailMetric(rows []Row) (measure, bool) {
	var v []string
	for _, s := range []string{"fig14-driver", "fig14-rekey-op", "fig14-keyx"} {
		i := slices.IndexFunc(rows, func(r Row) bool { return r.Setup == s && r.Test == "unavail" && r.Ops > 0 })
		if i < 0 {
			return measure{}, false
		}
		v = append(v, fmtUs(rows[i].P50us))
	}
	return measure{value: strings.Join(v, " / "), goal: "paper: ~27 µs / < 1 µs (neither key) / > 2 ms (RDMA reconnection)"}, true
}
