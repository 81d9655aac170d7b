package portal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/portal"
)

// execEnv is an in-process engine with two applications on it: the owner
// of a remote region (src, filled with a pattern, open to remote READ and
// WRITE) and a client whose Executor moves data between src and its own
// region dst.
type execEnv struct {
	owner, cli *portal.Portal
	src, dst   *portal.Region
	kr, kw     aesni.Key // the client's K_d for READ and WRITE of src
	e          *portal.Executor
}

func pattern(i int) byte { return byte(uint32(i)*2654435761>>13) ^ byte(i>>12) }

func newExecEnv(t testing.TB, o engineOpts, srcBytes, dstBytes uint64, cfg portal.ExecutorConfig) *execEnv {
	t.Helper()
	sock := startEngineWith(t, o)
	v := &execEnv{owner: dial(t, sock, "owner"), cli: dial(t, sock, "client")}
	var err error
	if v.src, err = v.owner.RegisterRegion(srcBytes, abi.PermRemoteRead|abi.PermRemoteWrite); err != nil {
		t.Fatal(err)
	}
	for i, b := 0, v.src.Bytes(); i < len(b); i++ {
		b[i] = pattern(i)
	}
	if v.dst, err = v.cli.RegisterRegion(dstBytes, abi.PermLocalWrite|abi.PermLocalRead); err != nil {
		t.Fatal(err)
	}
	id := v.cli.Identity()
	v.kr = v.src.DeriveKey(id.Addr, id.PID, abi.OpRead)
	v.kw = v.src.DeriveKey(id.Addr, id.PID, abi.OpWrite)
	if v.e, err = portal.NewExecutor(v.cli, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.e.Close() })
	return v
}

func (v *execEnv) read(ctx context.Context, remoteOff, localOff, n uint64) error {
	return v.e.Read(ctx, portal.Transfer{
		Remote: engineIP, RemoteRegion: v.src.ID(), RemoteOffset: remoteOff, Key: v.kr,
		Local: v.dst, LocalOffset: localOff, Length: n,
	})
}

func (v *execEnv) write(ctx context.Context, remoteOff, localOff, n uint64) error {
	return v.e.Write(ctx, portal.Transfer{
		Remote: engineIP, RemoteRegion: v.src.ID(), RemoteOffset: remoteOff, Key: v.kw,
		Local: v.dst, LocalOffset: localOff, Length: n,
	})
}

// checkRead: dst[localOff:+n] holds src[remoteOff:+n], and the bytes
// around it are still zero.
func (v *execEnv) checkRead(t testing.TB, remoteOff, localOff, n uint64) {
	t.Helper()
	got, want := v.dst.Bytes()[localOff:localOff+n], v.src.Bytes()[remoteOff:remoteOff+n]
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("read of %d bytes from %d into %d: first difference at byte %d: %#x, want %#x", n, remoteOff, localOff, i, got[i], want[i])
			}
		}
	}
	if localOff > 0 && v.dst.Bytes()[localOff-1] != 0 {
		t.Fatalf("read of %d bytes into %d wrote the byte before", n, localOff)
	}
	if end := localOff + n; end < v.dst.Size() && v.dst.Bytes()[end] != 0 {
		t.Fatalf("read of %d bytes into %d wrote the byte after", n, localOff)
	}
}

