package sim

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// Targeted WRITE scenarios: scripted ops, every invariant of a random run
// checked (the model of every remote-writable region, commits seen at ④,
// exactly one completion, TIMEOUT bounds, window and pull conservation).

// liveRegion is the first live region of kind on node.
func liveRegion(s *Sim, node int, kind regKind) *region {
	for _, r := range s.regions {
		if r.node == node && r.kind == kind && r.deadAt == math.MaxInt64 {
			return r
		}
	}
	return nil
}

// postWrite returns a script step: node's first portal posts a WRITE of
// kind (with its defect, p.mutate) of length bytes to roff of node tgt's
// first live remote-writable region; edit (if any) is applied last.
func postWrite(node int, kind opKind, tgt int, length uint32, roff uint64, edit func(*op, *abi.Command)) func(*Sim) {
	return postTyped(abi.OpWrite, node, kind, tgt, regDst, length, roff, edit)
}

// postReadOf: the same for a READ of node tgt's first live region of rk.
func postReadOf(node int, tgt int, rk regKind, length uint32, roff uint64) func(*Sim) {
	return postTyped(abi.OpRead, node, kValid, tgt, rk, length, roff, nil)
}

func postTyped(opc abi.Op, node int, kind opKind, tgt int, rk regKind, length uint32, roff uint64, edit func(*op, *abi.Command)) func(*Sim) {
	return func(s *Sim) {
		p := s.nodes[node].app.portals[0]
		rg := liveRegion(s, tgt, rk)
		m := func(o *op, c *abi.Command) {
			if kind != kValid {
				p.mutate(o, c)
			}
			if edit != nil {
				edit(o, c)
			}
		}
		if !p.postOpType(opc, kind, rg, length, roff, m) {
			s.fail("script: could not post")
		}
		p.cmd.Publish()
	}
}

// frameOf decodes a copy in the fabric (nil: not a OneRMA frame).
func frameOf(f *frame) (*wire.Fields, []byte) {
	var h wire.Fields
	p, err := wire.Decode(f.buf[:f.n], &h)
	if err != nil {
		return nil, nil
	}
	return &h, p
}

// damage flips a byte of f's payload (or trailer): the receiving core
// must refuse it.
func damage(s *Sim, f *frame) {
	f.buf[f.n-1] ^= 0x20
	s.res.Net.Corrupted++
}

// TestScriptedWrite: a WRITE commits, a READ after it sees its data (its
// snapshot is the model after the commit), overlapping WRITEs from two
// nodes commit in some order and both READs of the range see a version.
func TestScriptedWrite(t *testing.T) {
	c := scripted(3, true)
	c.MustSee = []abi.Status{abi.StatusOK}
	c.scripts = []scriptStep{
		at(10, postWrite(0, kValid, 1, 4096, 100, nil)),
		at(200, postReadOf(2, 1, regDst, 4096, 100)),
		at(300, postWrite(0, kValid, 1, 3000, 0, nil)),
		at(300, postWrite(2, kValid, 1, 3000, 1500, nil)),
		at(300, postReadOf(0, 1, regDst, 4096, 0)),
		at(600, postReadOf(2, 1, regDst, 4096, 0)),
	}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if res.WriteStatus[abi.StatusOK] != 3 || res.WritesCommitted != 3 || res.ByStatus[abi.StatusOK] != 6 || res.ReadsOfWritten != 3 {
		t.Errorf("writes %s, %d commits, all %s, %d reads of written regions; want 3 OK writes, 3 commits, 6 OK, 3 reads",
			statusSummary(&res.WriteStatus), res.WritesCommitted, statusSummary(&res.ByStatus), res.ReadsOfWritten)
	}
}

