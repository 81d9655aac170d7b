package e2e

// The WRITE attacks of TestAttack (see the table at the top of
// attack_test.go): replays of a completed write's frames; its request
// replayed while a second genuine write to the same range is in flight;
// rewritten write requests; tampered, forged, duplicated and misdirected
// write data; data held until the initiator gave up. Where the attacker
// must hold or rewrite frames in flight, A's bridge port is disabled and
// the attacker relays between A's and B's links itself (a man in the
// middle).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/rawnet"
	"github.com/onerma/onerma/portal"
	"github.com/onerma/onerma/wire"
)

var (
	cPullsIssued     = counter{"pulls_issued", func(s *ctlmsg.Stats) uint64 { return s.PullsIssued }}
	cWritesCommitted = counter{"writes_committed", func(s *ctlmsg.Stats) uint64 { return s.WritesCommitted }}
	cPullsExpired    = counter{"pulls_expired", func(s *ctlmsg.Stats) uint64 { return s.PullsExpired }}
	cRemoteRekeys    = counter{"remote_rekeys", func(s *ctlmsg.Stats) uint64 { return s.RemoteRekeys }}
)

// writeTarget is what the WRITE attacks aim at: a region of B's owner that
// takes remote writes (and reads), the reader's source region on A, and
// the WRITE K_d the owner gave the reader.
type writeTarget struct {
	wb, src *portal.Region
	kw      aesni.Key
}

func (tb *attackBed) newWriteTarget(t *testing.T) *writeTarget {
	t.Helper()
	w := &writeTarget{wb: ownerRegion(t, tb.pb, 64<<10, abi.PermRemoteRead|abi.PermRemoteWrite)}
	var err error
	if w.src, err = tb.pa.RegisterRegion(16*4096, abi.PermLocalRead); err != nil {
		t.Fatal(err)
	}
	w.kw = writeKey(w.wb, tb.pa)
	return w
}

// stamp fills the reader's source at srcOff with 4 KB that differ in
// every byte from what the target range at off holds now, and returns a
// copy.
func (w *writeTarget) stamp(off, srcOff uint64, salt byte) []byte {
	s := w.src.Bytes()[srcOff : srcOff+4096]
	for i := range s {
		s[i] = w.wb.Bytes()[off+uint64(i)] ^ (0x80 | salt) ^ byte(i>>5)
	}
	return append([]byte(nil), s...)
}

// snapshot is a copy of the target as its owner sees it.
func (w *writeTarget) snapshot() []byte { return append([]byte(nil), w.wb.Bytes()...) }

// is fails t unless the owner's view of the target equals want.
func (w *writeTarget) is(t *testing.T, what string, want []byte) {
	t.Helper()
	sameRegion(t, what, w.wb.Bytes(), want, 0, 0)
}

// writeOp posts a 4 KB write of the source at srcOff into the target at
// off on the attacked slot and returns its write request ① as captured on
// A's link (the frames after it stay queued on the link's socket).
func (tb *attackBed) writeOp(t *testing.T, w *writeTarget, off, srcOff, cookie uint64) rawnet.Frame {
	t.Helper()
	tb.tapA.Drain()
	if err := tb.pa.Submit(&portal.Op{
		Type: portal.OpWrite, Slot: tb.aslot, Cookie: cookie,
		Remote: ipB, RemoteRegion: w.wb.ID(), RemoteOffset: off, Key: w.kw,
		Local: w.src, LocalOffset: srcOff, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	req, err := tb.tapA.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool {
		return f.Type == wire.TypeWriteReq && f.Offset == off && f.DstIP == binary.BigEndian.Uint32(ipB.AsSlice())
	}))
	if err != nil {
		t.Fatal("the writer's request:", err)
	}
	return req
}

// completes waits for the attacked slot's completion and checks it.
func (tb *attackBed) completes(t *testing.T, what string, cookie uint64, st abi.Status) {
	t.Helper()
	c := waitOne(t, tb.pa, 10*time.Second)
	if c.Status != st || c.Cookie != cookie || c.Op != abi.OpWrite {
		t.Fatalf("%s: %+v, want %v", what, c, st)
	}
}

