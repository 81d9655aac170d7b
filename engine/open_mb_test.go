//go:build cgo && linux && amd64

package engine

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/aesni/mb"
	"github.com/onerma/onerma/wire"
)

// forged is a copy of fr whose tag does not authenticate.
func forged(fr []byte) []byte {
	b := append([]byte(nil), fr...)
	b[len(b)-1] ^= 0x80
	return b
}

// burstOutcome is what a burst scenario leaves: completions, both cores'
// counters, the initiator's and the server's region memory, and the
// frames a scenario chose to record (nil: none), byte for byte.
type burstOutcome struct {
	cpls     []abi.Completion
	sa, sb   Stats
	loc, srv []byte
	frames   [][]byte
}

// readBurst runs a 4 KB READ on backend crypto whose three response
// chunks are handed to the initiator as the bursts shape makes of them
// (then, on the same slot, a 64 B READ whose answer comes with
// reuse(first op's frames) in one burst), and returns the outcome.
func readBurst(t *testing.T, crypto string, shape func(ch [][]byte) [][][]byte, reuse func(old [][]byte, fresh []byte) [][]byte) burstOutcome {
	ca, cb := pairConfigs(crypto)
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, abi.ClassLow, 4)
	srv := openApp(t, p.b, abi.ClassLow, 0)
	src := make([]byte, 8192)
	pattern(src, 3)
	rs, _ := p.b.RegisterRegion(srv.id, src, abi.PermRemoteRead, testKr)
	loc := make([]byte, 8192)
	pattern(loc, 0xee) // what a forgery must never reach outside the op's range
	rd, _ := p.a.RegisterRegion(app.id, loc, abi.PermAll, testKr)
	app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 8000, 1, 1)) // resolves b's MAC
	p.run()
	var out burstOutcome
	out.cpls = append(out.cpls, app.completions()...)
	exchange := func(cmd *abi.Command) [][]byte {
		app.post(t, cmd)
		p.a.Poll(p.now)
		p.ta.deliverTo(p.now, p.b)
		p.b.Poll(p.now)
		return p.tb.take()
	}
	chunks := exchange(readCmd(app.slots[1], ipOf("10.0.0.2"), rs, 100, rd, 1000, 4096, 2))
	if len(chunks) != 3 {
		t.Fatalf("want 3 response chunks, got %d", len(chunks))
	}
	for _, b := range shape(chunks) {
		p.a.ReceiveBurst(p.now, b)
	}
	p.a.Poll(p.now)
	out.cpls = append(out.cpls, app.completions()...)
	if reuse != nil {
		fresh := exchange(readCmd(app.slots[1], ipOf("10.0.0.2"), rs, 5000, rd, 6000, 64, 3))
		p.a.ReceiveBurst(p.now, reuse(chunks, fresh[0]))
		p.a.Poll(p.now)
		out.cpls = append(out.cpls, app.completions()...)
	}
	auditBoth(t, p)
	out.sa, out.sb, out.loc, out.srv = p.a.Stats(), p.b.Stats(), loc, src
	return out
}

// sameOnBackends runs scenario on "go" (frame by frame) and "ipsec-mb"
// (batched opens) and wants identical outcomes; it returns ipsec-mb's.
func sameOnBackends(t *testing.T, scenario func(crypto string) burstOutcome) burstOutcome {
	t.Helper()
	g, m := scenario(CryptoGo), scenario(CryptoIPsecMB)
	if !reflect.DeepEqual(g.cpls, m.cpls) {
		t.Fatalf("completions: go %+v, ipsec-mb %+v", g.cpls, m.cpls)
	}
	if g.sa != m.sa || g.sb != m.sb {
		t.Fatalf("stats differ:\ngo       %+v / %+v\nipsec-mb %+v / %+v", g.sa, g.sb, m.sa, m.sb)
	}
	if !bytes.Equal(g.loc, m.loc) || !bytes.Equal(g.srv, m.srv) {
		t.Fatal("region memory differs between backends")
	}
	if !reflect.DeepEqual(g.frames, m.frames) {
		t.Fatalf("frames sent differ between backends:\ngo       %v\nipsec-mb %v", frameTypes(g.frames), frameTypes(m.frames))
	}
	return m
}

