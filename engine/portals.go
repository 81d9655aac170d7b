package engine

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry"
)

// portal is one application's attachment to the core: its rings, its
// class, its slot count and the completions it is owed.
type portal struct {
	used     bool
	dead     bool // rings corrupted: reclaimed, entry kept until ClosePortal
	class    abi.Class
	cmd      *abi.Consumer
	cpl      *abi.Producer
	maxSlots int
	slots    int            // slots it holds
	pending  int            // ops whose completion it is still owed
	pid      uint32         // stamped on its requests
	tenant   uint16         // PortalSpec.Tenant: its regions' owner
	weight   uint16         // PortalSpec.Weight, at least 1
	dirty    bool           // completions committed, not yet published
	arm      *atomic.Uint32 // doorbell arm word in shared memory (nil: no doorbell)
	bell     Doorbell
	// The doorbell's moderation (Core.SetModeration): an armed doorbell
	// rings once modCount completions are unread, or modPeriod ns after
	// the first publication it was not rung for, like a NIC's
	// completion-queue moderation; and never before quiet, its last ring
	// plus the core's gap (Config.DoorbellGap). bellDue is when a ring
	// held back is due (0: none). modCount <= 1 and no gap: it rings at
	// every publication.
	modCount  uint32
	modPeriod int64
	bellDue   int64
	quiet     int64
	// The summary doorbell: flag is the segment's summary flag word (nil:
	// the portal never rings); rings is set once a scan has seen it on,
	// after which Poll looks at the command ring only when the portal's
	// bit is rung, when again is set, and in scans. again: the last look
	// left commands in the ring (its burst was used up, or completion
	// room ran out).
	flag  *atomic.Uint32
	rings bool
	again bool
	// src is the op source this entry stands for (source.go; nil: an
	// application's portal): it has no rings, posts its ops itself and
	// takes its completions.
	src OpSource
}

// portalTable holds the open portals and writes their completions: every
// completion the core produces, for ops that ran and for commands refused
// before they got a slot, goes through complete, which also hands its
// delays to the telemetry batch; publish makes them visible and rings the
// doorbells of applications waiting for them.
type portalTable struct {
	tenants int // Config.Tenants: PortalSpec.Tenant is below it
	p       []portal
	live    []PortalID // open portals, in opening order: Poll drains these
	// rr rotates the portal Poll drains first: a fixed order would queue
	// one application's commands ahead of another's in every poll, so its
	// requests would reach a busy server first and the other's would be
	// the ones NACKed.
	rr    uint32
	dirty []PortalID // portals with unpublished completions
	// bells lists the portals whose ring is held back (bellDue set: by
	// moderation or the gap), and nextDue is the earliest of their
	// bellDue (math.MaxInt64: none).
	bells   []PortalID
	nextDue int64
	gap     int64 // Config.DoorbellGap, ns
	delays  *telemetry.Batch
	st      *Stats

	// The summary doorbell (abi.Summary; nil: none, every portal is
	// looked at in every Poll): ringing counts the portals that ring it
	// (none: the summary is not even read), taken is this Poll's bits,
	// and a scan looks at every live portal at the first Poll at or
	// after nextScan (Config.SummaryScan apart).
	sum      *abi.Summary
	ringing  int
	taken    []uint64
	scanNs   int64
	nextScan int64
	scan     bool // this Poll scans
	path     PathCounters
}

func newPortalTable(n, tenants int, core uint16, scan time.Duration, delays *telemetry.Delays, st *Stats) *portalTable {
	if scan == 0 {
		scan = DefaultSummaryScan
	}
	t := &portalTable{
		tenants: tenants,
		p:       make([]portal, n),
		live:    make([]PortalID, 0, n),
		dirty:   make([]PortalID, 0, n),
		bells:   make([]PortalID, 0, n),
		nextDue: math.MaxInt64,
		taken:   make([]uint64, abi.SummaryBytes(n)/8),
		scanNs:  int64(scan),
		// The batch lives apart from the core's tables: 16 KB among
		// them pushes hot fields apart.
		delays: new(telemetry.Batch),
		st:     st,
	}
	t.delays.SetCore(core)
	t.delays.SetDelays(delays)
	return t
}

