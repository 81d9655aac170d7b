package portal_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// These tests run a real engine core in this process: engine/runner over
// an engine/port/memport loopback port, served by engine/ctl on a unix socket,
// so a portal talks to it exactly as to rmad (the test binary links the
// engine; the portal package itself never does).

var engineIP = enginetest.IP

func startEngine(t testing.TB) string {
	t.Helper()
	return startEngineWith(t, engineOpts{})
}

// engineOpts adjust the in-process engine of startEngineWith.
type engineOpts struct {
	engine func(*engine.Config)            // engine core config (after the tests' defaults)
	ctl    func(*ctl.Config)               // control server config
	port   func(*memport.Port) runner.Port // wraps the loopback port (e.g. to drop frames)
}

// startEngineWith starts an in-process engine (internal/enginetest; 16
// slots per application, rings of 64) and returns its socket.
func startEngineWith(t testing.TB, o engineOpts) string {
	t.Helper()
	return enginetest.Start(t, enginetest.Opts{Engine: o.engine, Port: o.port, Ctl: func(c *ctl.Config) {
		c.Sockets[0].Policy.Default = 16
		c.CmdCap, c.CplCap = 64, 64
		if o.ctl != nil {
			o.ctl(c)
		}
	}}).Socket
}

// dropPort drops a fraction of the frames the engine sends (seeded, so a
// run is repeatable up to scheduling). Frames the core sends to itself
// cross the port only with engine.Config.HairpinSelf.
type dropPort struct {
	*memport.Port
	rate    float64
	rng     *rand.Rand
	dropped atomic.Uint64
}

