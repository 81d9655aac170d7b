package engine

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/wire"
)

// A live engine: every core driven by its own goroutine, as engine/runner
// drives them, over a switch that lands frames on random rx cores and
// hands them to the core Steer names through a locked inbox (the
// hand-over ring of a driver). Closures run on a core's goroutine between
// two iterations (runner.Exec).

type liveCore struct {
	c     *Core
	tx    *testTx
	mu    sync.Mutex
	inbox [][]byte
	execs chan func()
	rng   *rand.Rand
	app   func(now int64) // the application on this core, run every iteration
}

type liveEngine struct {
	g     *Group
	cores []*liveCore
	mac   wire.MAC
}

type liveNet struct {
	es     []*liveEngine
	start  time.Time
	stop   atomic.Bool
	wg     sync.WaitGroup
	handed atomic.Uint64
}

func newLiveEngine(t *testing.T, cfg Config, cores int) *liveEngine {
	e := newMCEngine(t, cfg, cores)
	le := &liveEngine{g: e.g, mac: cfg.LocalMAC}
	for i, tx := range e.txs {
		le.cores = append(le.cores, &liveCore{c: e.g.Core(i), tx: tx, execs: make(chan func()), rng: rand.New(rand.NewPCG(uint64(i), 99))})
	}
	return le
}

// exec runs fn on core i's goroutine and waits for it.
func (e *liveEngine) exec(i int, fn func(c *Core)) {
	done := make(chan struct{})
	e.cores[i].execs <- func() { fn(e.cores[i].c); close(done) }
	<-done
}

func (n *liveNet) now() int64 { return int64(time.Since(n.start)) + 1e9 }

func (n *liveNet) run() {
	n.start = time.Now()
	for _, e := range n.es {
		for _, lc := range e.cores {
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				n.loop(e, lc)
			}()
		}
	}
}

func (n *liveNet) halt() {
	n.stop.Store(true)
	n.wg.Wait()
}

func (n *liveNet) loop(e *liveEngine, lc *liveCore) {
	for !n.stop.Load() {
		select {
		case fn := <-lc.execs:
			fn()
		default:
		}
		lc.mu.Lock()
		in := lc.inbox
		lc.inbox = nil
		lc.mu.Unlock()
		now := n.now()
		for k := 0; k < len(in); k += rxBurst {
			lc.c.ReceiveBurst(now, in[k:min(k+rxBurst, len(in))])
		}
		w := lc.c.Poll(now) + len(in)
		if lc.app != nil {
			lc.app(now)
		}
		out := lc.tx.take()
		for _, f := range out {
			n.route(e, lc, f)
		}
		if w+len(out) == 0 {
			runtime.Gosched()
		}
	}
}

// route delivers f, sent by a core of src, to its destination engine: to
// a random rx core, handed to the core Steer names.
func (n *liveNet) route(src *liveEngine, from *liveCore, f []byte) {
	dst := wire.MAC(f[0:6])
	for _, e := range n.es {
		if e == src || (dst != e.mac && dst != wire.Broadcast) {
			continue
		}
		cores := len(e.cores)
		rx := from.rng.IntN(cores)
		to := Steer(f, e.g.Core(0).cfg.UDPPort, cores)
		switch to {
		case SteerLocal:
			to = rx
		case SteerAll:
			for i := range cores {
				e.cores[i].push(append([]byte(nil), f...))
			}
			continue
		}
		if to != rx {
			n.handed.Add(1)
		}
		e.cores[to].push(f)
	}
}

func (lc *liveCore) push(f []byte) {
	lc.mu.Lock()
	lc.inbox = append(lc.inbox, f)
	lc.mu.Unlock()
}

// liveDir is what the owner of the server's regions publishes for its
// readers and writers: the regions' ids, key and read pattern.
type liveDir struct {
	r, w abi.RegionID
	kr   aesni.Key
	seed byte
}