// wantRead checks a READ outcome: ops OK, the data in place, nothing
// outside the op's range touched.
func wantRead(t *testing.T, o burstOutcome, ops int) {
	t.Helper()
	if len(o.cpls) != ops {
		t.Fatalf("completions %+v", o.cpls)
	}
	for _, c := range o.cpls {
		if c.Status != abi.StatusOK {
			t.Fatalf("completions %+v", o.cpls)
		}
	}
	if !bytes.Equal(o.loc[1000:1000+4096], o.srv[100:100+4096]) {
		t.Fatal("READ data wrong")
	}
	orig := make([]byte, len(o.loc))
	pattern(orig, 0xee)
	if !bytes.Equal(o.loc[1:1000], orig[1:1000]) || !bytes.Equal(o.loc[5096:6000], orig[5096:6000]) {
		t.Fatal("memory outside the ops' ranges changed")
	}
}

// Every chunk twice in one burst (reversed): the second copy of a pending
// chunk must not be opened into the same place while the first is queued.
func TestBurstDuplicateChunk(t *testing.T) {
	o := sameOnBackends(t, func(crypto string) burstOutcome {
		return readBurst(t, crypto, func(ch [][]byte) [][][]byte {
			return [][][]byte{{ch[2], ch[2], ch[1], ch[1], ch[0], ch[0]}}
		}, nil)
	})
	wantRead(t, o, 2)
	if o.sa.RxDuplicate+o.sa.RxStale != 3 || o.sa.RxAuthFailed != 0 {
		t.Fatalf("stats %+v", o.sa)
	}
}

// A forged copy next to the genuine chunk, in both orders: the forgery
// fails, zeroes nothing the genuine chunk wrote, and the op completes.
func TestBurstForgedAndGenuineChunk(t *testing.T) {
	for _, first := range []string{"forged", "genuine"} {
		t.Run(first, func(t *testing.T) {
			o := sameOnBackends(t, func(crypto string) burstOutcome {
				return readBurst(t, crypto, func(ch [][]byte) [][][]byte {
					pair := [][]byte{forged(ch[1]), ch[1]}
					if first == "genuine" {
						pair[0], pair[1] = pair[1], pair[0]
					}
					return [][][]byte{{ch[0], pair[0], pair[1], forged(ch[2]), ch[2]}}
				}, nil)
			})
			wantRead(t, o, 2)
			wantAuth := uint64(2)
			if first == "genuine" {
				wantAuth = 1 // the copy after the genuine chunk is a duplicate
			}
			if o.sa.RxAuthFailed != wantAuth {
				t.Fatalf("stats %+v", o.sa)
			}
		})
	}
}

// The op completes in the burst; copies of its chunks after it, and in the
// next burst next to the answer of the slot's next op, are stale.
func TestBurstCompletionThenStale(t *testing.T) {
	o := sameOnBackends(t, func(crypto string) burstOutcome {
		return readBurst(t, crypto, func(ch [][]byte) [][][]byte {
			return [][][]byte{{ch[0], ch[1], ch[2], ch[1], forged(ch[0])}}
		}, func(old [][]byte, fresh []byte) [][]byte {
			return [][]byte{old[0], fresh, old[2], forged(fresh), fresh}
		})
	})
	wantRead(t, o, 3)
	if !bytes.Equal(o.loc[6000:6064], o.srv[5000:5064]) {
		t.Fatal("second READ's data wrong")
	}
	if o.sa.RxStale != 6 || o.sa.RxAuthFailed != 0 {
		t.Fatalf("stats %+v", o.sa)
	}
}