// TestWriteRefusals: every WRITE with exactly one thing wrong gets its
// precise status and changes nothing (strict run: the model of the target
// is checked after each completion and at the end); valid writes before
// and after commit.
func TestWriteRefusals(t *testing.T) {
	c := scripted(2, true)
	c.MustSee = []abi.Status{abi.StatusOK, abi.StatusRemoteAuthFailure}
	readKey := func(o *op, _ *abi.Command) { o.keyOp = uint8(abi.OpRead) } // a READ's K_d on a WRITE
	c.scripts = []scriptStep{
		at(10, postWrite(0, kValid, 1, 4096, 0, nil)),
		at(20, postWrite(0, kKeyRandom, 1, 512, 0, nil)),
		at(35, postWrite(0, kKeyInitiator, 1, 512, 0, nil)),
		at(50, postWrite(0, kKeyOp, 1, 512, 0, readKey)),
		at(65, postWrite(0, kKeyOp, 1, 512, 0, nil)),
		at(80, postWrite(0, kRemoteRegion, 1, 512, 0, nil)), // the server has no K_r for it
		at(95, postWrite(0, kRemotePerm, 1, 512, 0, nil)),   // a region without PermRemoteWrite
		at(110, postWrite(0, kRemoteBounds, 1, 512, 0, nil)),
		at(125, postWrite(0, kLocalPerm, 1, 512, 0, nil)), // a source without PermLocalRead
		at(140, postWrite(0, kLocalBounds, 1, 512, 0, nil)),
		at(155, postWrite(0, kLocalRegion, 1, 512, 0, nil)),
		at(170, postWrite(0, kUnreachable, 1, 512, 0, nil)),
		at(200, func(s *Sim) { // node 1 rekeys its region; node 0 learns the key 200 µs later
			a := s.nodes[1].app
			p := a.portals[0]
			a.rekeyRegion(p, p.wdst)
			p.wdst.keys[len(p.wdst.keys)-1].learn[0] = s.now + 200_000
		}),
		at(210, postWrite(0, kValid, 1, 1000, 10, nil)), // a stale key: fails authentication
		at(500, postWrite(0, kValid, 1, 4096, 4000, nil)),
	}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[abi.Status]uint64{abi.StatusOK: 2, abi.StatusRemoteAuthFailure: 6, abi.StatusRemotePermission: 1,
		abi.StatusRemoteBounds: 1, abi.StatusLocalPermission: 1, abi.StatusLocalBounds: 1, abi.StatusLocalRegion: 1,
		abi.StatusUnreachable: 1}
	for st, n := range want {
		if res.WriteStatus[st] != n {
			t.Errorf("%v: %d, want %d (%s)", st, res.WriteStatus[st], n, statusSummary(&res.WriteStatus))
		}
	}
	if res.WriteKinds[kStaleKey] != 1 || res.WritesCommitted != 2 {
		t.Errorf("stale-key writes %d, commits %d; want 1 and 2", res.WriteKinds[kStaleKey], res.WritesCommitted)
	}
	if st := res.Cores[1]; st.ReqAuthFailed != 6 || st.PullsIssued != 2 || st.WritesCommitted != 2 {
		t.Errorf("server: ReqAuthFailed %d PullsIssued %d WritesCommitted %d, want 6, 2, 2", st.ReqAuthFailed, st.PullsIssued, st.WritesCommitted)
	}
}

// TestWriteTargetDeregisteredInFlight: the owner deregisters the target
// while the data is on its way (the pull has been sent): the write fails
// REMOTE_REGION and nothing is committed (the old memory is scribbled).
func TestWriteTargetDeregisteredInFlight(t *testing.T) {
	c := scripted(2, true)
	c.MustSee = []abi.Status{abi.StatusRemoteRegion}
	done := false
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); !done && h != nil && h.Type == wire.TypePullReq {
			done = true
			a := s.nodes[1].app
			a.churnDst(a.portals[0])
		}
	}
	c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 4096, 0, nil))}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if res.WriteStatus[abi.StatusRemoteRegion] != 1 || res.WritesCommitted != 0 || res.Cores[1].PullsInUse != 0 {
		t.Errorf("writes %s, %d commits, server %+v", statusSummary(&res.WriteStatus), res.WritesCommitted, res.Cores[1])
	}
}

