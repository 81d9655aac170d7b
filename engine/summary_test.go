package engine

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/onerma/onerma/abi"
)

// summaryApp is an application whose portal may ring the core's summary
// doorbell: its segment's summary flag word and the shared summary.
type summaryApp struct {
	*testApp
	flag *atomic.Uint32
	sum  *abi.Summary
}

// openSummaryApp opens a portal whose segment has a summary flag word;
// rings: the application stores abi.SummaryOn there.
func openSummaryApp(t *testing.T, c *Core, sum *abi.Summary, rings bool) *summaryApp {
	t.Helper()
	const cmdCap, cplCap = 256, 512
	cmdMem := aligned(abi.RingBytes(cmdCap, abi.CommandSize))
	cplMem := aligned(abi.RingBytes(cplCap, abi.CompletionSize))
	flagMem := aligned(64)
	id, err := c.OpenPortal(PortalSpec{CmdRing: cmdMem, CmdCap: cmdCap, CplRing: cplMem, CplCap: cplCap,
		Class: abi.ClassLow, MaxSlots: 4, PID: testPID, SummaryFlag: flagMem[:4]})
	if err != nil {
		t.Fatal(err)
	}
	a := &summaryApp{testApp: &testApp{id: id, ip: c.out.ipb}, sum: sum,
		flag: (*atomic.Uint32)(unsafe.Pointer(&flagMem[0]))}
	a.cmd, _ = abi.NewProducer(cmdMem, cmdCap, abi.CommandSize)
	a.cpl, _ = abi.NewConsumer(cplMem, cplCap, abi.CompletionSize)
	if rings {
		a.flag.Store(abi.SummaryOn)
	}
	return a
}

// postN publishes n commands naming no slot of the portal (each completes
// BAD_SLOT at once: no network needed) and rings the summary if the
// application does.
func (a *summaryApp) postN(t *testing.T, n int) {
	t.Helper()
	for k := range n {
		b := a.cmd.Reserve()
		if b == nil {
			t.Fatal("command ring full")
		}
		(&abi.Command{Op: abi.OpRead, Slot: 0xfffffff0, Cookie: uint64(k), Length: 64}).Encode(b)
		a.cmd.Commit()
	}
	a.cmd.Publish()
	if a.flag.Load() == abi.SummaryOn {
		a.sum.Ring(uint32(a.id))
	}
}

func newSummaryCore(t *testing.T) (*Core, *abi.Summary, []byte) {
	t.Helper()
	cfg := testConfig("10.0.0.1", 1)
	cfg.Portals = 70 // two summary words
	c := newCore(t, cfg, newTestTx(16))
	mem := aligned(abi.SummaryBytes(cfg.Portals))
	if err := c.SetSummary(mem[:8]); err == nil {
		t.Error("SetSummary took a summary too small for Config.Portals")
	}
	if err := c.SetSummary(mem); err != nil {
		t.Fatal(err)
	}
	sum, _ := abi.NewSummary(mem)
	return c, sum, mem
}