// A 4 KB WRITE's data chunks and its commit in one burst at the server,
// with a forged chunk and duplicates, then a second WRITE on the same
// slot with the first one's data replayed in its burst: the chunk after
// the commit is stale (its pull ended in the same burst).
func TestBurstWriteDataAndCommit(t *testing.T) {
	o := sameOnBackends(t, func(crypto string) burstOutcome {
		ca, cb := pairConfigs(crypto)
		p := newWPair(t, ca, cb)
		var out burstOutcome
		pulled := func(cmd *abi.Command) [][]byte {
			p.app.post(t, cmd)
			p.a.Poll(p.now)
			p.ta.deliverTo(p.now, p.b) // ①
			p.b.Poll(p.now)
			p.tb.deliverTo(p.now, p.a) // ②: a sends the data
			p.a.Poll(p.now)
			return p.ta.take()
		}
		d := pulled(p.cmd(1, p.rd, 0, 4096))
		if len(d) != 3 || frameType(d[0]) != wire.TypeWriteData {
			t.Fatalf("want 3 data chunks, got %d", len(d))
		}
		p.b.ReceiveBurst(p.now, [][]byte{d[2], forged(d[0]), d[0], d[0], d[1], forged(d[1]), d[2]})
		p.run()
		out.cpls = append(out.cpls, p.app.completions()...)
		d2 := pulled(p.cmd(1, p.rd, 4096, 64))
		p.b.ReceiveBurst(p.now, [][]byte{d[0], d2[0], d[1]})
		p.run()
		out.cpls = append(out.cpls, p.app.completions()...)
		auditBoth(t, p.pair)
		out.sa, out.sb, out.loc, out.srv = p.a.Stats(), p.b.Stats(), p.src, p.dst
		return out
	})
	if len(o.cpls) != 2 || o.cpls[0].Status != abi.StatusOK || o.cpls[1].Status != abi.StatusOK {
		t.Fatalf("completions %+v", o.cpls)
	}
	if !bytes.Equal(o.srv[:4096], o.loc[:4096]) || !bytes.Equal(o.srv[4096:4096+64], o.loc[:64]) {
		t.Fatal("committed data wrong")
	}
	if o.sb.WritesCommitted != 3 || o.sb.RxAuthFailed != 1 || o.sb.RxDuplicate != 1 || o.sb.RxStale != 4 {
		t.Fatalf("server stats %+v", o.sb)
	}
}

func frameTypes(frames [][]byte) []wire.Type {
	var ts []wire.Type
	for _, f := range frames {
		ts = append(ts, frameType(f))
	}
	return ts
}

// rekeyBurst takes a remote REKEY of b's region up to its data (③, the
// new K_r) on the wire, then hands b, in one burst, that data and a READ
// request signed with the K_d of the old key, the data first when
// rekeyFirst. It records b's answers to the burst, delivers them, checks
// that the new key is installed afterwards and returns the outcome.
func rekeyBurst(t *testing.T, crypto string, rekeyFirst bool) burstOutcome {
	p := newSecPairCrypto(t, crypto)
	editRegion(p.b, p.rs, func(r *region) { r.perm |= abi.PermRemoteRekey })
	newKr := aesni.Key{0xab, 0xcd, 0xef, 1}
	copy(p.dst[4096:], newKr[:])

	p.app.post(t, p.rekeyCmd(3, 4096, aesni.DeriveKey(testKr, p.app.ip, testPID, uint8(abi.OpRekey))))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b) // ①
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a) // ②: a sends ③
	// A READ keyed (by post) with K_d(READ) of the old K_r.
	p.app.post(t, readCmd(p.app.slots[1], ipOf("10.0.0.2"), p.rs, 64, p.rd, 64, 1000, 1))
	p.a.Poll(p.now)
	fr := p.ta.take()
	if len(fr) != 2 || frameType(fr[0]) != wire.TypeWriteData || frameType(fr[1]) != wire.TypeReadReq {
		t.Fatalf("want the rekey data and a read request, got %v", frameTypes(fr))
	}
	if !rekeyFirst {
		fr[0], fr[1] = fr[1], fr[0]
	}
	p.b.ReceiveBurst(p.now, fr)
	p.b.Poll(p.now)
	var out burstOutcome
	out.frames = p.tb.take() // ④ and the read's answer, byte for byte
	p.a.ReceiveBurst(p.now, out.frames)
	p.run()
	out.cpls = p.app.completions()

	// Whatever the order, the new key is installed after the burst.
	p.read(t, 2, 64, abi.StatusRemoteAuthFailure)
	p.readKey(t, 2, 64, aesni.DeriveKey(newKr, p.app.ip, testPID, uint8(abi.OpRead)), abi.StatusOK)
	auditBoth(t, p.pair)
	out.sa, out.sb, out.loc, out.srv = p.a.Stats(), p.b.Stats(), p.dst, p.src
	return out
}

