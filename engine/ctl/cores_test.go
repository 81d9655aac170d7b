package ctl_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// hairpin sends the engine's frames to itself out of the port, where the
// steered loopback delivers each to the core it names (requests by their
// sender lane, answers to their initiating core).
func hairpin(c *engine.Config) { c.HairpinSelf = true }

func setup2(t *testing.T, cores int) *env {
	return setupCores(t, cores, hairpin, nil, zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel))
}

// Portals are bound to one core each: the least loaded (portals, then
// slots) unless the application asks for one; a core the engine does not
// have is refused; a closed portal's core is the next one's.
func TestPortalBinding(t *testing.T) {
	e := setup2(t, 2)
	a := dial(t, e, "a")
	b := dial(t, e, "b")
	if a.Core() != 0 || b.Core() != 1 {
		t.Fatalf("cores %d, %d: want 0, 1", a.Core(), b.Core())
	}
	if _, err := a.AllocSlots(4); err != nil {
		t.Fatal(err)
	}
	c := dial(t, e, "c") // two portals each now: the fewer slots win
	if c.Core() != 1 {
		t.Fatalf("third portal on core %d, want 1 (core 0's portal holds 4 slots)", c.Core())
	}
	pinned, err := portal.DialOptions(e.sock, "pinned", portal.Options{PinCore: true, Core: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	if pinned.Core() != 1 {
		t.Fatalf("asked for core 1, got %d", pinned.Core())
	}
	if _, err := portal.DialOptions(e.sock, "nosuch", portal.Options{PinCore: true, Core: 2}); err == nil ||
		!strings.Contains(err.Error(), "asks for core 2; the engine has 2 cores") {
		t.Fatalf("core 2 of 2: %v", err)
	}
	if ps, slots := e.srv.CoreLoad(); ps[0] != 1 || ps[1] != 3 || slots[0] != 4 || slots[1] != 0 {
		t.Fatalf("load: portals %v slots %v", ps, slots)
	}
	b.Close()
	c.Close()
	pinned.Close()
	enginetest.Eventually(t, "the closed portals' reclaim", func() bool { ps, _ := e.srv.CoreLoad(); return ps[1] == 0 })
	if d := dial(t, e, "d"); d.Core() != 1 {
		t.Fatalf("after closing core 1's portals, a new one went to core %d", d.Core())
	}
	st, err := e.srv.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	cores := map[string]uint32{}
	for _, p := range st.Portals {
		cores[p.Name] = p.Core
	}
	if len(cores) != 2 || cores["a"] != 0 || cores["d"] != 1 || len(st.Cores) != 2 {
		t.Fatalf("stats: portals %+v, %d cores", st.Portals, len(st.Cores))
	}
}

// A region registered through a portal of one core is read through
// portals of every core; a rekey through the control socket is in force
// on every core when it returns; after a deregistration returns no core
// serves the region; the stats reply sums the cores.
func TestRegionsAcrossCores(t *testing.T) {
	e := setup2(t, 2)
	own := dial(t, e, "owner")
	src, err := own.RegisterRegion(16384, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	fill(src.Bytes(), 7)
	var readers []*portal.Portal
	var sinks []*portal.Region
	for range 2 {
		r := dial(t, e, "reader")
		r.AllocSlots(2)
		sink, _ := r.RegisterRegion(8192, abi.PermLocalWrite)
		readers, sinks = append(readers, r), append(sinks, sink)
	}
	if readers[0].Core() == readers[1].Core() {
		t.Fatalf("both readers on core %d", readers[0].Core())
	}
	for i, r := range readers {
		if c := readWith(t, r, src, kd(src, r), sinks[i], 0); c.Status != abi.StatusOK || !bytes.Equal(sinks[i].Bytes()[:64], src.Bytes()[:64]) {
			t.Fatalf("reader on core %d: %+v", r.Core(), c)
		}
	}
	old := []aesni.Key{kd(src, readers[0]), kd(src, readers[1])}
	if err := own.Rekey(src, aesni.Key{9, 9, 9}); err != nil {
		t.Fatal(err)
	}
	for i, r := range readers {
		if c := readWith(t, r, src, old[i], sinks[i], 0); c.Status != abi.StatusRemoteAuthFailure {
			t.Fatalf("reader on core %d, old key after rekey: %+v", r.Core(), c)
		}
		if c := readWith(t, r, src, kd(src, r), sinks[i], 0); c.Status != abi.StatusOK {
			t.Fatalf("reader on core %d, new key: %+v", r.Core(), c)
		}
	}
	if err := own.DeregisterRegion(src); err != nil {
		t.Fatal(err)
	}
	// The region's tombstone, on every core: its last key's holders hear
	// REMOTE_REGION, the key before the rekey still fails authentication.
	for i, r := range readers {
		if c := readWith(t, r, src, kd(src, r), sinks[i], 0); c.Status != abi.StatusRemoteRegion {
			t.Fatalf("reader on core %d after deregistration: %+v, want REMOTE_REGION", r.Core(), c)
		}
	}
	if c := readWith(t, readers[1], src, old[1], sinks[1], 0); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("after deregistration, the key before the rekey: %+v", c)
	}
	st, err := e.srv.Stats(nil)
	if err != nil {
		t.Fatal(err)
	}
	var served, rekeys uint64
	for _, c := range st.Cores {
		served, rekeys = served+c.ReqServed, rekeys+c.Rekeys
	}
	if len(st.Cores) != 2 || served != st.ReqServed || st.ReqServed != 4 || rekeys != 1 || st.Rekeys != 1 {
		t.Fatalf("stats: %d cores, served %d (sum %d), rekeys %d (sum %d)", len(st.Cores), st.ReqServed, served, st.Rekeys, rekeys)
	}
}

// Regions registered, rekeyed and deregistered through the control socket
// while portals of both cores read and write them: ops complete with
// their precise statuses and OK reads carry the region's bytes. (The
// portal library unmaps a deregistered region's memory once the call
// returns: a core that touched it afterwards would crash the test.)
func TestRegionChurnAcrossCores(t *testing.T) {
	e := setup2(t, 2)
	own := dial(t, e, "owner")
	type live struct {
		src, dst abi.RegionID
		kr       aesni.Key // both regions' K_r
		seed     byte      // src holds fill(seed)
	}
	var cur atomic.Pointer[live]
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var ok atomic.Uint64
	errs := make(chan error, 4)
	for range 2 {
		p := dial(t, e, "worker")
		p.AllocSlots(4)
		sink, _ := p.RegisterRegion(8192, abi.PermLocalWrite|abi.PermLocalRead)
		fill(sink.Bytes()[4096:], 0x77)
		pid, want := p.Identity().PID, make([]byte, 1024)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := cur.Load()
				if l == nil {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				s, _ := p.Slot()
				var err error
				if i%2 == 0 {
					k := aesni.DeriveKey(l.kr, engineIP.As4(), pid, uint8(abi.OpRead))
					err = p.Submit(&portal.Op{
						Type: portal.OpRead, Slot: s, Cookie: 1,
						Remote: engineIP, RemoteRegion: l.src, Key: k,
						Local: sink, Length: 1024,
					})
				} else {
					k := aesni.DeriveKey(l.kr, engineIP.As4(), pid, uint8(abi.OpWrite))
					err = p.Submit(&portal.Op{
						Type: portal.OpWrite, Slot: s, Cookie: 2,
						Remote: engineIP, RemoteRegion: l.dst, RemoteOffset: uint64(p.Core()) * 1024, Key: k,
						Local: sink, LocalOffset: 4096, Length: 1024,
					})
				}
				if err != nil {
					errs <- err
					return
				}
				c := waitOne(t, p)
				p.Release(c.Slot)
				switch {
				case c.Status == abi.StatusOK:
					ok.Add(1)
					fill(want, l.seed)
					if c.Op == abi.OpRead && !bytes.Equal(sink.Bytes()[:1024], want) {
						errs <- errors.New("an OK read with other bytes than its region's")
						return
					}
				case c.Status == abi.StatusRemoteAuthFailure, c.Status == abi.StatusRemoteRegion:
				default:
					errs <- errors.New("status " + c.Status.String())
					return
				}
			}
		}()
	}
	register := func(seed byte) (*live, *portal.Region, *portal.Region) {
		kr := aesni.Key{seed, 0xee}
		src, err := own.RegisterRegionKey(4096, abi.PermRemoteRead, kr)
		if err != nil {
			t.Fatal(err)
		}
		fill(src.Bytes(), seed)
		dst, err := own.RegisterRegionKey(4096, abi.PermRemoteWrite, kr)
		if err != nil {
			t.Fatal(err)
		}
		return &live{src: src.ID(), dst: dst.ID(), kr: kr, seed: seed}, src, dst
	}
	l, src, dst := register(1)
	cur.Store(l)
	for round := range 10 {
		time.Sleep(2 * time.Millisecond)
		nk := aesni.Key{byte(round), 1}
		for _, r := range []*portal.Region{src, dst} {
			if err := own.Rekey(r, nk); err != nil {
				t.Fatal(err)
			}
		}
		l2 := *l
		l2.kr = nk
		cur.Store(&l2)
		time.Sleep(time.Millisecond)
		oldSrc, oldDst := src, dst
		l, src, dst = register(byte(round + 2))
		cur.Store(l)
		for _, r := range []*portal.Region{oldSrc, oldDst} {
			if err := own.DeregisterRegion(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if ok.Load() == 0 {
		t.Fatal("no op succeeded")
	}
}

// Listen takes one executor per core.
func TestListenExecutorsPerCore(t *testing.T) {
	drv, err := newLoopDrivers(engineConfig(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Stop()
	cfg := ctl.DefaultConfig()
	cfg.Sockets[0].Path = t.TempDir() + "/rmad.sock"
	if _, err := ctl.Listen(cfg, drv.g, drv.execs()[:1], zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "1 executors for an engine of 2 cores") {
		t.Fatalf("one executor for two cores: %v", err)
	}
	s, err := ctl.Listen(cfg, drv.g, drv.execs(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r := s.Resources(); r.Portals != 2*engineConfig().Portals || r.Slots != 2*engineConfig().Slots {
		t.Fatalf("resources %+v: want both cores' portals and slots", r)
	}
}