func stats(t testing.TB, p *portal.Portal) *ctlmsg.Stats {
	t.Helper()
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var transferSizes = []uint64{1, 4095, 4096, 4097, 1 << 20, 4<<20 + 13}

// Reads and writes of every size, at odd offsets, byte for byte.
func TestExecutorReadWriteSizes(t *testing.T) {
	const srcBytes, dstBytes = 5 << 20, 5 << 20
	v := newExecEnv(t, engineOpts{}, srcBytes, dstBytes, portal.ExecutorConfig{})
	ctx := testCtx(t)
	for _, n := range transferSizes {
		remoteOff, localOff := uint64(4093), uint64(7)
		clear(v.dst.Bytes())
		if err := v.read(ctx, remoteOff, localOff, n); err != nil {
			t.Fatalf("read of %d bytes: %v", n, err)
		}
		v.checkRead(t, remoteOff, localOff, n)
	}
	for _, n := range transferSizes {
		remoteOff, localOff := uint64(555), uint64(1031)
		src := v.dst.Bytes()[localOff : localOff+n]
		for i := range src {
			src[i] = byte(i*7+int(n)) | 1
		}
		if err := v.write(ctx, remoteOff, localOff, n); err != nil {
			t.Fatalf("write of %d bytes: %v", n, err)
		}
		if !bytes.Equal(v.src.Bytes()[remoteOff:remoteOff+n], src) {
			t.Fatalf("write of %d bytes: remote region differs", n)
		}
		if b := v.src.Bytes(); b[remoteOff-1] != pattern(int(remoteOff-1)) || b[remoteOff+n] != pattern(int(remoteOff+n)) {
			t.Fatalf("write of %d bytes changed a byte around its range", n)
		}
	}
	st := v.e.Stats()
	if st.Transfers != uint64(2*len(transferSizes)) || st.Failed != 0 || st.Stray != 0 {
		t.Fatalf("executor stats %+v", st)
	}
	var chunks uint64
	for _, n := range transferSizes {
		chunks += 2 * ((n + abi.MaxOpBytes - 1) / abi.MaxOpBytes)
	}
	if st.Ops-st.Retries != chunks {
		t.Fatalf("%d first posts, want %d chunks", st.Ops-st.Retries, chunks)
	}
	if es := stats(t, v.cli); es.Completed["OK"] != st.Ops-st.Nacks-st.DispatchTimeouts-st.Timeouts {
		t.Fatalf("engine completed %v, executor %+v", es.Completed, st)
	}
	// A zero length does nothing.
	if err := v.read(ctx, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
}

// Many goroutines share one executor: reads and writes of their own
// ranges, all correct.
func TestExecutorConcurrent(t *testing.T) {
	const G, part = 8, 512 << 10
	v := newExecEnv(t, engineOpts{}, G*part, G*part, portal.ExecutorConfig{})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, G)
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := uint64(g * part)
			for it := range 4 {
				n := uint64(part/2 - 1 - it*4096 - g)
				roff, loff := base+uint64(3*it+1), base+uint64(part/2)
				if err := v.read(ctx, roff, loff, n); err != nil {
					errs <- fmt.Errorf("goroutine %d read %d: %w", g, it, err)
					return
				}
				if !bytes.Equal(v.dst.Bytes()[loff:loff+n], v.src.Bytes()[roff:roff+n]) {
					errs <- fmt.Errorf("goroutine %d read %d: wrong data", g, it)
					return
				}
				src := v.dst.Bytes()[base : base+n]
				for i := range src {
					src[i] = byte(g*31 + it*7 + i)
				}
				woff := base + uint64(it*5)
				if err := v.write(ctx, woff, base, n); err != nil {
					errs <- fmt.Errorf("goroutine %d write %d: %w", g, it, err)
					return
				}
				if !bytes.Equal(v.src.Bytes()[woff:woff+n], src) {
					errs <- fmt.Errorf("goroutine %d write %d: wrong data", g, it)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := v.e.Stats(); st.Transfers != G*8 || st.Failed != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A wrong key: REMOTE_AUTHENTICATION_FAILURE comes back at once, not
// retried, in a ChunkError naming a chunk; the transfer stops issuing.
func TestExecutorRemoteAuthFailure(t *testing.T) {
	v := newExecEnv(t, engineOpts{}, 1<<20, 1<<20, portal.ExecutorConfig{})
	id := v.cli.Identity()
	wrong := v.src.DeriveKey(id.Addr, id.PID+1, abi.OpRead)
	err := v.e.Read(testCtx(t), portal.Transfer{Remote: engineIP, RemoteRegion: v.src.ID(), Key: wrong, Local: v.dst, Length: 1 << 20})
	var ce *portal.ChunkError
	if !errors.As(err, &ce) || !errors.Is(err, portal.ErrRemoteAuth) {
		t.Fatalf("wrong key: %v", err)
	}
	if ce.Status != abi.StatusRemoteAuthFailure || ce.Attempts != 1 || ce.RemoteOffset%4096 != 0 || ce.LocalOffset != ce.RemoteOffset ||
		ce.Length != 4096 || ce.Op != abi.OpRead || ce.Remote != engineIP || ce.Region != v.src.ID() || ce.Done != 0 {
		t.Fatalf("wrong key: %+v", ce)
	}
	if !strings.Contains(err.Error(), "REMOTE_AUTHENTICATION_FAILURE") || !strings.Contains(err.Error(), fmt.Sprintf("remote offset %d", ce.RemoteOffset)) {
		t.Fatalf("error text %q", err)
	}
	st := v.e.Stats()
	if st.Retries != 0 || st.Ops > uint64(v.e.Slots()) || st.Failed != 1 {
		t.Fatalf("executor went on after the failure: %+v (slots %d)", st, v.e.Slots())
	}
	if es := stats(t, v.cli); es.ReqAuthFailed != st.Ops || es.OpsInFlight != 0 {
		t.Fatalf("engine: %d auth failures, %d in flight; executor posted %d", es.ReqAuthFailed, es.OpsInFlight, st.Ops)
	}
	if !bytes.Equal(v.dst.Bytes(), make([]byte, 1<<20)) {
		t.Fatal("refused reads wrote the sink")
	}
	// The right key works on the same executor.
	if err := v.read(testCtx(t), 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	v.checkRead(t, 0, 0, 1<<20)
}

// A range that ends past the remote region fails with REMOTE_BOUNDS on
// exactly the chunk that crosses the end; local ranges outside the local
// region, foreign regions and bad addresses fail before anything is posted.
func TestExecutorBounds(t *testing.T) {
	const size = 64 << 10
	v := newExecEnv(t, engineOpts{}, size, 2*size, portal.ExecutorConfig{})
	ctx := testCtx(t)
	err := v.read(ctx, 1, 100, size)
	var ce *portal.ChunkError
	if !errors.As(err, &ce) || !errors.Is(err, portal.ErrRemoteAccess) {
		t.Fatalf("read past the end: %v", err)
	}
	if ce.Status != abi.StatusRemoteBounds || ce.RemoteOffset != size-4096+1 || ce.LocalOffset != 100+size-4096 || ce.Length != 4096 || ce.Attempts != 1 {
		t.Fatalf("read past the end: %+v", ce)
	}
	if err := v.write(ctx, size-10, 0, 11); !errors.Is(err, portal.ErrRemoteAccess) {
		t.Fatalf("write past the end: %v", err)
	}
	posted := v.e.Stats().Ops
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"local range", v.read(ctx, 0, 2*size-10, 11), portal.ErrBounds},
		{"local offset", v.read(ctx, 0, 2*size+1, 0), portal.ErrBounds},
		{"nil region", v.e.Read(ctx, portal.Transfer{Remote: engineIP, RemoteRegion: v.src.ID(), Key: v.kr, Local: nil, Length: 1}), portal.ErrRegion},
		{"another portal's region", v.e.Read(ctx, portal.Transfer{
			Remote: engineIP, RemoteRegion: v.src.ID(), Key: v.kr,
			Local: v.src, Length: 1,
		}), portal.ErrRegion},
		{"IPv6", v.e.Read(ctx, portal.Transfer{
			Remote: netip.MustParseAddr("::1"), RemoteRegion: v.src.ID(), Key: v.kr,
			Local: v.dst, Length: 1,
		}), portal.ErrAddr},
	} {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if got := v.e.Stats().Ops; got != posted {
		t.Fatalf("argument errors posted %d ops", got-posted)
	}
}

// slowCC paces ops far apart, so a transfer of a few MB runs long enough to
// be cancelled or closed in the middle.
func slowCC() portal.ExecutorConfig {
	p := cc.DefaultParams()
	p.CwndInit, p.CwndMin, p.CwndMax = 0.05, 0.05, 0.05
	p.RTT = 100_000
	return portal.ExecutorConfig{CC: p}
}

func waitOps(t testing.TB, e *portal.Executor, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.Stats().Ops < n {
		if time.Now().After(deadline) {
			t.Fatalf("executor posted %d ops, waiting for %d", e.Stats().Ops, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// Cancelling a transfer in the middle returns ctx's error once its ops in
// flight have completed; the executor stays usable. A deadline works the
// same way.
func TestExecutorCancel(t *testing.T) {
	v := newExecEnv(t, engineOpts{}, 4<<20, 4<<20, slowCC())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.read(ctx, 0, 0, 4<<20) }()
	waitOps(t, v.e, 3)
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if !strings.Contains(err.Error(), "bytes done") {
		t.Fatalf("cancelled: %q does not say how far it got", err)
	}
	if es := stats(t, v.cli); es.OpsInFlight != 0 {
		t.Fatalf("%d ops still in flight after the cancelled read returned", es.OpsInFlight)
	}
	if st := v.e.Stats(); st.Ops >= 1024 || st.Failed != 1 {
		t.Fatalf("stats after cancel %+v", st)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	if err := v.read(dctx, 0, 0, 4<<20); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	// An already cancelled context posts nothing.
	posted := v.e.Stats().Ops
	if err := v.read(ctx, 0, 0, 64); !errors.Is(err, context.Canceled) || v.e.Stats().Ops != posted {
		t.Fatalf("cancelled before the call: %v", err)
	}
	clear(v.dst.Bytes())
	if err := v.read(testCtx(t), 5, 3, 64); err != nil {
		t.Fatal(err)
	}
	v.checkRead(t, 5, 3, 64)
}

// Close fails the transfers in progress with ErrExecutorClosed, waits for
// them, and gives the slots back: the portal works directly again.
func TestExecutorClose(t *testing.T) {
	v := newExecEnv(t, engineOpts{}, 4<<20, 4<<20, slowCC())
	const G = 3
	errs := make(chan error, G)
	for g := range G {
		go func() { errs <- v.read(context.Background(), 0, uint64(g)<<20, 1<<20) }()
	}
	waitOps(t, v.e, G)
	if err := v.e.Close(); err != nil {
		t.Fatal(err)
	}
	for range G {
		if err := <-errs; !errors.Is(err, portal.ErrExecutorClosed) {
			t.Fatalf("transfer during Close: %v", err)
		}
	}
	if err := v.read(testCtx(t), 0, 0, 1); !errors.Is(err, portal.ErrExecutorClosed) {
		t.Fatalf("read after Close: %v", err)
	}
	if err := v.e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if v.cli.FreeSlots() != v.cli.Slots() || v.cli.Slots() != v.e.Slots() {
		t.Fatalf("after Close: %d of %d slots free, executor used %d", v.cli.FreeSlots(), v.cli.Slots(), v.e.Slots())
	}
	if es := stats(t, v.cli); es.OpsInFlight != 0 {
		t.Fatalf("%d ops in flight after Close", es.OpsInFlight)
	}
	if c := read(t, v.cli, v.src, v.kr, v.dst); c.Status != abi.StatusOK {
		t.Fatalf("direct read after Close: %+v", c)
	}
}

// wideCC starts with a window of 16 ops and targets no delay can reach, so
// only congestion signals shrink it.
func wideCC() portal.ExecutorConfig {
	p := cc.DefaultParams()
	p.CwndInit, p.CwndMax = 16, 16
	p.LocalTarget, p.RemoteTarget = int64(time.Second), int64(time.Second)
	return portal.ExecutorConfig{CC: p, BackoffBase: 5 * time.Microsecond, BackoffMax: 200 * time.Microsecond}
}

// NACKs (a serving side with a tiny inbound queue) are retried: the
// transfer completes with the right bytes, and the engine counted them.
func TestExecutorNackRetried(t *testing.T) {
	o := engineOpts{engine: func(c *engine.Config) { c.InboundQueue, c.NackThreshold, c.ServeBudget = 4, 1, 1 }}
	v := newExecEnv(t, o, 1<<20, 1<<20, wideCC())
	for range 4 {
		if err := v.read(testCtx(t), 3, 1, 1<<20-3); err != nil {
			t.Fatal(err)
		}
		v.checkRead(t, 3, 1, 1<<20-3)
		if v.e.Stats().Nacks > 0 {
			break
		}
	}
	st, es := v.e.Stats(), stats(t, v.cli)
	if st.Nacks == 0 || es.ReqNacked == 0 || es.Completed["NACK"] != st.Nacks || st.Retries < st.Nacks || st.Failed != 0 {
		t.Fatalf("executor %+v; engine nacked %d, completed %v", st, es.ReqNacked, es.Completed)
	}
	t.Logf("%d NACKs retried", st.Nacks)
}

// DISPATCH_TIMEOUTs (a one-op solicitation window and a dispatch timeout
// of 1 µs) are retried: the transfer completes with the right bytes.
func TestExecutorDispatchTimeoutRetried(t *testing.T) {
	o := engineOpts{engine: func(c *engine.Config) { c.WindowBytes, c.DispatchTimeout = 4096, time.Microsecond }}
	v := newExecEnv(t, o, 1<<20, 1<<20, wideCC())
	if err := v.read(testCtx(t), 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	v.checkRead(t, 0, 0, 1<<20)
	st, es := v.e.Stats(), stats(t, v.cli)
	if st.DispatchTimeouts == 0 || es.Completed["DISPATCH_TIMEOUT"] != st.DispatchTimeouts || st.Failed != 0 {
		t.Fatalf("executor %+v; engine completed %v", st, es.Completed)
	}
	t.Logf("%d DISPATCH_TIMEOUTs retried", st.DispatchTimeouts)
}

// blackhole is an address with a static neighbor entry: frames to it leave
// the loopback port, come back addressed to another MAC and are dropped,
// so every op to it ends in TIMEOUT.
var blackhole = netip.MustParseAddr("10.7.0.99")

// TIMEOUT is retried TimeoutRetries times, then the transfer fails.
func TestExecutorTimeoutBounded(t *testing.T) {
	o := engineOpts{engine: func(c *engine.Config) {
		c.Timeout = 5 * time.Millisecond
		c.Neighbors = []engine.Neighbor{{IP: blackhole, MAC: [6]byte{2, 0, 0, 0, 0, 0x99}}}
	}}
	cfg := portal.ExecutorConfig{TimeoutRetries: 2}
	v := newExecEnv(t, o, 4096, 4096, cfg)
	err := v.e.Read(testCtx(t), portal.Transfer{
		Remote: blackhole, RemoteRegion: v.src.ID(), RemoteOffset: 8, Key: v.kr,
		Local: v.dst, LocalOffset: 16, Length: 4000,
	})
	var ce *portal.ChunkError
	if !errors.As(err, &ce) || !errors.Is(err, portal.ErrTimeout) {
		t.Fatalf("read from a black hole: %v", err)
	}
	if ce.Status != abi.StatusTimeout || ce.Attempts != 3 || ce.RemoteOffset != 8 || ce.LocalOffset != 16 || ce.Length != 4000 || ce.Remote != blackhole {
		t.Fatalf("read from a black hole: %+v", ce)
	}
	st, es := v.e.Stats(), stats(t, v.cli)
	if st.Timeouts != 3 || es.Completed["TIMEOUT"] != 3 || st.Ops != 3 {
		t.Fatalf("executor %+v; engine completed %v", st, es.Completed)
	}
}

// With 5 % of all frames lost, a 4 MB read and a 1 MB write complete with
// the right bytes (lost frames end ops in TIMEOUT, which are retried).
func TestExecutorDrops(t *testing.T) {
	var dp *dropPort
	o := engineOpts{
		engine: func(c *engine.Config) { c.HairpinSelf, c.Timeout = true, 3*time.Millisecond },
		port: func(p *memport.Port) runner.Port {
			dp = newDropPort(p, 0.05, 1)
			return dp
		},
	}
	v := newExecEnv(t, o, 4<<20, 4<<20, portal.ExecutorConfig{})
	// Every TIMEOUT cuts the window 10x and the pacer spaces the next ops
	// by RTT/window: slow under the race detector, so a longer deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := v.read(ctx, 0, 0, 4<<20); err != nil {
		t.Fatal(err)
	}
	v.checkRead(t, 0, 0, 4<<20)
	src := v.dst.Bytes()[:1<<20]
	for i := range src {
		src[i] = byte(i*3) | 0x80
	}
	if err := v.write(ctx, 1<<20, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.src.Bytes()[1<<20:2<<20], src) {
		t.Fatal("write with drops: remote region differs")
	}
	st := v.e.Stats()
	if dp.dropped.Load() == 0 || st.Timeouts == 0 || st.Failed != 0 {
		t.Fatalf("%d frames dropped; executor %+v", dp.dropped.Load(), st)
	}
	t.Logf("%d frames dropped, %d TIMEOUTs retried", dp.dropped.Load(), st.Timeouts)
}

// Head-of-line isolation (paper Fig. 12/13): a 64 B read on a portal busy
// with a large transfer is served round-robin with it, so it completes
// long before the large one.
func TestExecutorSmallReadNotBehindLarge(t *testing.T) {
	v := newExecEnv(t, engineOpts{}, 8<<20, 8<<20+4096, portal.ExecutorConfig{})
	large := make(chan error, 1)
	go func() { large <- v.read(testCtx(t), 0, 0, 8<<20) }()
	waitOps(t, v.e, 32)
	if err := v.read(testCtx(t), 64, 8<<20, 64); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-large:
		t.Fatalf("the 8 MB read (%v) finished before the 64 B read started after it", err)
	default:
	}
	if !bytes.Equal(v.dst.Bytes()[8<<20:8<<20+64], v.src.Bytes()[64:128]) {
		t.Fatal("64 B read: wrong data")
	}
	if err := <-large; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(v.dst.Bytes()[:8<<20], v.src.Bytes()) {
		t.Fatal("8 MB read: wrong data")
	}
}

// The per-op path does not allocate: a 1 MB read (256 ops) allocates next
// to nothing, whatever the number of ops.
func TestExecutorAllocs(t *testing.T) {
	v := newExecEnv(t, engineOpts{}, 1<<20, 1<<20, portal.ExecutorConfig{})
	ctx := context.Background()
	if err := v.read(ctx, 0, 0, 1<<20); err != nil { // warm up: cc state, pools
		t.Fatal(err)
	}
	var failed error
	allocs := testing.AllocsPerRun(20, func() {
		if err := v.read(ctx, 0, 0, 1<<20); err != nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if perOp := allocs / 256; perOp > 0.01 {
		t.Fatalf("%.1f allocations per 1 MB read: %.3f per op", allocs, perOp)
	}
	t.Logf("%.2f allocations per 1 MB read (256 ops)", allocs)
}

// BenchmarkExecutorRead4MB: one 4 MB read per iteration through the
// in-process engine; allocs/op is per 4 MB (1024 ops).
func BenchmarkExecutorRead4MB(b *testing.B) {
	v := newExecEnv(b, engineOpts{}, 4<<20, 4<<20, portal.ExecutorConfig{})
	ctx := context.Background()
	b.SetBytes(4 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if err := v.read(ctx, 0, 0, 4<<20); err != nil {
			b.Fatal(err)
		}
	}
}