// A remote REKEY's data and a READ request signed with a K_d of the old
// key in one burst: the data's commit installs the new key, so it is
// opened and finished alone (dispatch.go: rekeyData). Data first: the request is checked
// against the new key and fails (REMOTE_AUTHENTICATION_FAILURE), as frame
// by frame; request first: it authenticated under the old key and is
// served.
func TestBurstRemoteRekeyAndRequest(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rekeyFirst bool
		want       abi.Status
		authFailed uint64 // b's ReqAuthFailed, with the old-key read after
	}{
		{"rekey-first", true, abi.StatusRemoteAuthFailure, 2},
		{"request-first", false, abi.StatusOK, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := sameOnBackends(t, func(crypto string) burstOutcome {
				return rekeyBurst(t, crypto, tc.rekeyFirst)
			})
			if len(o.cpls) != 2 {
				t.Fatalf("completions %+v", o.cpls)
			}
			for _, c := range o.cpls {
				want := abi.StatusOK
				if c.Op == abi.OpRead {
					want = tc.want
				}
				if c.Status != want {
					t.Fatalf("completions %+v", o.cpls)
				}
			}
			if o.sb.RemoteRekeys != 1 || o.sb.ReqAuthFailed != tc.authFailed {
				t.Fatalf("server stats %+v", o.sb)
			}
			served := bytes.Equal(o.loc[64:1064], o.srv[64:1064])
			if served != (tc.want == abi.StatusOK) || (!served && !bytes.Equal(o.loc[64:1064], make([]byte, 1000))) {
				t.Fatalf("READ sink: served %v, want %v", served, tc.want)
			}
		})
	}
}

// keyLeft is an AEAD that left its cache, with its mb.Key (if it had one)
// and the opens and seals then queued on that key.
type keyLeft struct {
	a       *aesni.AEAD
	k       *mb.Key
	pending int
}

// evictBurst runs, with key caches of one entry on both cores, a 4 KB
// WRITE whose data reaches b in one burst with three READ requests that
// each evict the AEAD of the frame queued before them (the WRITE's K_d
// while its first chunk is queued, then the first READ's while it is
// queued); the WRITE's other chunks, then under an AEAD out of its cache,
// must be opened alone. b's answers (the WRITE's ack, an authentication
// failure, the READs' chunks) reach a in one burst, interleaved, where the
// WRITE's and the first READ's AEADs were evicted when later commands were
// posted. It returns the outcome and the AEADs that left their caches.
func evictBurst(t *testing.T, crypto string) (burstOutcome, []keyLeft) {
	ca, cb := pairConfigs(crypto)
	ca.KeyCache, cb.KeyCache = 1, 1
	p := newWPair(t, ca, cb)
	var left []keyLeft
	for _, c := range []*Core{p.a, p.b} {
		onMB := mbOf(c) != nil // not c: the hook must not keep the core alive (its cleanup)
		for _, kc := range []*aesni.Cache{c.ini.keys, c.srv.keys} {
			kc.SetOnRemove(func(a *aesni.AEAD) {
				l := keyLeft{a: a}
				if k, ok := a.Ext().(*mb.Key); ok {
					l.k, l.pending = k, k.Pending()
				}
				left = append(left, l)
				if onMB {
					mbForget(a)
				}
			})
		}
	}
	pattern(p.dst[4096:], 0x55)
	loc2 := make([]byte, 8192)
	pattern(loc2, 0xee)
	r2, err := p.a.RegisterRegion(p.app.id, loc2, abi.PermAll, testKr)
	if err != nil {
		t.Fatal(err)
	}

	p.app.post(t, p.cmd(1, p.rd, 0, 4096))
	p.a.Poll(p.now)
	p.ta.deliverTo(p.now, p.b) // ①
	p.b.Poll(p.now)
	p.tb.deliverTo(p.now, p.a) // ②: a sends the data
	d := p.ta.take()
	if len(d) != 3 || frameType(d[0]) != wire.TypeWriteData {
		t.Fatalf("want 3 data chunks, got %v", frameTypes(d))
	}
	// A: ro into src[4096:]; X: a wrong key; B: dst[4096:] into loc2[4096:].
	p.app.post(t, readCmd(p.app.slots[2], ipOf("10.0.0.2"), p.rro, 0, p.rs, 4096, 4096, 2))
	x := readCmd(p.app.slots[3], ipOf("10.0.0.2"), p.rd, 0, r2, 0, 64, 3)
	x.Key = aesni.Key{1, 2, 3}
	p.app.post(t, x)
	p.app.post(t, readCmd(p.app.slots[4], ipOf("10.0.0.2"), p.rd, 4096, r2, 4096, 4096, 4))
	p.a.Poll(p.now)
	q := p.ta.take()
	if len(q) != 3 || frameType(q[0]) != wire.TypeReadReq {
		t.Fatalf("want 3 read requests, got %v", frameTypes(q))
	}
	// reqA evicts the WRITE's AEAD (d[0] queued), reqX reqA's (reqA
	// queued); d[1], forged(d[2]) and d[2] find the WRITE's AEAD gone.
	p.b.ReceiveBurst(p.now, [][]byte{d[0], q[0], q[1], d[1], forged(d[2]), q[2], d[2]})
	p.b.Poll(p.now)
	var out burstOutcome
	out.frames = p.tb.take()
	by := map[abi.SlotID][][]byte{}
	for _, fr := range out.frames {
		var f wire.Fields
		if _, err := wire.Decode(fr, &f); err != nil {
			t.Fatal(err)
		}
		by[abi.SlotID(f.Tag>>32)] = append(by[abi.SlotID(f.Tag>>32)], fr)
	}
	w, a, xf, b := by[p.app.slots[1]], by[p.app.slots[2]], by[p.app.slots[3]], by[p.app.slots[4]]
	if len(w) != 1 || len(a) != 3 || len(xf) != 1 || len(b) != 3 {
		t.Fatalf("answers %v", frameTypes(out.frames))
	}
	p.a.ReceiveBurst(p.now, [][]byte{a[0], b[0], w[0], a[1], b[1], xf[0], forged(a[2]), a[2], forged(b[2]), b[2]})
	p.run()
	out.cpls = p.app.completions()
	auditBoth(t, p.pair)
	out.sa, out.sb = p.a.Stats(), p.b.Stats()
	out.loc = append(append([]byte(nil), p.src...), loc2...)
	out.srv = append(append([]byte(nil), p.dst...), p.ro...)
	return out, left
}

