package portal_test

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// nobody is an address no engine answers: ops to it wait for ARP (a
// minute, in hangingEngine) and are in flight when the engine goes away.
var nobody = netip.MustParseAddr("10.7.0.99")

// hangingEngine starts an in-process engine whose ops to nobody stay in
// flight, its control socket at sock ("": a fresh one).
func hangingEngine(t testing.TB, sock string) *enginetest.Engine {
	t.Helper()
	return enginetest.Start(t, enginetest.Opts{
		Engine: func(c *engine.Config) { c.ResolveTimeout = time.Minute },
		Ctl: func(c *ctl.Config) {
			c.Sockets[0].Policy.Default = 16
			c.CmdCap, c.CplCap = 64, 64
			if sock != "" {
				c.Sockets[0].Path = sock
			}
		},
	})
}

// drain collects completions with Wait until it returns an error.
func drain(p *portal.Portal, within time.Duration) ([]abi.Completion, error, time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var got []abi.Completion
	buf := make([]abi.Completion, 3) // small: the completions take several calls
	for {
		n, err := p.Wait(ctx, buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err, time.Now()
		}
	}
}

// When the engine goes away, every op posted gets exactly one completion:
// those the engine wrote before (here a BAD_SLOT), then ENGINE_GONE for
// each other, flushed or only staged; then Wait and Poll return the
// portal's *EngineGoneError, and so do Post and control requests.
func TestEngineGoneEndsEveryOpOnce(t *testing.T) {
	eng := hangingEngine(t, "")
	p := dial(t, eng.Socket, "doomed")
	if _, err := p.AllocSlots(8); err != nil {
		t.Fatal(err)
	}
	var slots [8]abi.SlotID
	for k := range slots {
		slots[k], _ = p.Slot()
	}
	sink, err := p.RegisterRegion(8*4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 6 {
		if err := p.Post(&portal.Op{
			Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k + 1),
			Remote: nobody, RemoteRegion: 0x10001, Key: aesni.Key{1},
			Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A slot the portal does not own: the engine answers BAD_SLOT.
	foreign := abi.Command{Op: abi.OpRead, Slot: 9999, Cookie: 9, RemoteAddr: 0x0a070063, RemoteRegion: 0x10001,
		LocalRegion: sink.ID(), Length: 64}
	if err := p.PostCommand(&foreign); err != nil {
		t.Fatal(err)
	}
	p.Flush()
	enginetest.Eventually(t, "the engine answering BAD_SLOT", func() bool {
		st, err := p.Stats()
		return err == nil && st.Completed[abi.StatusBadSlot.String()] == 1 // taken after the six reads
	})
	// Two more, staged but never flushed.
	for k := 6; k < 8; k++ {
		if err := p.Post(&portal.Op{
			Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k + 1),
			Remote: nobody, RemoteRegion: 0x10001, Key: aesni.Key{1},
			Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Posted(); got != 9 {
		t.Fatalf("Posted() = %d, want 9", got)
	}

	type result struct {
		cpl []abi.Completion
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		cpl, err, at := drain(p, 10*time.Second)
		done <- result{cpl, err, at}
	}()
	time.Sleep(20 * time.Millisecond) // Wait is asleep on the doorbell by now
	stopped := time.Now()
	eng.Close()
	r := <-done
	t.Logf("engine shutdown began %v before Wait returned the error (%d completions)", r.at.Sub(stopped), len(r.cpl))
	if d := r.at.Sub(stopped); d > time.Second {
		t.Errorf("Wait reported the dead engine %v after its shutdown began", d)
	}

	var gone *portal.EngineGoneError
	if !errors.As(r.err, &gone) || !errors.Is(r.err, portal.ErrEngineGone) || !strings.Contains(r.err.Error(), "closed the control connection") {
		t.Fatalf("Wait: %v", r.err)
	}
	seen := map[uint64]abi.Completion{}
	for _, c := range r.cpl {
		if _, dup := seen[c.Cookie]; dup {
			t.Fatalf("two completions for cookie %d: %+v", c.Cookie, r.cpl)
		}
		seen[c.Cookie] = c
	}
	if len(seen) != 9 {
		t.Fatalf("%d completions, want 9: %+v", len(seen), r.cpl)
	}
	if c := seen[9]; c.Status != abi.StatusBadSlot || c.Slot != 9999 || r.cpl[0].Cookie != 9 {
		t.Fatalf("the engine's own completion, first: %+v", r.cpl)
	}
	for k := range 8 {
		c := seen[uint64(k+1)]
		if c.Status != abi.StatusEngineGone || c.Slot != slots[k] || c.Op != abi.OpRead {
			t.Fatalf("op %d: %+v", k+1, c)
		}
	}
	if p.Posted() != 0 {
		t.Fatalf("Posted() = %d after every completion", p.Posted())
	}
	// Every call from now on says the same, and nothing else completes.
	var out [4]abi.Completion
	if n, err := p.Poll(out[:]); n != 0 || err != r.err {
		t.Fatalf("Poll = %d, %v", n, err)
	}
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 10,
		Remote: nobody, RemoteRegion: 0x10001, Key: aesni.Key{1},
		Local: sink, Length: 64,
	}); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("post after the engine went: %v", err)
	}
	if _, err := p.Stats(); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("Stats after the engine went: %v", err)
	}
	if p.Gone() != r.err {
		t.Fatalf("Gone() = %v", p.Gone())
	}
	for _, s := range slots {
		if err := p.Release(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// Poll alone (an application that never sleeps in Wait) sees the engine
// gone too, without a system call of its own.
func TestEngineGoneSeenByPoll(t *testing.T) {
	eng := hangingEngine(t, "")
	p := dial(t, eng.Socket, "spinner")
	slots, _ := p.AllocSlots(1)
	sink, _ := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: slots[0], Cookie: 5,
		Remote: nobody, RemoteRegion: 0x10001, Key: aesni.Key{1},
		Local: sink, Length: 64,
	}); err != nil {
		t.Fatal(err)
	}
	eng.Close()
	var out [2]abi.Completion
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := p.Poll(out[:])
		if n == 1 && out[0].Cookie == 5 && out[0].Status == abi.StatusEngineGone {
			break
		}
		if n != 0 || err != nil || time.Now().After(deadline) {
			t.Fatalf("Poll = %d %+v, %v", n, out[0], err)
		}
	}
	if n, err := p.Poll(out[:]); n != 0 || !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("Poll after the last completion = %d, %v", n, err)
	}
}