// rewriteAll applies edit to a copy of each frame (rawnet.Rewrite).
func rewriteAll(t *testing.T, frames [][]byte, edit func(*wire.Fields)) [][]byte {
	t.Helper()
	var out [][]byte
	for _, f := range frames {
		b, err := rawnet.Rewrite(f, edit)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func frameData(frames []rawnet.Frame) [][]byte {
	var out [][]byte
	for _, f := range frames {
		out = append(out, f.Data)
	}
	return out
}

// pick returns the frames of type typ in direction out.
func pick(t *testing.T, frames []rawnet.Frame, out bool, typ wire.Type) []rawnet.Frame {
	t.Helper()
	var got []rawnet.Frame
	for _, f := range frames {
		if f.Out == out && parse(t, f.Data).Type == typ {
			got = append(got, f)
		}
	}
	return got
}

// relayPull passes B's pull of the write request req (sent to B by the
// attacker) on to A and returns it with A's data as captured on A's link,
// by offset.
func (tb *attackBed) relayPull(t *testing.T, req []byte) (pull rawnet.Frame, data []rawnet.Frame) {
	t.Helper()
	rf := parse(t, req)
	tb.tapB.Drain()
	inject(t, tb.tapB, req)
	pull, err := tb.tapB.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool {
		return f.Type == wire.TypePullReq && f.Tag == rf.Tag
	}))
	if err != nil {
		t.Fatal("B's pull:", err)
	}
	inject(t, tb.tapA, pull.Data)
	return pull, chunksOf(t, tb.tapA, false, wire.TypeWriteData, rf.Tag, int(rf.Length))
}