// TestWriteSourceDeregisteredInFlight: the writer deregisters its source
// while its request is on its way: when the pull comes the data cannot be
// sent (LOCAL_REGION); the server's pull expires uncommitted.
func TestWriteSourceDeregisteredInFlight(t *testing.T) {
	c := scripted(2, true)
	c.MustSee = []abi.Status{abi.StatusLocalRegion}
	done := false
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); !done && h != nil && h.Type == wire.TypeWriteReq {
			done = true
			a := s.nodes[0].app
			a.churnWsrc(a.portals[0])
		}
	}
	c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 4096, 0, nil))}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if res.WriteStatus[abi.StatusLocalRegion] != 1 || res.WritesCommitted != 0 || res.Cores[1].PullsExpired != 1 {
		t.Errorf("writes %s, %d commits, server %+v", statusSummary(&res.WriteStatus), res.WritesCommitted, res.Cores[1])
	}
}

// TestWriteLostDataTimesOutLast: one chunk of the data is damaged on the
// wire: the server never commits, abandons the pull, and the initiator
// reports TIMEOUT after it, counted from the pull with the server's
// timeout, whether that is longer or shorter than its own.
func TestWriteLostDataTimesOutLast(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeouts []time.Duration
	}{
		{"same", nil},
		{"server-longer", []time.Duration{300 * time.Microsecond, 700 * time.Microsecond}},
		{"server-shorter", []time.Duration{700 * time.Microsecond, 300 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := scripted(2, true)
			c.Strict = false
			c.timeouts = tc.timeouts
			c.MustSee = []abi.Status{abi.StatusTimeout}
			done := false
			c.netHook = func(s *Sim, d *node, f *frame) {
				if h, _ := frameOf(f); !done && h != nil && h.Type == wire.TypeWriteData {
					done = true
					damage(s, f)
				}
			}
			c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 4096, 0, nil))}
			res, err := Run(c)
			if err != nil {
				t.Fatal(err)
			}
			if res.WriteStatus[abi.StatusTimeout] != 1 || res.WritesCommitted != 0 || res.Cores[1].PullsExpired != 1 || res.Cores[1].RxAuthFailed != 1 {
				t.Errorf("writes %s, %d commits, server %+v", statusSummary(&res.WriteStatus), res.WritesCommitted, res.Cores[1])
			}
		})
	}
}

// TestWriteAckLost: the acknowledgment is damaged: the write was
// committed, its initiator reports TIMEOUT ("may have been committed").
func TestWriteAckLost(t *testing.T) {
	c := scripted(2, true)
	c.Strict = false
	c.MustSee = []abi.Status{abi.StatusTimeout}
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); h != nil && h.Type == wire.TypeAck {
			damage(s, f)
		}
	}
	c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 2000, 64, nil))}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if res.WriteStatus[abi.StatusTimeout] != 1 || res.TimeoutCommitted != 1 {
		t.Errorf("writes %s, timed out committed %d", statusSummary(&res.WriteStatus), res.TimeoutCommitted)
	}
}

// TestWriteOrphanCommits: the writer's application dies after its data
// left: the op is orphaned (no completion) and the server may still
// commit it, with exactly the data that was sent.
func TestWriteOrphanCommits(t *testing.T) {
	c := scripted(2, true)
	done := false
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); !done && h != nil && h.Type == wire.TypeWriteData && h.Offset+uint64(h.Length) == 4096 {
			done = true
			s.nodes[0].app.crash()
		}
	}
	c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 4096, 0, nil))}
	res, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Orphaned != 1 || res.OrphanCommits != 1 {
		t.Errorf("orphans %d, orphan commits %d; want 1 and 1", res.Orphaned, res.OrphanCommits)
	}
}