func newDropPort(p *memport.Port, rate float64, seed uint64) *dropPort {
	return &dropPort{Port: p, rate: rate, rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// Send drops the frame by not sending it: the next Buffer returns the
// same buffer (memport's contract), as a NIC that lost it on the wire.
func (d *dropPort) Send(n int) {
	if d.rng.Float64() < d.rate {
		d.dropped.Add(1)
		return
	}
	d.Port.Send(n)
}

func dial(t testing.TB, sock, name string) *portal.Portal {
	t.Helper()
	p, err := portal.Dial(sock, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// read reads 64 bytes of src at 0 into sink at 0 with key k.
func read(t *testing.T, p *portal.Portal, src *portal.Region, k aesni.Key, sink *portal.Region) abi.Completion {
	t.Helper()
	s, ok := p.Slot()
	if !ok {
		t.Fatal("no free slot")
	}
	defer p.Release(s)
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 1,
		Remote: engineIP, RemoteRegion: src.ID(), Key: k,
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c [1]abi.Completion
	if _, err := p.Wait(ctx, c[:]); err != nil {
		t.Fatal(err)
	}
	return c[0]
}

// A READ with a K_d derived for another PID is refused by the engine with
// REMOTE_AUTHENTICATION_FAILURE and writes nothing; the K_d derived for the
// reader's own identity reads.
func TestWrongPIDRefused(t *testing.T) {
	sock := startEngine(t)
	owner, reader := dial(t, sock, "owner"), dial(t, sock, "reader")
	src, err := owner.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 1)
	}
	reader.AllocSlots(1)
	sink, err := reader.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	id := reader.Identity()
	if c := read(t, reader, src, src.DeriveKey(id.Addr, id.PID+1, abi.OpRead), sink); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("K_d for pid %d read by pid %d: %+v", id.PID+1, id.PID, c)
	}
	if !bytes.Equal(sink.Bytes(), make([]byte, 4096)) {
		t.Fatal("the refused read wrote the sink")
	}
	st, err := reader.Stats()
	if err != nil || st.ReqAuthFailed != 1 {
		t.Fatalf("req_auth_failed %d, %v", st.ReqAuthFailed, err)
	}
	if c := read(t, reader, src, src.DeriveKey(id.Addr, id.PID, abi.OpRead), sink); c.Status != abi.StatusOK ||
		!bytes.Equal(sink.Bytes()[:64], src.Bytes()[:64]) {
		t.Fatalf("K_d for the reader's own identity: %+v", c)
	}
}

// Rekey changes Key(), and with it every K_d; a key chosen at registration
// is the region's key.
func TestRekeyChangesKey(t *testing.T) {
	sock := startEngine(t)
	owner, reader := dial(t, sock, "owner"), dial(t, sock, "reader")
	k1 := aesni.Key{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
	src, err := owner.RegisterRegionKey(4096, abi.PermRemoteRead, k1)
	if err != nil {
		t.Fatal(err)
	}
	if src.Key() != k1 {
		t.Fatalf("Key() = %x, want the registered key", src.Key())
	}
	reader.AllocSlots(1)
	sink, _ := reader.RegisterRegion(4096, abi.PermLocalWrite)
	id := reader.Identity()
	old := src.DeriveKey(id.Addr, id.PID, abi.OpRead)
	if c := read(t, reader, src, old, sink); c.Status != abi.StatusOK {
		t.Fatalf("before rekey: %+v", c)
	}
	k2 := aesni.Key{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}
	if err := owner.Rekey(src, k2); err != nil {
		t.Fatal(err)
	}
	if src.Key() != k2 {
		t.Fatalf("Key() after Rekey = %x, want %x", src.Key(), k2)
	}
	nk := src.DeriveKey(id.Addr, id.PID, abi.OpRead)
	if nk == old || nk != aesni.DeriveKey(k2, id.Addr.As4(), id.PID, uint8(abi.OpRead)) {
		t.Fatal("K_d after Rekey is not derived from the new key")
	}
	if c := read(t, reader, src, old, sink); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("old K_d after rekey: %+v", c)
	}
	if c := read(t, reader, src, nk, sink); c.Status != abi.StatusOK {
		t.Fatalf("new K_d after rekey: %+v", c)
	}
	if err := owner.Rekey(src, aesni.Key{}); !errors.Is(err, portal.ErrZeroKey) || src.Key() != k2 {
		t.Fatalf("zero key: %v, Key() %x", err, src.Key())
	}
	if err := reader.Rekey(src, k1); !errors.Is(err, portal.ErrRegion) || src.Key() != k2 {
		t.Fatalf("another portal's region: %v", err)
	}
	if _, err := owner.RegisterRegionKey(4096, abi.PermAll, aesni.Key{}); !errors.Is(err, portal.ErrZeroKey) {
		t.Fatalf("zero key registered: %v", err)
	}
	r2, err := owner.RegisterRegion(4096, abi.PermAll)
	if err != nil || r2.Key() == (aesni.Key{}) || r2.Key() == k1 {
		t.Fatalf("RegisterRegion's key: %v", err)
	}
}

// holdPort hides received frames from the core while hold is set (they
// wait in the port, as in a NIC's ring while its engine is off the CPU).
type holdPort struct {
	*memport.Port
	hold atomic.Bool
}

func (h *holdPort) Recv() [][]byte {
	if h.hold.Load() {
		return nil
	}
	return h.Port.Recv()
}

// An engine that could not run for longer than TIMEOUT while the answer
// to an op waited in its port completes the op OK: the loop counts the
// stall and moves the op's deadline (runner, Core.Stalled), instead of
// failing it for time in which the engine could not look. The delay the
// completion reports includes the stall.
func TestEngineStallDoesNotTimeOut(t *testing.T) {
	const timeout = 10 * time.Millisecond
	var hp *holdPort
	e := enginetest.Start(t, enginetest.Opts{
		Engine: func(c *engine.Config) { c.HairpinSelf, c.Timeout = true, timeout }, // frames to itself cross the port
		Port:   func(p *memport.Port) runner.Port { hp = &holdPort{Port: p}; return hp },
		Ctl:    func(c *ctl.Config) { c.Sockets[0].Policy.Default = 16 },
	})
	owner, reader := dial(t, e.Socket, "owner"), dial(t, e.Socket, "reader")
	src, err := owner.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*5 + 3)
	}
	reader.AllocSlots(1)
	sink, err := reader.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	id := reader.Identity()
	k := src.DeriveKey(id.Addr, id.PID, abi.OpRead)
	if c := read(t, reader, src, k, sink); c.Status != abi.StatusOK { // resolves the engine's own address
		t.Fatalf("%+v", c)
	}

	hp.hold.Store(true)
	s, _ := reader.Slot()
	defer reader.Release(s)
	if err := reader.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 2,
		Remote: engineIP, RemoteRegion: src.ID(), RemoteOffset: 64, Key: k,
		Local: sink, LocalOffset: 64, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	inFlight := func() (n uint64) {
		if err := e.Runner.Exec(func(c *engine.Core) { n = c.Stats().OpsInFlight }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for deadline := time.Now().Add(5 * time.Second); inFlight() != 1; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the read never entered service")
		}
	}
	before := e.Runner.Stats()
	// The request waits in the port; the loop is held for 2 TIMEOUTs.
	if err := e.Runner.Exec(func(*engine.Core) {
		time.Sleep(2 * timeout)
		hp.hold.Store(false)
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c [1]abi.Completion
	if _, err := reader.Wait(ctx, c[:]); err != nil {
		t.Fatal(err)
	}
	if c[0].Status != abi.StatusOK || c[0].TotalDelayNs < uint32(2*timeout) || !bytes.Equal(sink.Bytes()[64:128], src.Bytes()[64:128]) {
		t.Fatalf("want OK after the stall, with its delay: %+v", c[0])
	}
	// The loop publishes its counters before it next sleeps, which may be
	// after the completion reached the ring.
	enginetest.Eventually(t, "the stall in the runner's counters", func() bool { return e.Runner.Stats().Stalls > before.Stalls })
	if st := e.Runner.Stats(); st.StalledNs-before.StalledNs < uint64(2*timeout) {
		t.Errorf("runner counted no stall of 2 TIMEOUTs: %+v, before %+v", st, before)
	}
}

// A REKEY op (Post with OpRekey, its length left out) installs the new
// K_r it carries: reads with the old K_d then fail, reads with a K_d of
// the new key succeed, and the owner's portal still reports the old key
// (a remote REKEY installs a key the owner does not know).
func TestRekeyOp(t *testing.T) {
	sock := startEngine(t)
	owner, peer := dial(t, sock, "owner"), dial(t, sock, "peer")
	r, err := owner.RegisterRegion(4096, portal.PermRemoteRead|portal.PermRemoteRekey)
	if err != nil {
		t.Fatal(err)
	}
	local, err := peer.RegisterRegion(4096, portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.AllocSlots(2); err != nil {
		t.Fatal(err)
	}
	id := peer.Identity()
	old, kr := r.Key(), portal.Key{0x4e, 0x77, 3}
	copy(local.Bytes()[1024:], kr[:])
	s, _ := peer.Slot()
	if err := peer.Submit(&portal.Op{
		Type: portal.OpRekey, Slot: s, Cookie: 7,
		Remote: engineIP, RemoteRegion: r.ID(), Key: r.DeriveKey(id.Addr, id.PID, portal.OpRekey),
		Local: local, LocalOffset: 1024,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c [1]portal.Completion
	if _, err := peer.Wait(ctx, c[:]); err != nil {
		t.Fatal(err)
	}
	peer.Release(s)
	if c[0].Status != portal.StatusOK || c[0].Op != portal.OpRekey || c[0].Cookie != 7 {
		t.Fatalf("REKEY: %+v", c[0])
	}
	if got := read(t, peer, r, r.DeriveKey(id.Addr, id.PID, portal.OpRead), local); got.Status != portal.StatusRemoteAuthFailure {
		t.Errorf("read with a K_d of the old key: %v, want REMOTE_AUTHENTICATION_FAILURE", got.Status)
	}
	kd := aesni.DeriveKey(kr, id.Addr.As4(), id.PID, uint8(portal.OpRead))
	if got := read(t, peer, r, kd, local); got.Status != portal.StatusOK {
		t.Errorf("read with a K_d of the new key: %v, want OK", got.Status)
	}
	if r.Key() != old {
		t.Error("the owner's portal learned the key a remote REKEY installed")
	}
}

// Moderate: a Wait asleep on the doorbell is woken once count completions
// are ready, or the period after the first; Moderate refuses what the
// engine cannot honour. The READs go to an address nobody answers, so
// their UNREACHABLE completions come after Wait fell asleep (and well
// before the 10 ms after which it would wake by itself): each phase asks
// for an address of its own, so each waits out a resolution.
func TestModerate(t *testing.T) {
	sock := startEngineWith(t, engineOpts{engine: func(c *engine.Config) { c.ResolveTimeout = 3 * time.Millisecond }})
	p, err := portal.DialOptions(sock, "moderated", portal.Options{WaitSpins: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Doorbell() {
		t.Fatal("no doorbell")
	}
	for _, bad := range []struct {
		count  int
		period time.Duration
	}{{0, time.Millisecond}, {4, 1500 * time.Microsecond}, {4, 1500 * time.Nanosecond}, {4, -time.Microsecond},
		{4, 0},                       // count > 1 needs a period
		{128, 50 * time.Microsecond}, // over the completion ring's 64
	} {
		if err := p.Moderate(bad.count, bad.period); !errors.Is(err, portal.ErrBadRequest) {
			t.Fatalf("Moderate(%d, %v): %v", bad.count, bad.period, err)
		}
	}
	p.AllocSlots(2)
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	nobody := netip.MustParseAddr("10.7.0.99")
	wait := func(posts int) []abi.Completion {
		nobody = nobody.Prev()
		t.Helper()
		for k := range posts {
			s, _ := p.Slot()
			if err := p.Submit(&portal.Op{Type: portal.OpRead, Slot: s, Cookie: uint64(k + 1), Remote: nobody,
				RemoteRegion: 1 << 16, Local: sink, Length: 64}); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var got []abi.Completion
		for len(got) < posts {
			var c [4]abi.Completion
			n, err := p.Wait(ctx, c[:])
			if err != nil {
				t.Fatal(err)
			}
			for _, cp := range c[:n] {
				if cp.Status != abi.StatusUnreachable {
					t.Fatalf("%+v", cp)
				}
				p.Release(cp.Slot)
			}
			got = append(got, c[:n]...)
		}
		return got
	}
	stats := func() (rung, deferred uint64) {
		st, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Doorbells, st.DoorbellsDeferred
	}

	if err := p.Moderate(2, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wait(1) // one of two: rung a period after its completion
	if r, d := stats(); r != 1 || d != 1 {
		t.Fatalf("one of two: rung %d, deferred %d", r, d)
	}
	if el := time.Since(start); el < 4*time.Millisecond {
		t.Fatalf("woken after %v: before the completion's resolve timeout and period", el)
	}
	wait(2) // two of two, completed in one poll: rung at once
	if r, d := stats(); r != 2 || d != 1 {
		t.Fatalf("two of two: rung %d, deferred %d", r, d)
	}
	if err := p.Moderate(1, 0); err != nil {
		t.Fatal(err)
	}
	wait(1)
	if r, d := stats(); r != 3 || d != 1 {
		t.Fatalf("unmoderated: rung %d, deferred %d", r, d)
	}
}