// writeAttacks are the WRITE subtests of TestAttack.
func writeAttacks(t *testing.T, tb *attackBed, run func(string, func(*testing.T))) {
	var (
		w     *writeTarget
		req1  rawnet.Frame   // ① of a completed write
		data1 []rawnet.Frame // its ③, by offset
		ack1  rawnet.Frame   // its ④
	)
	const off1 = 2*4096 + 101

	run("ReplayedWrite", func(t *testing.T) {
		w = tb.newWriteTarget(t)
		// A genuine write, every hop captured on A's link.
		new1 := w.stamp(off1, 0, 1)
		req1 = tb.writeOp(t, w, off1, 0, 21)
		rf := parse(t, req1.Data)
		tb.completes(t, "the genuine write", 21, abi.StatusOK)
		want := w.snapshot()
		if !bytes.Equal(want[off1:off1+4096], new1) {
			t.Fatal("the genuine write did not land")
		}
		hops := mustCapture(t, tb.tapA, oneRMAFrameAny(func(f *wire.Fields) bool { return f.Tag == rf.Tag }))
		pulls, acks := pick(t, hops, true, wire.TypePullReq), pick(t, hops, true, wire.TypeAck)
		data1 = pick(t, hops, false, wire.TypeWriteData)
		if len(pulls) != 1 || len(acks) != 1 || len(data1) != 3 || len(hops) != 5 {
			t.Fatalf("captured %d frames of the write: %d pulls, %d data, %d acks; want 1, 3 (4 KB at MTU 1500), 1",
				len(hops), len(pulls), len(data1), len(acks))
		}
		ack1 = acks[0]
		pull1 := parse(t, pulls[0].Data)
		if pull1.Length != 4096 || pull1.Offset == 0 || pull1.Offset > uint64(time.Second) {
			t.Fatalf("the pull %+v: want the write's length and the server's timeout", pull1)
		}
		for i, d := range data1 {
			if df := parse(t, d.Data); df.Region != pull1.Region || df.Offset != uint64(i)*1408 {
				t.Fatalf("data chunk %d %+v: want pull handle %#x, offset %d", i, df, pull1.Region, i*1408)
			}
			// Encrypted: none of the new bytes on the wire.
			for k := 0; k+16 <= 4096; k += 16 {
				if bytes.Contains(d.Data, new1[k:k+16]) {
					t.Fatalf("plaintext bytes %d..%d in data chunk %d", k, k+16, i)
				}
			}
		}

		// The owner changes the range itself and the writer's source
		// changes too: a replay that committed anything would show.
		fill(w.wb.Bytes()[off1:off1+4096], 0x11)
		fill(w.src.Bytes()[0:4096], 0x22)
		owned := w.snapshot()
		baseA, baseB := stats(t, tb.pa), stats(t, tb.pb)
		tb.tapB.Drain()
		// ① again: B has seen its IV counter and drops it once it
		// authenticated, before pulling anything. (Without replay
		// detection B pulls again, under a fresh IV, from A, which no
		// longer has the op, and the pull expires uncommitted: engine
		// TestWriteReplayMutatesNothing.) The data as captured names the
		// ended pull (stale); the ack as captured goes to an op that ended
		// (stale).
		inject(t, tb.tapB, req1.Data)
		inject(t, tb.tapB, frameData(data1)...)
		inject(t, tb.tapA, ack1.Data)
		expect(t, "A", tb.pa, baseA, delta{cRxStale, 1}, delta{cRxAuthFailed, 0}, delta{cRxDropped, 0})
		s := expect(t, "B", tb.pb, baseB, delta{cReqReplayed, 1}, delta{cPullsIssued, 0}, delta{cWritesCommitted, 0},
			delta{cRxStale, 3}, delta{cRxAuthFailed, 0}, delta{cReqAuthFailed, 0}, delta{cReqErrors, 0})
		if out, _ := tb.tapB.Capture(200*time.Millisecond, 0, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag })); len(out) != 0 {
			t.Fatalf("B answered the replayed request with %d frames", len(out))
		}
		if s.PullsInUse != 0 {
			t.Fatalf("B holds %d pulls", s.PullsInUse)
		}
		w.is(t, "after the replayed write", owned)
		tb.noCompletion(t, "after the replayed write")

		// ① replayed while a second genuine write to the same range is in
		// flight, and that write's own request duplicated: the attacker
		// relays. B pulls once, for the second write; it drops the other
		// two as replays.
		bridgePort(t, tb.ifA, 0)
		defer bridgePort(t, tb.ifA, 3)
		new2 := w.stamp(off1, 4096, 2)
		req2 := tb.writeOp(t, w, off1, 4096, 22)
		r2 := parse(t, req2.Data)
		baseA, baseB = stats(t, tb.pa), stats(t, tb.pb)
		tb.tapB.Drain()
		inject(t, tb.tapB, req1.Data, req2.Data, req2.Data)
		got, err := tb.tapB.Capture(5*time.Second, 1, fromEngine(func(f *wire.Fields) bool { return f.Type == wire.TypePullReq }))
		if err != nil || len(got) != 1 || parse(t, got[0].Data).Tag != r2.Tag {
			t.Fatalf("%d pulls for the second write's request and two replays, want its own only: %v", len(got), err)
		}
		tb.tapA.Drain()
		inject(t, tb.tapA, frameData(got)...)
		data2 := chunksOf(t, tb.tapA, false, wire.TypeWriteData, r2.Tag, 4096)
		handle := parse(t, data2[0].Data).Region
		// The first write's data aimed at the second write's pull (handle,
		// tag and source port, the op's own, rewritten): curried with
		// another pull's IV, it fails authentication. Then the second write's genuine data (B takes
		// its link's frames in order, all within the pull's lifetime):
		// committed once, acknowledged.
		tb.tapB.Drain()
		inject(t, tb.tapB, rewriteAll(t, frameData(data1), func(f *wire.Fields) { f.Region, f.Tag, f.SrcPort = handle, r2.Tag, r2.SrcPort })...)
		inject(t, tb.tapB, frameData(data2)...)
		ack2, err := tb.tapB.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Type == wire.TypeAck && f.Tag == r2.Tag }))
		if err != nil {
			t.Fatal("no ack for the second write:", err)
		}
		inject(t, tb.tapA, ack2.Data)
		tb.completes(t, "the second write", 22, abi.StatusOK)
		copy(owned[off1:], new2)
		w.is(t, "after the second write", owned)
		s = expect(t, "B", tb.pb, baseB, delta{cPullsIssued, 1}, delta{cWritesCommitted, 1}, delta{cPullsExpired, 0},
			delta{cReqReplayed, 2}, delta{cRxAuthFailed, 3}, delta{cRxStale, 0}, delta{cReqAuthFailed, 0})
		if s.PullsInUse != 0 {
			t.Fatalf("B holds %d pulls after the write", s.PullsInUse)
		}
		expect(t, "A", tb.pa, baseA, delta{cRxStale, 0}, delta{cRxDropped, 0}, delta{cRxAuthFailed, 0})
		tb.noCompletion(t, "after the second write")
		bridgePort(t, tb.ifA, 3)
		tb.legit(t, 32)
	})

	run("ReplayedWriteFlood", func(t *testing.T) {
		if req1.Data == nil {
			t.Skip("needs the write captured by ReplayedWrite")
		}
		// 80 replays of a completed write's request at once: B drops
		// every copy unanswered, takes no pull context and no window.
		// (Without replay detection B pulled 64 of them, filling its
		// 256 KB window, and a genuine write behind them waited until it
		// reclaimed their idle pulls: engine TestWriteReplayedPullReclaimed.)
		const replays = 80
		baseA, baseB := stats(t, tb.pa), stats(t, tb.pb)
		for range replays {
			inject(t, tb.tapB, req1.Data)
		}
		s := expect(t, "B", tb.pb, baseB, delta{cReqReplayed, replays}, delta{cPullsIssued, 0})
		if s.PullsInUse != 0 || s.WindowInUse != 0 {
			t.Fatalf("B holds %d pulls, %d bytes of window after the replays", s.PullsInUse, s.WindowInUse)
		}
		// A genuine write right behind them is served at once.
		const off = 5 * 4096
		new3 := w.stamp(off, 2*4096, 3)
		tb.writeOp(t, w, off, 2*4096, 23)
		tb.completes(t, "the write behind the replays", 23, abi.StatusOK)
		if !bytes.Equal(w.wb.Bytes()[off:off+4096], new3) {
			t.Fatal("the genuine write did not land")
		}
		s = expect(t, "B", tb.pb, baseB, delta{cReqReplayed, replays}, delta{cPullsIssued, 1}, delta{cPullsExpired, 0},
			delta{cWritesCommitted, 1}, delta{cReqAuthFailed, 0})
		if s.PullsInUse != 0 || s.WindowInUse != 0 {
			t.Fatalf("B holds %d pulls, %d bytes of window", s.PullsInUse, s.WindowInUse)
		}
		expect(t, "A", tb.pa, baseA, delta{cRxStale, 0}, delta{cRxAuthFailed, 0})
		tb.noCompletion(t, "after the replay flood")
		tb.legit(t, 32)
	})

	run("RewrittenWriteRequest", func(t *testing.T) {
		if req1.Data == nil {
			t.Skip("needs the write captured by ReplayedWrite")
		}
		rf := parse(t, req1.Data)
		before := w.snapshot()
		edits := []struct {
			name string
			edit func(*wire.Fields)
		}{
			{"the offset", func(f *wire.Fields) { f.Offset = 0 }},
			{"the length", func(f *wire.Fields) { f.Length = 64 }},
			{"another region of the owner", func(f *wire.Fields) { f.Region = uint32(tb.rb.ID()) }},
			{"another PID", func(f *wire.Fields) { f.PID++ }},
			{"the IV", func(f *wire.Fields) { f.IV[11] ^= 1 }},
			{"turned into a READ request", func(f *wire.Fields) { f.Type = wire.TypeReadReq }},
			{"turned into a REKEY request", func(f *wire.Fields) { f.Type, f.Length = wire.TypeRekeyReq, aesni.KeySize }},
		}
		tb.tapB.Drain()
		baseB := stats(t, tb.pb)
		for _, e := range edits {
			b, err := rawnet.Rewrite(req1.Data, e.edit)
			if err != nil {
				t.Fatal(err)
			}
			inject(t, tb.tapB, b)
			bf := parse(t, b)
			ans, err := tb.tapB.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag }))
			if err != nil {
				t.Fatalf("%s: %v", e.name, err)
			}
			af := parse(t, ans.Data)
			if af.Type != wire.TypeError || abi.Status(af.Status) != abi.StatusRemoteAuthFailure || rawnet.OpenAuthFailure(ans.Data, bf.IV[:]) != nil {
				t.Fatalf("%s: answer %+v, want REMOTE_AUTHENTICATION_FAILURE", e.name, af)
			}
		}
		expect(t, "B", tb.pb, baseB, delta{cReqAuthFailed, uint64(len(edits))}, delta{cPullsIssued, 0},
			delta{cReqServed, 0}, delta{cRxDropped, 0})
		w.is(t, "after rewritten write requests", before)
		tb.legit(t, 32)
	})

	run("TamperedWriteData", func(t *testing.T) {
		if w == nil {
			t.Skip("needs the target of ReplayedWrite")
		}
		// Man in the middle: the attacker holds A's data and sends B
		// tampered and forged chunks for the live pull first.
		const off, srcOff = 5*4096 + 3, 2 * 4096
		bridgePort(t, tb.ifA, 0)
		defer bridgePort(t, tb.ifA, 3)
		before := w.snapshot()
		neu := w.stamp(off, srcOff, 3)
		req := tb.writeOp(t, w, off, srcOff, 23)
		rf := parse(t, req.Data)
		pull, genuine := tb.relayPull(t, req.Data)
		pf := parse(t, pull.Data)
		if len(genuine) != 3 {
			t.Fatalf("%d data chunks for 4 KB, want 3 at MTU 1500", len(genuine))
		}
		flip := func(at int) func([]byte) []byte {
			return func(b []byte) []byte {
				c := append([]byte(nil), b...)
				c[at] ^= 0x10
				return c
			}
		}
		rewrite := func(edit func(*wire.Fields)) func([]byte) []byte {
			return func(b []byte) []byte {
				c, err := rawnet.Rewrite(b, edit)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
		}
		cut := func(b []byte) []byte { // payload cut to 640 B, the original tag kept
			c, err := rawnet.Rewrite(b, func(f *wire.Fields) { f.Length = 640 })
			if err != nil {
				t.Fatal(err)
			}
			c = append(c[:wire.PayloadOffset+640], wire.Trailer(b, rawnet.PayloadLen(b))...)
			binary.BigEndian.PutUint16(c[wire.EthLen+2:], uint16(len(c)-wire.EthLen))
			binary.BigEndian.PutUint16(c[wire.EthLen+wire.IPv4Len+4:], uint16(len(c)-wire.EthLen-wire.IPv4Len))
			rawnet.FixIPv4Checksum(c)
			return c
		}
		// Forged chunks with the live pull's handle, tag and PID (all on
		// the wire), sealed under a key the attacker picked.
		src, dst := tb.epA, tb.epB
		src.Port, dst.Port = rf.SrcPort, pf.SrcPort
		forge := func(off uint64, n int, curry []byte) func([]byte) []byte {
			return func([]byte) []byte {
				tb.ivCtr++
				f := rawnet.Fields(src, dst)
				f.Type, f.PID, f.Tag, f.Region = wire.TypeWriteData, rf.PID, rf.Tag, pf.Region
				f.Length, f.Offset, f.IV = uint32(n), off, rawnet.Nonce(ipA, tb.ivCtr)
				b := rawnet.Build(&f, n)
				rawnet.SealAnswer(b, tb.randKey(), bytes.Repeat([]byte{0xab}, n), curry)
				return b
			}
		}
		type tamper struct {
			name  string
			chunk int // -1: every chunk
			fn    func([]byte) []byte
		}
		authFail := []tamper{
			{"a payload bit", -1, flip(wire.PayloadOffset + 17)},
			{"a tag bit", -1, func(b []byte) []byte { c := append([]byte(nil), b...); c[len(c)-1] ^= 1; return c }},
			{"an IV bit", -1, flip(wire.IVOffset + 11)},
			{"the offset (another chunk's)", 0, rewrite(func(f *wire.Fields) { f.Offset = 1408 })},
			{"the status", 1, rewrite(func(f *wire.Fields) { f.Status = 1 })},
			{"the flags", 1, rewrite(func(f *wire.Fields) { f.Flags = 0x80 })},
			{"the length (payload cut to 640 B)", 2, cut},
			{"forged, curried with the pull's IV", 0, forge(0, 1408, pf.IV[:])},
			{"forged, curried with the request's IV", 0, forge(1408, 1408, rf.IV[:])},
			{"forged, last chunk, no currying", 0, forge(2816, 1280, nil)},
		}
		stale := []tamper{
			{"the PID", 0, rewrite(func(f *wire.Fields) { f.PID++ })},
			{"the tag (another sequence)", 0, rewrite(func(f *wire.Fields) { f.Tag++ })},
			{"the pull handle's generation", 1, rewrite(func(f *wire.Fields) { f.Region += 1 << 16 })},
			{"the pull handle's index", 1, rewrite(func(f *wire.Fields) { f.Region ^= 1 })},
			{"the UDP source port", 2, rewrite(func(f *wire.Fields) { f.SrcPort++ })},
			{"the source address (the attacker's)", 2, rewrite(func(f *wire.Fields) {
				f.SrcIP, f.SrcMAC = binary.BigEndian.Uint32(atkIPX.AsSlice()), atkMACX
			})},
		}
		dropped := []tamper{
			{"a misaligned offset", 0, rewrite(func(f *wire.Fields) { f.Offset = 100 })},
			{"beyond the write", 1, rewrite(func(f *wire.Fields) { f.Offset = 3008 })},
			{"the UDP destination port", 2, rewrite(func(f *wire.Fields) { f.DstPort++ })},
		}
		// Everything below reaches B (and A) in order within the pull's
		// lifetime; the counters are checked once the write completed.
		baseA, baseB := stats(t, tb.pa), stats(t, tb.pb)
		count := func(set []tamper) uint64 {
			n := uint64(0)
			for _, tp := range set {
				for i, g := range genuine {
					if tp.chunk >= 0 && tp.chunk != i {
						continue
					}
					inject(t, tb.tapB, tp.fn(g.Data))
					n++
				}
			}
			return n
		}
		nAuth, nStale, nDrop := count(authFail), count(stale), count(dropped)

		// Forged answers to A for its pulled write: an ack under a random
		// key, the first write's genuine ack re-tagged for this op and sent
		// to its port (curried with another pull's IV), a NACK (dropped unopened: after the pull
		// the server never NACKs), the pull again (an op is pulled once).
		aSrc, aDst := tb.epB, tb.epA
		aSrc.Port, aDst.Port = pf.SrcPort, rf.SrcPort
		k := tb.randKey()
		forgedAnswers := [][]byte{
			tb.forgedAnswer(aSrc, aDst, &rf, wire.TypeAck, 0, 0, 0, k, false, pf.IV[:]),
			tb.forgedAnswer(aSrc, aDst, &rf, wire.TypeNack, 0, 0, 0, k, false, pf.IV[:]),
		}
		nForgedAuth := uint64(len(forgedAnswers) - 1) // the NACK is dropped, not opened
		if ack1.Data != nil {
			forgedAnswers = append(forgedAnswers, rewriteAll(t, [][]byte{ack1.Data}, func(f *wire.Fields) { f.Tag, f.DstPort = rf.Tag, rf.SrcPort })...)
			nForgedAuth++
		}
		inject(t, tb.tapA, forgedAnswers...)
		inject(t, tb.tapA, pull.Data)
		tb.noCompletion(t, "after forged answers to the pulled write")

		// The genuine data, chunk 0 twice: committed once, acknowledged;
		// the same data again afterwards finds its pull ended.
		tb.tapB.Drain()
		inject(t, tb.tapB, genuine[0].Data, genuine[1].Data, genuine[0].Data, genuine[2].Data)
		ack, err := tb.tapB.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Type == wire.TypeAck && f.Tag == rf.Tag }))
		if err != nil {
			t.Fatal("no ack:", err)
		}
		inject(t, tb.tapB, frameData(genuine)...)
		inject(t, tb.tapA, ack.Data)
		tb.completes(t, "the tampered-with write", 23, abi.StatusOK)
		copy(before[off:], neu)
		w.is(t, "after the genuine data", before)
		expect(t, "B", tb.pb, baseB, delta{cRxAuthFailed, nAuth}, delta{cRxStale, nStale + 3}, delta{cRxDropped, nDrop},
			delta{cWritesCommitted, 1}, delta{cRxDuplicate, 1}, delta{cPullsIssued, 0}, delta{cPullsExpired, 0})
		expect(t, "A", tb.pa, baseA, delta{cRxAuthFailed, nForgedAuth}, delta{cRxDropped, 2}, delta{cRxStale, 0})
		bridgePort(t, tb.ifA, 3)
		tb.legit(t, 32)
	})

	run("DelayedWriteData", func(t *testing.T) {
		if w == nil {
			t.Skip("needs the target of ReplayedWrite")
		}
		// The attacker holds A's data until A reports TIMEOUT, then
		// delivers it: the serving engine's pull expired first (the
		// initiator's deadline, reset by the pull, is later), so nothing
		// is committed after the write was reported failed.
		const off, srcOff = 7*4096 + 9, 3 * 4096
		bridgePort(t, tb.ifA, 0)
		defer bridgePort(t, tb.ifA, 3)
		before := w.snapshot()
		w.stamp(off, srcOff, 4)
		baseB := stats(t, tb.pb)
		req := tb.writeOp(t, w, off, srcOff, 24)
		_, data := tb.relayPull(t, req.Data)
		tb.completes(t, "the write whose data was held", 24, abi.StatusTimeout)
		inject(t, tb.tapB, frameData(data)...)
		// The late data is stale once B has expired the pull, or, if B has
		// not yet run its timers when it arrives, dropped past the pull's
		// deadline without a count: either way never committed.
		s := expect(t, "B", tb.pb, baseB, delta{cPullsIssued, 1}, delta{cPullsExpired, 1}, delta{cWritesCommitted, 0},
			delta{cRxAuthFailed, 0})
		if st := s.RxStale - baseB.RxStale; st > uint64(len(data)) {
			t.Fatalf("B: rx_stale +%d for %d late chunks", st, len(data))
		}
		w.is(t, "after data delivered late", before)
		bridgePort(t, tb.ifA, 3)
		tb.legit(t, 32)
	})
}