// An AEAD leaves its cache in the middle of a burst (a key cache of one
// entry: preparing a request evicts the AEAD of the frame queued before
// it), and frames arrive whose AEAD is out of its cache: every frame gets
// the outcome of frame-by-frame delivery, in the same order; each evicted
// mb.Key is freed once its queued open has run, none is used or rebuilt
// afterwards (mb panics on a freed key), none leaks.
func TestBurstKeyLeavesCache(t *testing.T) {
	var queued int
	o := sameOnBackends(t, func(crypto string) burstOutcome {
		o, left := evictBurst(t, crypto)
		for _, l := range left {
			switch x := l.a.Ext().(type) {
			case nil: // the go backend
				if crypto == CryptoIPsecMB {
					t.Fatal("an evicted AEAD not marked gone")
				}
			case mbGone:
			case *mb.Key:
				t.Fatalf("an AEAD out of its cache holds an mb.Key (freed: %v): leaked or used after release", x.Freed())
			}
			if l.k != nil {
				if !l.k.Freed() || l.k.Pending() != 0 {
					t.Fatalf("evicted key not freed (%d jobs pending)", l.k.Pending())
				}
				if l.pending > 0 {
					queued++
				}
			}
		}
		return o
	})
	if queued != 2 {
		t.Fatalf("%d keys left their cache with an open queued, want 2 (the scenario lost its point)", queued)
	}
	want := map[uint64]abi.Status{1: abi.StatusOK, 2: abi.StatusOK, 3: abi.StatusRemoteAuthFailure, 4: abi.StatusOK}
	if len(o.cpls) != len(want) {
		t.Fatalf("completions %+v", o.cpls)
	}
	for _, c := range o.cpls {
		if c.Status != want[c.Cookie] {
			t.Fatalf("completions %+v", o.cpls)
		}
	}
	loc, loc2 := o.loc[:8192], o.loc[8192:]
	dst, ro := o.srv[:8192], o.srv[8192:]
	untouched := make([]byte, 8192)
	pattern(untouched, 0xee)
	if !bytes.Equal(dst[:4096], loc[:4096]) || !bytes.Equal(loc[4096:], ro[:4096]) ||
		!bytes.Equal(loc2[4096:], dst[4096:]) || !bytes.Equal(loc2[:4096], untouched[:4096]) {
		t.Fatal("data wrong")
	}
	if o.sb.ReqAuthFailed != 1 || o.sb.RxAuthFailed != 1 || o.sb.WritesCommitted != 2 || o.sa.RxAuthFailed != 2 {
		t.Fatalf("stats:\n%+v\n%+v", o.sa, o.sb)
	}
}