// Regions registered, rekeyed and deregistered by their owner's core
// while both cores of a serving engine serve them to two busy clients:
// every OK READ has its region's bytes, and once DeregisterRegion has
// returned and every core has passed a quiescent point (Group.Quiesced),
// no core touches the memory again (run with -race: the test goroutine
// writes the memory then, a core's commit into it afterwards is a data
// race, and the memory must stay as it was written).
func TestGroupRegionChurnLive(t *testing.T) {
	ca, cb := mcConfigs()
	ca.LocalIP = laneAddr(t, 2, 0, 1) // the client's two lanes: one to each serving core
	for _, c := range []*Config{&ca, &cb} {
		c.Timeout, c.DispatchTimeout, c.ResolveTimeout = 20*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
		c.KeyCache = 8
	}
	cli, srv := newLiveEngine(t, ca, 2), newLiveEngine(t, cb, 2)
	net := &liveNet{es: []*liveEngine{cli, srv}}
	var dir atomic.Pointer[liveDir]
	var okReads, okWrites, failed atomic.Uint64
	var bad atomic.Pointer[string]
	fail := func(s string) { bad.CompareAndSwap(nil, &s) }
	const opBytes = 1024
	wdata := bytes.Repeat([]byte{0x77}, opBytes)
	for i, lc := range cli.cores {
		app := openApp(t, lc.c, abi.ClassLow, 8)
		mem := make([]byte, 16*opBytes) // slot k: sink at 2k, write source at 2k+1
		for k := range 8 {
			copy(mem[(2*k+1)*opBytes:], wdata)
		}
		local, err := lc.c.RegisterRegion(app.id, mem, abi.PermAll, testKr)
		if err != nil {
			t.Fatal(err)
		}
		busy := make([]bool, 8)
		want := make([]byte, opBytes)
		lc.app = func(now int64) {
			for _, c := range app.completions() {
				k := int(c.Cookie & 0xff)
				busy[k] = false
				switch {
				case c.Status == abi.StatusOK && c.Op == abi.OpRead:
					pattern(want, byte(c.Cookie>>8))
					if !bytes.Equal(mem[2*k*opBytes:][:opBytes], want) {
						fail("an OK READ has bytes other than its region's")
					}
					okReads.Add(1)
				case c.Status == abi.StatusOK:
					okWrites.Add(1)
				case c.Status == abi.StatusRemoteAuthFailure, c.Status == abi.StatusRemoteRegion, c.Status == abi.StatusTimeout:
					failed.Add(1)
				default:
					fail("unexpected status " + c.Status.String())
				}
			}
			d := dir.Load()
			if d == nil {
				return
			}
			for k := range 8 {
				if busy[k] {
					continue
				}
				op := abi.OpRead
				cmd := readCmd(app.slots[k], ipOf("10.0.0.2"), d.r, uint64(k%4)*opBytes, local, uint64(2*k)*opBytes, opBytes, uint64(d.seed)<<8|uint64(k))
				if k%2 == 1 { // each client core its own half of the target: one lane, one serving core per byte
					op = abi.OpWrite
					cmd.Op, cmd.RemoteRegion, cmd.LocalOffset = op, d.w, uint64(2*k+1)*opBytes
					cmd.RemoteOffset = uint64(2*i+k/2%2) * opBytes
				}
				cmd.Key = aesni.DeriveKey(d.kr, ca.LocalIP.As4(), testPID, uint8(op))
				app.post(t, cmd)
				busy[k] = true
			}
		}
	}
	owner := openApp(t, srv.cores[0].c, abi.ClassLow, 0)
	net.run()
	defer net.halt()
	var freed [][]byte
	for round := range 6 {
		seed := byte(round + 1)
		rmem, wmem := make([]byte, 4*opBytes), make([]byte, 4*opBytes)
		pattern(rmem, seed)
		d := &liveDir{kr: aesni.Key{seed, 1, 2, 3}, seed: seed}
		srv.exec(0, func(c *Core) {
			var err error
			if d.r, err = c.RegisterRegion(owner.id, rmem, abi.PermRemoteRead, d.kr); err != nil {
				fail(err.Error())
			}
			if d.w, err = c.RegisterRegion(owner.id, wmem, abi.PermRemoteWrite, d.kr); err != nil {
				fail(err.Error())
			}
		})
		dir.Store(d)
		time.Sleep(3 * time.Millisecond)
		d2 := *d
		d2.kr[0] ^= 0x80
		srv.exec(0, func(c *Core) {
			for _, rid := range []abi.RegionID{d.r, d.w} {
				if err := c.Rekey(owner.id, rid, d2.kr); err != nil {
					fail(err.Error())
				}
			}
		})
		dir.Store(&d2)
		time.Sleep(3 * time.Millisecond)
		srv.exec(0, func(c *Core) {
			for _, rid := range []abi.RegionID{d.r, d.w} {
				if err := c.DeregisterRegion(owner.id, rid); err != nil {
					fail(err.Error())
				}
			}
		})
		v := srv.g.Version()
		for !srv.g.Quiesced(v) {
			runtime.Gosched()
		}
		// Freed: the engine must never read or write it again.
		clear(rmem)
		for i := range wmem {
			wmem[i] = 0xdd
		}
		freed = append(freed, rmem, wmem)
	}
	dir.Store(nil)
	time.Sleep(time.Millisecond)
	net.halt()
	if s := bad.Load(); s != nil {
		t.Fatal(*s)
	}
	for i, m := range freed {
		want := byte(0)
		if i%2 == 1 {
			want = 0xdd
		}
		if bytes.Count(m, []byte{want}) != len(m) {
			t.Fatalf("freed region %d was written after its deregistration was quiesced", i)
		}
	}
	if okReads.Load() == 0 || okWrites.Load() == 0 {
		t.Fatalf("no op succeeded: %d READs, %d WRITEs OK, %d failed", okReads.Load(), okWrites.Load(), failed.Load())
	}
	if net.handed.Load() == 0 {
		t.Fatal("no frame was handed between cores")
	}
	var served [2]uint64
	for i, lc := range srv.cores {
		st := lc.c.Stats()
		served[i] = st.ReqServed + st.WritesCommitted
		if served[i] == 0 {
			t.Fatalf("serving core %d served nothing", i)
		}
		if err := lc.c.Audit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.g.Audit(); err != nil {
		t.Fatal(err)
	}
	t.Logf("READs OK %d, WRITEs OK %d, failed %d; served by core: %v; handed over %d", okReads.Load(), okWrites.Load(), failed.Load(), served, net.handed.Load())
}
