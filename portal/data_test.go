package portal

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// fakeEngine is the engine's side of a portal segment built in anonymous
// memory: it consumes commands and produces completions, so the data path
// can be tested without a control socket.
type fakeEngine struct {
	cmd *abi.Consumer
	cpl *abi.Producer
}

func newTestPortal(t testing.TB, cmdCap, cplCap uint32) (*Portal, *fakeEngine, *Region) {
	t.Helper()
	l, err := abi.NewLayout(7, cmdCap, cplCap)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := unix.Mmap(-1, 0, int(l.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	l.Encode(seg)
	dl, err := abi.DecodeLayout(seg)
	if err != nil {
		t.Fatal(err)
	}
	p := &Portal{owned: make(map[abi.SlotID]int32), regions: make(map[abi.RegionID]*Region), seg: seg, layout: dl}
	if p.cmd, err = abi.NewProducer(dl.CmdRing(seg), dl.CmdCap, abi.CommandSize); err != nil {
		t.Fatal(err)
	}
	if p.cpl, err = abi.NewConsumer(dl.CplRing(seg), dl.CplCap, abi.CompletionSize); err != nil {
		t.Fatal(err)
	}
	e := &fakeEngine{}
	if e.cmd, err = abi.NewConsumer(dl.CmdRing(seg), dl.CmdCap, abi.CommandSize); err != nil {
		t.Fatal(err)
	}
	if e.cpl, err = abi.NewProducer(dl.CplRing(seg), dl.CplCap, abi.CompletionSize); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 8192)
	r := &Region{p: p, id: abi.MakeRegionID(3, 1), mapping: mem, mem: mem, size: uint64(len(mem)), perm: abi.PermAll,
		kr: aesni.Key{0x4b, 0x72, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}
	p.regions[r.id] = r
	for i := range 4 {
		id := abi.SlotID(100 + i)
		p.owned[id] = int32(i)
		p.isFree = append(p.isFree, true)
		p.free = append(p.free, id)
		p.pending = append(p.pending, pendingOp{})
	}
	p.stray = make([]pendingOp, 0, cmdCap+cplCap)
	t.Cleanup(func() { unix.Munmap(seg) })
	return p, e, r
}

// take consumes every published command.
func (e *fakeEngine) take() []abi.Command {
	var out []abi.Command
	for {
		b := e.cmd.Peek()
		if b == nil {
			break
		}
		var c abi.Command
		if err := c.Decode(b); err != nil {
			panic(err)
		}
		out = append(out, c)
		e.cmd.Advance()
	}
	e.cmd.Release()
	return out
}

func (e *fakeEngine) complete(c abi.Completion) bool {
	b := e.cpl.Reserve()
	if b == nil {
		return false
	}
	c.Encode(b)
	e.cpl.Commit()
	e.cpl.Publish()
	return true
}

var peer = netip.MustParseAddr("10.1.2.3")

// testKd stands for a derived key K_d handed to a reader.
var testKd = aesni.Key{0xd0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xdf}

func TestPostEncodesAndBatches(t *testing.T) {
	p, e, r := newTestPortal(t, 8, 8)
	if err := p.Post(&Op{
		Type: OpRead, Slot: 100, Cookie: 0xfeed,
		Remote: peer, RemoteRegion: 0x10002, RemoteOffset: 512, Key: testKd,
		Local: r, LocalOffset: 64, Length: 4096,
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Post(&Op{
		Type: OpRead, Slot: 101, Cookie: 2,
		Remote: peer, RemoteRegion: 0x10002, Key: aesni.Key{},
		Local: r, Length: 1,
	}); err != nil {
		t.Fatal(err)
	}
	if got := e.take(); len(got) != 0 {
		t.Fatalf("engine saw %d commands before Flush", len(got))
	}
	p.Flush()
	got := e.take()
	want := []abi.Command{
		{Op: abi.OpRead, Slot: 100, Cookie: 0xfeed, RemoteAddr: 0x0a010203, RemoteRegion: 0x10002, RemoteOffset: 512,
			LocalRegion: r.ID(), Length: 4096, LocalOffset: 64, Key: testKd},
		{Op: abi.OpRead, Slot: 101, Cookie: 2, RemoteAddr: 0x0a010203, RemoteRegion: 0x10002, LocalRegion: r.ID(), Length: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d commands, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("command %d (-want +got)\n-%+v\n+%+v", i, want[i], got[i])
		}
	}
}

// TestDeriveKey: Region.DeriveKey is aesni.DeriveKey of the region's
// current key, the initiator's IPv4 address, its PID and the op.
func TestDeriveKey(t *testing.T) {
	_, _, r := newTestPortal(t, 8, 8)
	kr := r.Key()
	if kr == (aesni.Key{}) {
		t.Fatal("test region has no key")
	}
	for _, tt := range []struct {
		addr string
		pid  uint32
		op   abi.Op
	}{
		{"10.1.2.3", 4242, abi.OpRead},
		{"10.1.2.3", 4243, abi.OpRead},
		{"10.1.2.4", 4242, abi.OpRead},
		{"192.168.0.1", 1, abi.OpWrite},
		{"::ffff:10.1.2.3", 4242, abi.OpRead}, // IPv4-mapped: the same as 10.1.2.3
	} {
		a := netip.MustParseAddr(tt.addr)
		want := aesni.DeriveKey(kr, a.Unmap().As4(), tt.pid, uint8(tt.op))
		if got := r.DeriveKey(a, tt.pid, tt.op); got != want {
			t.Errorf("DeriveKey(%s, %d, %v) = %x, want %x", tt.addr, tt.pid, tt.op, got, want)
		}
	}
	a := r.DeriveKey(peer, 1, abi.OpRead)
	if b := r.DeriveKey(peer, 2, abi.OpRead); a == b {
		t.Error("two PIDs, one K_d")
	}
	if b := r.DeriveKey(peer, 1, abi.OpWrite); a == b {
		t.Error("two ops, one K_d")
	}
	if k := r.DeriveKey(netip.MustParseAddr("2001:db8::1"), 1, abi.OpRead); k != (aesni.Key{}) {
		t.Errorf("IPv6 initiator: %x, want the zero key", k)
	}
	if k := r.DeriveKey(netip.Addr{}, 1, abi.OpRead); k != (aesni.Key{}) {
		t.Errorf("zero address: %x, want the zero key", k)
	}
}

func TestPostValidation(t *testing.T) {
	p, _, r := newTestPortal(t, 8, 8)
	other := &Region{p: &Portal{}, id: 9, mem: make([]byte, 10), size: 10}
	tests := []struct {
		name   string
		local  *Region
		off    uint64
		length uint32
		addr   netip.Addr
		want   error
	}{
		{"nil region", nil, 0, 1, peer, ErrRegion},
		{"other portal's region", other, 0, 1, peer, ErrRegion},
		{"zero length", r, 0, 0, peer, ErrLength},
		{"too long", r, 0, abi.MaxOpBytes + 1, peer, ErrLength},
		{"past the end", r, 8192 - 100, 101, peer, ErrBounds},
		{"offset past the end", r, 8193, 1, peer, ErrBounds},
		{"offset overflow", r, ^uint64(0), 2, peer, ErrBounds},
		{"ipv6", r, 0, 1, netip.MustParseAddr("::1"), ErrAddr},
		{"zero addr", r, 0, 1, netip.Addr{}, ErrAddr},
		{"last byte", r, 8191, 1, peer, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Post(&Op{
				Type: OpRead, Slot: 100,
				Remote: tt.addr, RemoteRegion: 1, Key: testKd,
				Local: tt.local, LocalOffset: tt.off, Length: tt.length,
			})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestPostOpTypes: Post encodes a WRITE and a REKEY as it does a READ,
// fills in a REKEY's length, and refuses what no engine would take.
func TestPostOpTypes(t *testing.T) {
	kr := Key{0x4e, 0x77}
	tests := []struct {
		name string
		op   Op
		want Command // zero: nothing posted
		err  error
	}{
		{"write", Op{Type: OpWrite, Slot: 100, Cookie: 7, Remote: peer, RemoteRegion: 0x10002, RemoteOffset: 4096, Key: testKd,
			LocalOffset: 128, Length: 512},
			Command{Op: OpWrite, Slot: 100, Cookie: 7, RemoteAddr: 0x0a010203, RemoteRegion: 0x10002, RemoteOffset: 4096,
				Length: 512, LocalOffset: 128, Key: testKd}, nil},
		{"rekey, length left out", Op{Type: OpRekey, Slot: 101, Cookie: 8, Remote: peer, RemoteRegion: 0x10002, Key: testKd,
			LocalOffset: 16},
			Command{Op: OpRekey, Slot: 101, Cookie: 8, RemoteAddr: 0x0a010203, RemoteRegion: 0x10002,
				Length: KeySize, LocalOffset: 16, Key: testKd}, nil},
		{"rekey of KeySize", Op{Type: OpRekey, Slot: 101, Remote: peer, RemoteRegion: 0x10002, Key: kr, Length: KeySize},
			Command{Op: OpRekey, Slot: 101, RemoteAddr: 0x0a010203, RemoteRegion: 0x10002, Length: KeySize, Key: kr}, nil},
		{"rekey of 8 bytes", Op{Type: OpRekey, Remote: peer, Length: 8}, Command{}, ErrLength},
		{"rekey at a remote offset", Op{Type: OpRekey, Remote: peer, RemoteOffset: 16}, Command{}, ErrOp},
		{"rekey past the end", Op{Type: OpRekey, Remote: peer, LocalOffset: 8192 - 8}, Command{}, ErrBounds},
		{"no type", Op{Remote: peer, Length: 64}, Command{}, ErrOp},
		{"unknown type", Op{Type: 9, Remote: peer, Length: 64}, Command{}, ErrOp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, e, r := newTestPortal(t, 8, 8)
			tt.op.Local = r
			if err := p.Submit(&tt.op); !errors.Is(err, tt.err) {
				t.Fatalf("Submit = %v, want %v", err, tt.err)
			}
			got := e.take()
			if tt.err != nil {
				if len(got) != 0 {
					t.Fatalf("a refused op reached the ring: %+v", got)
				}
				return
			}
			tt.want.LocalRegion = r.ID()
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("(-want +got)\n-%+v\n+%+v", tt.want, got)
			}
		})
	}
}

func TestRingFullReturnsAtOnce(t *testing.T) {
	p, e, r := newTestPortal(t, 4, 8)
	for i := range 4 {
		if err := p.Post(&Op{
			Type: OpRead, Slot: 100, Cookie: uint64(i),
			Remote: peer, RemoteRegion: 1, Key: testKd,
			Local: r, Length: 8,
		}); err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
	}
	done := make(chan error)
	go func() {
		done <- p.Post(&Op{
			Type: OpRead, Slot: 100, Cookie: 99,
			Remote: peer, RemoteRegion: 1, Key: testKd,
			Local: r, Length: 8,
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRingFull) {
			t.Fatalf("fifth post: %v, want ErrRingFull", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("post on a full ring blocked")
	}
	p.Flush()
	if n := len(e.take()); n != 4 {
		t.Fatalf("engine took %d", n)
	}
	if err := p.Submit(&Op{Type: OpRead, Slot: 100, Cookie: 5, Remote: peer, RemoteRegion: 1, Key: testKd, Local: r, Length: 8}); err != nil {
		t.Fatalf("post after the engine drained: %v", err)
	}
}

func TestPollAndWait(t *testing.T) {
	p, e, _ := newTestPortal(t, 4, 4)
	out := make([]abi.Completion, 3)
	if n, err := p.Poll(out); n != 0 || err != nil {
		t.Fatalf("Poll on empty ring = %d, %v", n, err)
	}
	want := []abi.Completion{
		{Cookie: 1, Slot: 100, Status: abi.StatusOK, Op: abi.OpRead, IssueDelayNs: 10, TotalDelayNs: 20, Length: 4096},
		{Cookie: 2, Slot: 101, Status: abi.StatusLocalRegion, Op: abi.OpRead},
		{Cookie: 3, Slot: 102, Status: abi.StatusTimeout, Op: abi.OpRead, TotalDelayNs: 1e7},
		{Cookie: 4, Slot: 103, Status: abi.StatusNack, Op: abi.OpRead},
	}
	for _, c := range want {
		if !e.complete(c) {
			t.Fatal("completion ring full")
		}
	}
	if e.complete(want[0]) {
		t.Fatal("completion ring over capacity")
	}
	n, err1 := p.Poll(out)
	m, err2 := p.Poll(out[n:])
	if n += m; n != 3 || err1 != nil || err2 != nil {
		t.Fatalf("Poll = %d, want 3", n)
	}
	for i := range n {
		if out[i] != want[i] {
			t.Errorf("completion %d (-want +got)\n-%+v\n+%+v", i, want[i], out[i])
		}
	}
	if !e.complete(want[0]) {
		t.Fatal("Poll did not release consumed entries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := p.Wait(ctx, out)
	if err != nil || n != 2 || out[0] != want[3] || out[1] != want[0] {
		t.Fatalf("Wait = %d, %v, %+v", n, err, out[:n])
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		e.complete(want[2])
	}()
	n, err = p.Wait(ctx, out)
	if err != nil || n != 1 || out[0] != want[2] {
		t.Fatalf("Wait after sleep = %d, %v", n, err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if _, err := p.Wait(short, out); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an idle ring: %v", err)
	}
}

func TestSlotFreeList(t *testing.T) {
	p, _, _ := newTestPortal(t, 4, 4)
	seen := map[abi.SlotID]bool{}
	for range 4 {
		s, ok := p.Slot()
		if !ok || seen[s] {
			t.Fatalf("Slot = %d, %v", s, ok)
		}
		seen[s] = true
	}
	if _, ok := p.Slot(); ok {
		t.Fatal("Slot with none free")
	}
	if err := p.Release(100); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(100); !errors.Is(err, ErrSlot) {
		t.Fatalf("double Release: %v", err)
	}
	if err := p.Release(5); !errors.Is(err, ErrSlot) {
		t.Fatalf("Release of a foreign slot: %v", err)
	}
	if s, ok := p.Slot(); !ok || s != 100 {
		t.Fatalf("Slot after Release = %d, %v", s, ok)
	}
}

func TestDataPathAllocsNothing(t *testing.T) {
	p, e, r := newTestPortal(t, 64, 64)
	out := make([]abi.Completion, 16)
	c := abi.Completion{Cookie: 1, Slot: 100, Op: abi.OpRead, Length: 64}
	kd := r.DeriveKey(peer, 4242, abi.OpRead)
	allocs := testing.AllocsPerRun(1000, func() {
		s, _ := p.Slot()
		if err := p.Post(&Op{Type: OpRead, Slot: s, Cookie: 1, Remote: peer, RemoteRegion: 0x10002, Key: kd, Local: r, Length: 64}); err != nil {
			t.Fatal(err)
		}
		p.Flush()
		e.take0()
		c.Slot = s
		e.complete(c)
		if n, err := p.Poll(out); n != 1 || err != nil {
			t.Fatal("no completion", err)
		}
		p.Release(s)
	})
	if allocs != 0 {
		t.Fatalf("Post/Flush/Poll/Slot/Release allocate %v times per op", allocs)
	}
	ctx := context.Background()
	allocs = testing.AllocsPerRun(1000, func() {
		e.complete(c)
		if n, err := p.Wait(ctx, out); n != 1 || err != nil {
			t.Fatal(n, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Wait allocates %v times", allocs)
	}
}

// take0 consumes published commands without keeping them.
func (e *fakeEngine) take0() {
	for e.cmd.Peek() != nil {
		e.cmd.Advance()
	}
	e.cmd.Release()
}

func BenchmarkPostFlushPoll(b *testing.B) {
	p, e, r := newTestPortal(b, 64, 64)
	out := make([]abi.Completion, 16)
	c := abi.Completion{Cookie: 1, Slot: 100, Op: abi.OpRead, Length: 64}
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Post(&Op{
			Type: OpRead, Slot: 100, Cookie: 1,
			Remote: peer, RemoteRegion: 0x10002, Key: testKd,
			Local: r, Length: 64,
		}); err != nil {
			b.Fatal(err)
		}
		p.Flush()
		e.take0()
		e.complete(c)
		p.Poll(out)
	}
}