// TestSummaryDoorbell: once a scan has seen a portal's flag, Poll reads
// its command ring only when it rang, when the last look left commands
// behind, and in scans; a portal that never rings is read in every Poll.
// The counters say exactly which looks were made and which found nothing.
func TestSummaryDoorbell(t *testing.T) {
	c, _, _ := newSummaryCore(t)
	sum := c.portals.sum
	a := openSummaryApp(t, c, sum, true)
	b := openSummaryApp(t, c, sum, true)
	old := openSummaryApp(t, c, sum, false) // a client that never rings
	now := int64(1000)
	step := func() { c.Poll(now); now += int64(time.Microsecond) }
	step() // the first Poll scans: it learns that a and b ring
	p0 := c.PathCounters()
	if p0.RingScans != 1 || p0.RingLooks != 3 || p0.RingLooksIdle != 3 || c.portals.ringing != 2 {
		t.Fatalf("first Poll: %+v, ringing %d", p0, c.portals.ringing)
	}
	// Until the next scan, only the old client's ring is read: idle.
	for range 5 {
		step()
	}
	if p := c.PathCounters(); p.RingLooks != p0.RingLooks+5 || p.RingLooksIdle != p0.RingLooksIdle+5 || p.RingScans != 1 {
		t.Fatalf("idle polls: %+v", p)
	}
	// a posts and rings: read once, its commands taken; b never.
	p1 := c.PathCounters()
	a.postN(t, 3)
	step()
	if got := len(a.completions()); got != 3 {
		t.Fatalf("a got %d completions, want 3", got)
	}
	if p := c.PathCounters(); p.RingLooks != p1.RingLooks+2 || p.RingLooksIdle != p1.RingLooksIdle+1 || p.RingRungIdle != 0 {
		t.Fatalf("a's post: %+v (before %+v)", p, p1)
	}
	// More than a burst: the rest is taken in the next Poll without a ring.
	a.postN(t, perPortalBurst+10)
	step()
	step()
	if got := len(a.completions()); got != perPortalBurst+10 {
		t.Fatalf("a got %d completions, want %d", got, perPortalBurst+10)
	}
	// A bit rung with nothing posted (another tenant's, say) costs one
	// idle look, counted as rung.
	p2 := c.PathCounters()
	sum.Ring(uint32(b.id))
	step()
	if p := c.PathCounters(); p.RingLooks != p2.RingLooks+2 || p.RingRungIdle != p2.RingRungIdle+1 {
		t.Fatalf("a stray bit: %+v (before %+v)", p, p2)
	}
	// The old client is served in every Poll, without any ring.
	old.postN(t, 2)
	step()
	if got := len(old.completions()); got != 2 {
		t.Fatalf("old client got %d completions, want 2", got)
	}
	// At the scan, every ring is read again.
	p3 := c.PathCounters()
	for now <= int64(1000)+int64(DefaultSummaryScan) {
		step()
	}
	if p := c.PathCounters(); p.RingScans != 2 || p.RingLooksIdle-p3.RingLooksIdle != p.RingLooks-p3.RingLooks {
		t.Fatalf("scan: %+v", p)
	}
	// Closing a portal that rings takes it off the count.
	if err := c.ClosePortal(a.id); err != nil {
		t.Fatal(err)
	}
	if c.portals.ringing != 1 {
		t.Errorf("ringing %d after closing a, want 1", c.portals.ringing)
	}
}

// TestSummaryHostileClear: a tenant that clears every bit of the shared
// summary right after the victim rings delays the victim's commands to
// the next fallback scan, never longer: each is taken by the first Poll
// at or after the scan due SummaryScan after the previous one, so no post
// waits more than SummaryScan (plus the poll step).
func TestSummaryHostileClear(t *testing.T) {
	c, sum, mem := newSummaryCore(t)
	victim := openSummaryApp(t, c, sum, true)
	words := unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	clearAll := func() {
		for i := range words {
			words[i].Store(0)
		}
	}
	const step = int64(time.Microsecond)
	scan := int64(DefaultSummaryScan)
	now := int64(1000)
	c.Poll(now) // the first scan: the victim rings from now on
	worst := int64(0)
	for k := range 60 {
		now += step
		posted := now
		victim.postN(t, 1)
		for {
			clearAll() // the hostile tenant, before each of the engine's Polls
			scans := c.PathCounters().RingScans
			c.Poll(now)
			n := len(victim.completions())
			if n > 1 {
				t.Fatalf("%d completions", n)
			}
			if n == 1 {
				if c.PathCounters().RingScans != scans+1 {
					t.Fatalf("post %d taken at %d by a Poll that did not scan: the cleared bit was seen", k, now)
				}
				break
			}
			if now-posted > scan {
				t.Fatalf("post %d at %d not taken by %d: more than SummaryScan (%d ns) later", k, posted, now, scan)
			}
			now += step
		}
		worst = max(worst, now-posted)
	}
	if worst > scan || worst < scan-step {
		t.Errorf("worst delay %d ns, want just under SummaryScan (%d ns)", worst, scan)
	}
	t.Logf("worst delay of a post hidden by a hostile clearer: %d ns (SummaryScan %d ns, %d scans)", worst, scan, c.PathCounters().RingScans)
}