// open attaches a portal's rings under the first free id.
func (t *portalTable) open(spec PortalSpec) (PortalID, error) {
	cmd, err := abi.NewConsumer(spec.CmdRing, spec.CmdCap, abi.CommandSize)
	if err != nil {
		return 0, fmt.Errorf("%w: command ring: %v", ErrPortalRings, err)
	}
	cpl, err := abi.NewProducer(spec.CplRing, spec.CplCap, abi.CompletionSize)
	if err != nil {
		return 0, fmt.Errorf("%w: completion ring: %v", ErrPortalRings, err)
	}
	if spec.MaxSlots < 0 || spec.Class > abi.ClassHigh {
		return 0, fmt.Errorf("%w: MaxSlots %d class %d", ErrPortalRings, spec.MaxSlots, spec.Class)
	}
	if spec.Tenant < 0 || spec.Tenant >= t.tenants || spec.Weight < 0 || spec.Weight > MaxWeight {
		return 0, fmt.Errorf("%w: tenant %d (of %d) weight %d (at most %d)", ErrPortalSpec, spec.Tenant, t.tenants, spec.Weight, MaxWeight)
	}
	var flag *atomic.Uint32
	if f := spec.SummaryFlag; f != nil {
		if len(f) < 4 || uintptr(unsafe.Pointer(unsafe.SliceData(f)))%4 != 0 {
			return 0, fmt.Errorf("%w: summary flag word", ErrPortalRings)
		}
		flag = (*atomic.Uint32)(unsafe.Pointer(unsafe.SliceData(f)))
	}
	w := max(spec.Weight, 1)
	for i := range t.p {
		p := &t.p[i]
		if !p.used {
			*p = portal{used: true, class: spec.Class, cmd: cmd, cpl: cpl, maxSlots: spec.MaxSlots, pid: spec.PID,
				tenant: uint16(spec.Tenant), weight: uint16(w), flag: flag}
			t.live = append(t.live, PortalID(i))
			return PortalID(i), nil
		}
	}
	return 0, ErrPortalsFull
}

// attachSource enters the op source src in the table, under the first
// free id: an entry with no rings, not live (Poll does not drain it; the
// source posts its ops itself), whose ops stamp pid and whose completions
// go to src. The control plane sees no portal there (get).
func (t *portalTable) attachSource(src OpSource, maxSlots int, pid uint32) (PortalID, error) {
	for i := range t.p {
		p := &t.p[i]
		if !p.used {
			*p = portal{used: true, class: abi.ClassLow, maxSlots: maxSlots, pid: pid, src: src, weight: 1}
			return PortalID(i), nil
		}
	}
	return 0, ErrPortalsFull
}

// get is the open portal id. The entry of an op source is no portal of
// the control plane's: it has no rings to describe, close or ring.
func (t *portalTable) get(id PortalID) (*portal, error) {
	if int(id) >= len(t.p) || !t.p[id].used || t.p[id].src != nil {
		return nil, fmt.Errorf("%w: %d", ErrNoPortal, id)
	}
	return &t.p[id], nil
}

// getLive is get for operations a disabled portal may not do.
func (t *portalTable) getLive(id PortalID) (*portal, error) {
	p, err := t.get(id)
	if err == nil && p.dead {
		return nil, fmt.Errorf("%w: %d", ErrPortalDead, id)
	}
	return p, err
}

// dropLive takes id off the list of portals Poll drains.
func (t *portalTable) dropLive(id PortalID) {
	for k, l := range t.live {
		if l == id {
			t.live = append(t.live[:k], t.live[k+1:]...)
			return
		}
	}
}

// detach forgets portal id's rings, doorbell and unpublished completions
// (its entry stays in use).
func (t *portalTable) detach(id PortalID) {
	p := &t.p[id]
	p.slots, p.pending = 0, 0
	p.cmd, p.cpl = nil, nil
	p.arm, p.bell = nil, nil
	p.modCount, p.modPeriod, p.bellDue, p.quiet = 0, 0, 0, 0
	if k := slices.Index(t.bells, id); k >= 0 { // its held-back ring
		t.bells = slices.Delete(t.bells, k, k+1)
	}
	if p.rings {
		t.ringing--
	}
	p.flag, p.rings, p.again = nil, false, false
	if p.dirty {
		p.dirty = false
		for k, d := range t.dirty {
			if d == id {
				t.dirty = append(t.dirty[:k], t.dirty[k+1:]...)
				break
			}
		}
	}
}

// beginPoll starts a Poll's pass over the command rings at time now: it
// decides whether this Poll scans (every live portal is looked at, and
// the flags of those not yet known to ring are read), and takes the
// summary's bits when some portal rings it.
func (t *portalTable) beginPoll(now int64) {
	t.scan = now >= t.nextScan
	if t.scan {
		t.nextScan = now + t.scanNs
		t.path.RingScans++
		if t.sum != nil {
			for _, id := range t.live {
				if p := &t.p[id]; p.flag != nil && !p.rings && p.flag.Load() == abi.SummaryOn {
					p.rings = true
					t.ringing++
				}
			}
		}
	}
	if t.ringing > 0 {
		for i := range t.taken {
			t.taken[i] = t.sum.Take(i)
		}
	}
}