// oneRMAFrameAny matches OneRMA frames in either direction.
func oneRMAFrameAny(pred func(*wire.Fields) bool) func(*rawnet.Frame) bool {
	return func(fr *rawnet.Frame) bool {
		f, _, err := rawnet.Parse(fr.Data)
		return err == nil && (pred == nil || pred(&f))
	}
}

// A WRITE or REKEY whose data was pulled can no longer fail: the serving
// engine may commit as soon as the data arrives. Its answers are curried
// with the pull's IV from then on, so answers to the request (NACK, errors
// curried with its IV) stop authenticating (ARCHITECTURE.md, WRITE). But
// REMOTE_AUTHENTICATION_FAILURE is sealed with the public reserved key,
// and the pull's IV travels in clear in the pull's header: an on-path
// attacker who sees the pull can forge that answer curried with it. The
// initiator must drop it (the serving engine never sends
// REMOTE_AUTHENTICATION_FAILURE after a pull); if it accepts it, the op is
// reported failed and then takes effect when the data arrives, breaking
// the promise of portal.Op's WRITE (and REKEY) that a failed op never
// takes effect.
func TestAttackForgedAuthFailureAfterPull(t *testing.T) {
	tb := newAttackBed(t)
	t.Run("write", func(t *testing.T) {
		w := tb.newWriteTarget(t)
		const off = 4096 + 5
		before := w.snapshot()
		neu := w.stamp(off, 0, 5)
		bridgePort(t, tb.ifA, 0)
		defer bridgePort(t, tb.ifA, 3)
		req := tb.writeOp(t, w, off, 0, 31)
		base := stats(t, tb.pb)
		tb.forgedAuthFailureAfterPull(t, req.Data, 31, abi.OpWrite, func() string {
			s := stats(t, tb.pb)
			got := w.wb.Bytes()
			return fmt.Sprintf("writes_committed +%d, the range holds the new bytes: %v, the old: %v", s.WritesCommitted-base.WritesCommitted,
				bytes.Equal(got[off:off+4096], neu), bytes.Equal(got[off:off+4096], before[off:off+4096]))
		})
	})
	t.Run("rekey", func(t *testing.T) {
		rk := ownerRegion(t, tb.pb, 4096, abi.PermRemoteRead|abi.PermRemoteRekey)
		keyBuf, err := tb.pa.RegisterRegion(4096, abi.PermLocalRead)
		if err != nil {
			t.Fatal(err)
		}
		nk := tb.randKey()
		copy(keyBuf.Bytes(), nk[:])
		id := tb.pa.Identity()
		oldRead := kdFor(rk, tb.pa)
		newRead := aesni.DeriveKey(nk, id.Addr.As4(), id.PID, uint8(abi.OpRead))
		bridgePort(t, tb.ifA, 0)
		defer bridgePort(t, tb.ifA, 3)
		tb.tapA.Drain()
		if err := tb.pa.Submit(&portal.Op{
			Type: portal.OpRekey, Slot: tb.aslot, Cookie: 32,
			Remote: ipB, RemoteRegion: rk.ID(), Key: rk.DeriveKey(id.Addr, id.PID, abi.OpRekey),
			Local: keyBuf,
		}); err != nil {
			t.Fatal(err)
		}
		req, err := tb.tapA.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Type == wire.TypeRekeyReq }))
		if err != nil {
			t.Fatal("the REKEY request:", err)
		}
		base := stats(t, tb.pb)
		tb.forgedAuthFailureAfterPull(t, req.Data, 32, abi.OpRekey, func() string {
			s := stats(t, tb.pb)
			bridgePort(t, tb.ifA, 3)
			read := func(k aesni.Key) abi.Status {
				if err := tb.pa.Submit(&portal.Op{
					Type: portal.OpRead, Slot: tb.aslot, Cookie: 33,
					Remote: ipB, RemoteRegion: rk.ID(), Key: k,
					Local: tb.asink, Length: 64,
				}); err != nil {
					t.Fatal(err)
				}
				return waitOne(t, tb.pa, 5*time.Second).Status
			}
			return fmt.Sprintf("remote_rekeys +%d; a READ with the old key's K_d: %v, with the new key's: %v",
				s.RemoteRekeys-base.RemoteRekeys, read(oldRead), read(newRead))
		})
	})
}