// TestWriteDuplicateAndReorder: on a network that duplicates and
// reorders every frame, writes commit once each. The server drops each
// request's copy as a replay (its IV counter was seen) and pulls once;
// with replay detection off it pulls twice, the initiator answers one
// pull and the other expires uncommitted.
func TestWriteDuplicateAndReorder(t *testing.T) {
	for _, window := range []bool{true, false} {
		c := scripted(2, true)
		c.Strict = false
		c.Net.Dup = 1
		c.Net.Reorder = 1
		c.Net.ReorderNs = 5000
		if !window {
			c.Engine.ReplayPeers = 0
		}
		for i := range 8 {
			c.scripts = append(c.scripts, at(10+int64(i), postWrite(0, kValid, 1, 4096, uint64(i)*512, nil)))
		}
		res, err := Run(c)
		if err != nil {
			t.Fatal(err)
		}
		srv := &res.Cores[1]
		ok := res.WriteStatus[abi.StatusOK] == 8 && res.WritesCommitted == 8
		if window {
			ok = ok && srv.PullsIssued == 8 && srv.ReqReplayed == 8 && srv.PullsExpired == 0
		} else {
			ok = ok && srv.PullsIssued >= 9 && srv.PullsExpired > 0 && srv.ReqReplayed == 0
		}
		if !ok {
			t.Errorf("replay window %v: writes %s, %d commits, server %+v", window, statusSummary(&res.WriteStatus), res.WritesCommitted, *srv)
		}
	}
}

// ---- the checker checked -------------------------------------------------

// TestSimCatchesForgedWrite: data altered and resealed under the write's
// K_d and the pull's IV (no integrity check can see it) must fail the run
// at the commit.
func TestSimCatchesForgedWrite(t *testing.T) {
	cfg := Clean(3)
	cfg.Net.ForgeWrites = 0.05
	cfg.ShutdownAtEnd = false
	_, err := Run(cfg)
	if err == nil || !strings.Contains(err.Error(), "committed data differ from the source") {
		t.Fatalf("forged write data: got %v, want a committed-data failure", err)
	}
}

// TestSimCatchesStrayWrite: a byte of a remote-writable region changed
// with no commit (as a bug writing outside a range would) fails the run.
// A later commit over that byte would hide one change from the model, so
// bytes are changed at several times and places; the first not overwritten
// before a check must be caught.
func TestSimCatchesStrayWrite(t *testing.T) {
	cfg := Clean(3)
	cfg.ShutdownAtEnd = false
	for k := int64(0); k < 8; k++ {
		cfg.scripts = append(cfg.scripts, at(700+100*k, func(s *Sim) {
			rg := liveRegion(s, 1, regDst)
			rg.mem[(len(rg.mem) * int(k+1) / 9)] ^= 1
		}))
	}
	_, err := Run(cfg)
	// Caught by the model of the region (a commit or the end finds a
	// byte it does not expect), or by a READ of the range that returned
	// the changed byte, which matches no version the model has.
	if err == nil || !strings.Contains(err.Error(), "the model says") && !strings.Contains(err.Error(), "matches no version of the range") {
		t.Fatalf("stray change: got %v, want a model failure", err)
	}
}

// forgedPullTimeout returns a netHook that rewrites the first pull towards
// node 0 to carry timeout d (resealed under the write's K_d, the
// request's IV curried, as only a holder of the K_d could), and stalls
// the server (node 1) for stall from then: its data arrives, and is
// committed, after the initiator adopted the short timeout and gave up.
func forgedPullTimeout(d, stall time.Duration) func(*Sim, *node, *frame) {
	done := false
	return func(s *Sim, dst *node, f *frame) {
		h, _ := frameOf(f)
		if done || h == nil || h.Type != wire.TypePullReq || dst.id != 0 {
			return
		}
		o := s.writes[reqRef{0, h.Tag}]
		if o == nil {
			return
		}
		done = true
		kd := o.keyRg.keys[o.keyVer].d.Derive(s.nodes[0].ip.As4(), h.PID, uint8(abi.OpWrite))
		a, err := aesni.NewAEAD(kd)
		if err != nil {
			panic(err)
		}
		b := f.buf[:f.n]
		h.Offset = uint64(d)
		wire.Encode(b, h, 0)
		a.SealResponse(wire.Trailer(b, 0), nil, wire.IV(b), wire.AAD(b), o.reqIV[:])
		s.res.Net.Forged++
		srv := s.nodes[1]
		srv.cores[0].busyUntil = s.now + int64(stall) // one core
		srv.cores[0].reschedule()
	}
}

