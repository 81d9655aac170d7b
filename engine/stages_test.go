package engine

import (
	"bytes"
	"slices"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/stage"
)

// traceCounter is a counter whose reads differ by distinct powers of two:
// the section between its k-th and k+1-th read lasts 2^k cycles, so the
// cycles each stage was charged say exactly which sections it got, and in
// what order (trace).
type traceCounter struct{ k uint }

func (c *traceCounter) read() uint64 {
	c.k++
	return 1<<c.k - 1
}

// trace is the stages s charged its sections to, in order, consecutive
// sections of one stage as one (a frame received alone marks Receive
// again where a burst does not), the section running now last.
func trace(s *stage.Stages) []stage.Stage {
	sn := s.Snapshot(0)
	var out []stage.Stage
	for bit := 1; bit < 64; bit++ {
		for st := range stage.NumStages {
			if sn.Cycles[st]&(1<<bit) != 0 && (len(out) == 0 || out[len(out)-1] != st) {
				out = append(out, st)
			}
		}
	}
	return out
}

func stageBackends() []string {
	if mbBuilt {
		return []string{CryptoGo, CryptoIPsecMB}
	}
	return []string{CryptoGo}
}

// TestStagesScripted scripts one 64 B READ between two cores, playing the
// runner's part (Receive before each burst), and checks the sections each
// core's marks charge, in order: what engine/stage documents lands where,
// on either seal backend (batched or not, the same sequence).
func TestStagesScripted(t *testing.T) {
	for _, crypto := range stageBackends() {
		t.Run(crypto, func(t *testing.T) {
			ca, cb := pairConfigs(crypto)
			p := newPair(t, ca, cb)
			app := openApp(t, p.a, abi.ClassLow, 2)
			srv := openApp(t, p.b, abi.ClassLow, 0)
			src := make([]byte, 4096)
			pattern(src, 9)
			rs, _ := p.b.RegisterRegion(srv.id, src, abi.PermRemoteRead, testKr)
			dst := make([]byte, 4096)
			rd, _ := p.a.RegisterRegion(app.id, dst, abi.PermAll, testKr)
			app.post(t, readCmd(app.slots[0], ipOf("10.0.0.2"), rs, 0, rd, 0, 64, 1))
			p.run() // ARP and a first READ, unmarked
			if c := app.completions(); len(c) != 1 || c[0].Status != abi.StatusOK {
				t.Fatalf("first READ: %+v", c)
			}

			var ka, kb traceCounter
			sa, sb := stage.New(ka.read), stage.New(kb.read)
			p.a.SetStages(sa)
			p.b.SetStages(sb)
			app.post(t, readCmd(app.slots[1], ipOf("10.0.0.2"), rs, 128, rd, 1024, 64, 2))
			p.a.Poll(p.now) // the command taken, the request built and sealed
			sb.Enter(stage.Receive)
			p.ta.deliverTo(p.now, p.b) // the request received, opened, queued
			p.b.Poll(p.now)            // served: the response built and sealed
			sa.Enter(stage.Receive)
			p.tb.deliverTo(p.now, p.a) // the response opened into the sink, the op completed
			p.a.Poll(p.now)            // its completion published
			if c := app.completions(); len(c) != 1 || c[0].Status != abi.StatusOK || !bytes.Equal(dst[1024:1088], src[128:192]) {
				t.Fatalf("second READ: %+v", c)
			}

			L, R, O, P, B, S, C, E := stage.Loop, stage.Receive, stage.Open, stage.Protocol, stage.Build, stage.Seal, stage.Completion, stage.EmptyRings
			wantA := []stage.Stage{L, P, B, S, B, R, O, P, E, P, B, C}
			wantB := []stage.Stage{L, R, O, P, E, P, B, S, B}
			if got := trace(sa); !slices.Equal(got, wantA) {
				t.Errorf("initiator's sections %v, want %v", got, wantA)
			}
			if got := trace(sb); !slices.Equal(got, wantB) {
				t.Errorf("server's sections %v, want %v", got, wantB)
			}
			// Stages off again: no marks.
			p.a.SetStages(nil)
			before := ka.k
			app.post(t, readCmd(app.slots[1], ipOf("10.0.0.2"), rs, 0, rd, 0, 64, 3))
			p.run()
			if ka.k != before {
				t.Errorf("%d counter reads with no stages", ka.k-before)
			}
		})
	}
}

// TestStagesSelfLoop: a READ of the core's own region loops back inside
// Poll; each frame of the self-loop is charged to Receive, Open and
// Protocol, and Build resumes after it.
func TestStagesSelfLoop(t *testing.T) {
	for _, crypto := range stageBackends() {
		t.Run(crypto, func(t *testing.T) {
			cfg := testConfig("10.0.0.1", 1)
			cfg.Crypto = crypto
			tx := newTestTx(64)
			c := newCore(t, cfg, tx)
			app := openApp(t, c, abi.ClassLow, 1)
			m := make([]byte, 8192)
			pattern(m, 5)
			r, _ := c.RegisterRegion(app.id, m, abi.PermAll, testKr)
			var k traceCounter
			s := stage.New(k.read)
			c.SetStages(s)
			app.post(t, readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 64, 1))
			c.Poll(1000)
			if cpl := app.completions(); len(cpl) != 1 || cpl[0].Status != abi.StatusOK || !bytes.Equal(m[4096:4160], m[:64]) {
				t.Fatalf("completions %+v", cpl)
			}
			L, R, O, P, B, S, C := stage.Loop, stage.Receive, stage.Open, stage.Protocol, stage.Build, stage.Seal, stage.Completion
			want := []stage.Stage{L, P, B, S, B, R, O, P, B, S, B, R, O, P, B, C}
			if got := trace(s); !slices.Equal(got, want) {
				t.Errorf("sections %v, want %v", got, want)
			}
		})
	}
}

// TestStagesAllocs: with stages the hot path still allocates nothing.
func TestStagesAllocs(t *testing.T) {
	for _, crypto := range stageBackends() {
		tx := newTestTx(64)
		cfg := testConfig("10.0.0.1", 1)
		cfg.Crypto = crypto
		c := newCore(t, cfg, tx)
		var k traceCounter
		s := stage.New(k.read)
		c.SetStages(s)
		app := openApp(t, c, abi.ClassLow, 1)
		m := make([]byte, 8192)
		r, _ := c.RegisterRegion(app.id, m, abi.PermAll, testKr)
		for _, op := range []abi.Op{abi.OpRead, abi.OpWrite} {
			cmd := app.keyed(readCmd(app.slots[0], ipOf("10.0.0.1"), r, 0, r, 4096, 4096, 1))
			cmd.Op = op
			cmd.Key = [16]byte{}
			app.keyed(cmd)
			var cpl abi.Completion
			now := int64(1000)
			allocs := testing.AllocsPerRun(200, func() {
				s.Reset() // the trace counter's shifts run out after 63 reads
				k.k = 0
				b := app.cmd.Reserve()
				cmd.Encode(b)
				app.cmd.Commit()
				app.cmd.Publish()
				for range 4 {
					c.Poll(now)
					s.Enter(stage.Receive)
					tx.deliverTo(now, c)
				}
				c.Poll(now)
				e := app.cpl.Peek()
				cpl.Decode(e)
				app.cpl.Advance()
				app.cpl.Release()
				now += 100
			})
			if allocs != 0 || cpl.Status != abi.StatusOK {
				t.Errorf("%s %v: %v allocs per op, status %v", crypto, op, allocs, cpl.Status)
			}
		}
	}
}