// forgedAuthFailureAfterPull relays the pull of req (the attacked slot's
// op, A's bridge port disabled), then forges REMOTE_AUTHENTICATION_FAILURE
// curried with the pull's IV, then relays the data and B's ack. The op
// must complete once, OK; effect describes what B did with the op, for
// the report when it did not.
func (tb *attackBed) forgedAuthFailureAfterPull(t *testing.T, req []byte, cookie uint64, op abi.Op, effect func() string) {
	t.Helper()
	rf := parse(t, req)
	baseA := stats(t, tb.pa)
	pull, data := tb.relayPull(t, req)
	pf := parse(t, pull.Data)
	src, dst := tb.epB, tb.epA
	src.Port, dst.Port = pf.SrcPort, rf.SrcPort
	inject(t, tb.tapA, tb.forgedAnswer(src, dst, &rf, wire.TypeError, abi.StatusRemoteAuthFailure, 0, 0, aesni.Key{}, true, pf.IV[:]))
	// Until A has taken the forged answer: dropped (counted) or completed.
	var early []abi.Completion
	cpl := make([]abi.Completion, 4)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if n, _ := tb.pa.Poll(cpl); n > 0 {
			early = append(early, cpl[:n]...)
			break
		}
		s := stats(t, tb.pa)
		if s.RxAuthFailed+s.RxDropped+s.RxStale > baseA.RxAuthFailed+baseA.RxDropped+baseA.RxStale {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A neither dropped nor took the forged answer")
		}
	}
	// The data and the ack, relayed.
	tb.tapB.Drain()
	inject(t, tb.tapB, frameData(data)...)
	ack, err := tb.tapB.Expect(5*time.Second, fromEngine(func(f *wire.Fields) bool { return f.Tag == rf.Tag }))
	if err != nil {
		t.Fatal("B's answer to the data:", err)
	}
	if af := parse(t, ack.Data); af.Type != wire.TypeAck {
		t.Fatalf("B answered the data with %+v, want an ack", af)
	}
	inject(t, tb.tapA, ack.Data)
	if len(early) > 0 {
		time.Sleep(100 * time.Millisecond)
		t.Errorf("the %v was pulled and its data sent when a forged REMOTE_AUTHENTICATION_FAILURE (public reserved key, "+
			"curried with the pull's IV from the pull's header) completed it: %+v; B then took the data and acknowledged "+
			"(%s): the op was reported failed and took effect", op, early[0], effect())
		return
	}
	c := waitOne(t, tb.pa, 5*time.Second)
	if c.Status != abi.StatusOK || c.Cookie != cookie || c.Op != op {
		t.Fatalf("the %v after a forged answer: %+v, want OK", op, c)
	}
	s := stats(t, tb.pa)
	if got := s.RxAuthFailed + s.RxDropped + s.RxStale - baseA.RxAuthFailed - baseA.RxDropped - baseA.RxStale; got != 1 {
		t.Fatalf("A: rx_auth_failed + rx_dropped + rx_stale +%d, want +1 (the forged answer)", got)
	}
	t.Logf("dropped; %s", effect())
}