// TestSimCatchesEarlyWriteTimeout: a pull forged to carry a timeout
// shorter than the server's makes the initiator report TIMEOUT before
// the server gives up, which then commits. The pull check catches the
// forged timeout; without it (lenientPulls), the commit check catches the
// commit after the failure was reported.
func TestSimCatchesEarlyWriteTimeout(t *testing.T) {
	for _, lenient := range []bool{false, true} {
		c := scripted(2, true)
		c.Strict = false
		c.timeouts = []time.Duration{100 * time.Microsecond, 300 * time.Microsecond}
		c.lenientPulls = lenient
		c.netHook = forgedPullTimeout(100*time.Microsecond, 150*time.Microsecond)
		c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 4096, 0, nil))}
		_, err := Run(c)
		want := "not its server's"
		if lenient {
			want = "after its initiator reported it TIMEOUT"
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("lenient=%v: got %v, want a failure containing %q", lenient, err, want)
		}
	}
}

// ---- core bugs -----------------------------------------------------------

// TestCoreBugInServiceOrderLongerPull: the in-service list is kept ordered
// by deadline so that expire and NextDeadline look at its head only.
// Appending every op issued at the tail (deadline now + Timeout) keeps
// the order only while no deadline on the list is later than that; but a
// pulled WRITE's deadline becomes the SERVER's timeout counted from the
// pull (finishPull, insertInService), which is later when the server's
// Timeout is longer than the initiator's. Ops issued behind such a WRITE
// would then expire only when it does: here node 0
// (Timeout 300 µs) writes to node 1 (Timeout 700 µs), whose data is
// damaged so the write waits for its TIMEOUT (pull + 700 µs); a READ node
// 0 posts 20 µs later to node 2 (stalled, so it must time out at issue +
// 300 µs) would complete TIMEOUT only at ~720 µs, 420 µs late, its window
// debited all that time. (Safe for writes: they only time out later.)
//
// Random runs hit it as soon as nodes have different timeouts
// (Config.VaryTimeouts), e.g. lossy seed 6. arbitrate therefore inserts
// in deadline order.
func TestCoreBugInServiceOrderLongerPull(t *testing.T) {
	c := scripted(3, true)
	c.Strict = false
	c.timeouts = []time.Duration{300 * time.Microsecond, 700 * time.Microsecond, 300 * time.Microsecond}
	c.MustSee = []abi.Status{abi.StatusTimeout}
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); h != nil && h.Type == wire.TypeWriteData {
			damage(s, f)
		}
	}
	c.scripts = []scriptStep{
		at(10, postWrite(0, kValid, 1, 4096, 0, nil)),
		at(20, func(s *Sim) {
			n := s.nodes[2]
			n.cores[0].busyUntil = s.now + 2_000_000 // one core
			n.cores[0].reschedule()
		}),
		at(30, postReadOf(0, 2, regSrc, 512, 0)),
	}
	if _, err := Run(c); err != nil {
		t.Fatal(err)
	}
}

// TestCoreBugShutdownWriteCommitsAfterTimeout: a Core.Shutdown that
// completed a WRITE whose data has all been sent with TIMEOUT at once ("its
// serving engine may still commit it") would let the serving engine commit it
// until its pull deadline, up to its Timeout later: the region would
// change after the completion was written, against portal.Op's WRITE
// ("nothing changes after the completion is written: the initiator times
// out only after the serving side has given up"). Here node 0 shuts down
// while its write's last chunk is on the wire, and node 1 (not shut down)
// commits it. Shutdown therefore keeps such writes in service until their
// ack or their deadline.
func TestCoreBugShutdownWriteCommitsAfterTimeout(t *testing.T) {
	c := scripted(2, true)
	c.Strict = false
	done := false
	c.netHook = func(s *Sim, d *node, f *frame) {
		if h, _ := frameOf(f); !done && h != nil && h.Type == wire.TypeWriteData && h.Offset+uint64(h.Length) == 4096 {
			done = true
			s.nodes[0].shutdown()
		}
	}
	c.scripts = []scriptStep{at(10, postWrite(0, kValid, 1, 4096, 0, nil))}
	if _, err := Run(c); err != nil {
		t.Fatal(err)
	}
}