// The reconnect pattern: the engine restarts on the same socket; Redial,
// started before the new engine listens, opens a portal on it; the
// application registers its region again under the same key, copies its
// contents from the old portal's mapping, and reads it back.
func TestRedialAfterRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rmad.sock")
	eng := hangingEngine(t, sock)
	p := dial(t, sock, "kv")
	r, err := p.RegisterRegion(4096, abi.PermAll)
	if err != nil {
		t.Fatal(err)
	}
	for i := range r.Bytes() {
		r.Bytes()[i] = byte(i*13 + 5)
	}
	eng.Close()
	if _, err, _ := drain(p, 5*time.Second); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("Wait: %v", err)
	}
	// No engine on the socket: Redial gives up when its context ends.
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err = p.Redial(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Redial with no engine: %v", err)
	}

	redialed := make(chan error, 1)
	var np *portal.Portal
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		np, err = p.Redial(ctx)
		redialed <- err
	}()
	time.Sleep(20 * time.Millisecond)
	hangingEngine(t, sock)
	if err := <-redialed; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { np.Close() })
	if np.Identity().Name != "kv" || np.Gone() != nil {
		t.Fatalf("new portal: %+v, %v", np.Identity(), np.Gone())
	}
	nr, err := np.RegisterRegionKey(r.Size(), r.Perm(), r.Key())
	if err != nil {
		t.Fatal(err)
	}
	copy(nr.Bytes(), r.Bytes())
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	sink, err := np.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := np.AllocSlots(1); err != nil {
		t.Fatal(err)
	}
	id := np.Identity()
	s, _ := np.Slot()
	if err := np.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 1,
		Remote: engineIP, RemoteRegion: nr.ID(), Key: nr.DeriveKey(id.Addr, id.PID, abi.OpRead),
		Local: sink, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c [1]abi.Completion
	if _, err := np.Wait(ctx, c[:]); err != nil || c[0].Status != abi.StatusOK {
		t.Fatalf("read on the new portal: %+v, %v", c[0], err)
	}
	for i, b := range sink.Bytes() {
		if b != byte(i*13+5) {
			t.Fatalf("byte %d = %d after the reconnect", i, b)
		}
	}
}

// An Executor whose engine goes away fails its transfers at once with an
// error naming the transfer and matching ErrEngineGone; later transfers
// and new executors on the portal fail the same way.
func TestExecutorEngineGone(t *testing.T) {
	eng := hangingEngine(t, "")
	p := dial(t, eng.Socket, "mover")
	sink, err := p.RegisterRegion(1<<20, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	e, err := portal.NewExecutor(p, portal.ExecutorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	done := make(chan error, 1)
	go func() {
		done <- e.Read(context.Background(), portal.Transfer{
			Remote: nobody, RemoteRegion: 0x10001, Key: aesni.Key{1},
			Local: sink, Length: 1 << 20,
		})
	}()
	enginetest.Eventually(t, "ops in flight", func() bool {
		st, err := p.Stats()
		return err == nil && st.OpsInFlight > 0
	})
	stopped := time.Now()
	eng.Close()
	var err1 error
	select {
	case err1 = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the transfer did not end when the engine went away")
	}
	t.Logf("transfer failed %v after the engine's shutdown began: %v", time.Since(stopped), err1)
	if !errors.Is(err1, portal.ErrEngineGone) || !strings.Contains(err1.Error(), "READ of 1048576 bytes") {
		t.Fatalf("Read: %v", err1)
	}
	if err := e.Read(context.Background(), portal.Transfer{
		Remote: nobody, RemoteRegion: 0x10001, Key: aesni.Key{1},
		Local: sink, Length: 64,
	}); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("a later Read: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := portal.NewExecutor(p, portal.ExecutorConfig{}); !errors.Is(err, portal.ErrEngineGone) {
		t.Fatalf("NewExecutor: %v", err)
	}
}
