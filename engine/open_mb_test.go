//go:build cgo && linux && amd64

package engine

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/wire"
)

// forged is a copy of fr whose tag does not authenticate.
func forged(fr []byte) []byte {
	b := append([]byte(nil), fr...)
	b[len(b)-1] ^= 0x80
	return b
}

// burstOutcome is what a burst scenario leaves: completions, both cores'
// counters, the initiator's and the server's region memory.
type burstOutcome struct {
	cpls     []abi.Completion
	sa, sb   Stats
	loc, srv []byte
}

// readBurst runs a 4 KB READ on backend crypto whose three response
// chunks are handed to the initiator as the bursts shape makes of them
// (then, on the same slot, a 64 B READ whose answer comes with
// reuse(first op's frames) in one burst), and returns the outcome.
func readBurst(t *testing.T, crypto string, shape func(ch [][]byte) [][][]byte, reuse func(old [][]byte, fresh []byte) [][]byte) burstOutcome {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	ca.Crypto, cb.Crypto = crypto, crypto
	p := newPair(t, ca, cb)
	app := openApp(t, p.a, ClassLow, 4)
	srv := openApp(t, p.b, ClassLow, 0)
	src := make([]byte, 8192)
	pattern(src, 3)
	rs, _ := p.b.RegisterRegion(srv.id, src, PermRemoteRead, testKr)
	loc := make([]byte, 8192)
	pattern(loc, 0xee) // what a forgery must never reach outside the op's range
	rd, _ := p.a.RegisterRegion(app.id, loc, PermAll, testKr)
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
		ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
		ca.Crypto, cb.Crypto = crypto, crypto
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