// due reports whether Poll looks at portal id's command ring: always for
// a portal that does not ring the summary; for one that does, in a scan,
// when its bit was rung, or when its last look left commands there.
// rung says whether the summary asked for the look.
func (t *portalTable) due(id PortalID) (look, rung bool) {
	p := &t.p[id]
	if !p.rings {
		return true, false
	}
	rung = t.taken[id/abi.SummaryWordBits]&(1<<(id%abi.SummaryWordBits)) != 0
	return t.scan || p.again || rung, rung && !t.scan && !p.again
}

// count counts one completion by status and by op.
func (t *portalTable) count(op abi.Op, st abi.Status) {
	t.st.Completed[st]++
	if op == abi.OpLookup {
		t.st.CompletedLookup[st]++
		return
	}
	if int(op) >= NumOpCounters {
		op = 0
	}
	t.st.CompletedByOp[op][st]++
}

// fail completes a command that never got a slot.
func (t *portalTable) fail(now int64, id PortalID, p *portal, cmd *abi.Command, st abi.Status) {
	t.count(cmd.Op, st)
	t.complete(now, id, p, &abi.Completion{Cookie: cmd.Cookie, Slot: cmd.Slot, Status: st, Op: cmd.Op})
}

// complete commits a completion and records its delays for the telemetry
// hook; room was reserved when the command was taken from the ring (see
// Core.drainPortal), so Reserve cannot fail unless the application
// corrupted the ring indices. An op source's completion goes to the
// source, which checks the op's data at once.
func (t *portalTable) complete(now int64, id PortalID, p *portal, cpl *abi.Completion) {
	if p.src != nil {
		p.src.Completed(now, *cpl)
	} else {
		b := p.cpl.Reserve()
		if b == nil {
			t.st.RingsCorrupt++
			return
		}
		cpl.Encode(b)
		p.cpl.Commit()
		if !p.dirty {
			p.dirty = true
			t.dirty = append(t.dirty, id)
		}
	}
	t.delays.Add(now, telemetry.Sample{
		IssueNs: cpl.IssueDelayNs, TotalNs: cpl.TotalDelayNs,
		Op: uint8(cpl.Op), Status: uint8(cpl.Status), Length: cpl.Length,
	})
}

// publish makes the committed completions visible to their applications
// and rings the doorbells due: an armed portal's at once; under
// moderation once enough completions are unread or its period is over;
// and never within the core's gap after the portal's last ring.
func (t *portalTable) publish(now int64) {
	for _, id := range t.dirty {
		p := &t.p[id]
		p.cpl.Publish()
		p.dirty = false
		// After the producer index store: an application that armed
		// before it is rung; one arming after it sees the completions
		// when it re-checks the ring (abi.SegmentArmOff).
		if p.arm == nil || p.arm.Load() == 0 {
			continue
		}
		due := now
		if p.modCount > 1 && p.cpl.Capacity()-p.cpl.Free() < p.modCount {
			if p.bellDue != 0 {
				continue // held back already: its period runs from the first
			}
			due = now + p.modPeriod
		}
		due = max(due, p.quiet)
		if due <= now {
			t.ring(p, now)
			continue
		}
		if p.bellDue == 0 {
			t.bells = append(t.bells, id)
			t.st.DoorbellsDeferred++
		}
		p.bellDue = due
		t.nextDue = min(t.nextDue, due)
	}
	t.dirty = t.dirty[:0]
	if len(t.bells) > 0 {
		t.ringDue(now)
	}
}

// ring rings p's doorbell if its application is (still) armed.
func (t *portalTable) ring(p *portal, now int64) {
	p.bellDue = 0
	if p.arm.CompareAndSwap(1, 0) {
		t.st.Doorbells++
		p.quiet = now + t.gap
		p.bell.Ring()
	}
}

// ringDue rings the held-back doorbells now due, and forgets those rung
// since (at a publication past their gap). A due one whose application woke by itself
// meanwhile (it disarmed: it found its completions on its own) is not
// rung (ring's compare-and-swap fails). The arm word, a line the
// application writes, is read only when a ring is due.
func (t *portalTable) ringDue(now int64) {
	next, k := int64(math.MaxInt64), 0
	for _, id := range t.bells {
		p := &t.p[id]
		switch {
		case p.bellDue == 0:
		case now >= p.bellDue:
			t.ring(p, now)
		default:
			next = min(next, p.bellDue)
			t.bells[k] = id
			k++
		}
	}
	t.bells, t.nextDue = t.bells[:k], next
}

// clampNs is a delay as a completion carries it.
func clampNs(d int64) uint32 {
	if d < 0 {
		return 0
	}
	if d > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(d)
}
