package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

func lookupCmd(slot abi.SlotID, dst uint32, rreg abi.RegionID, bucket uint64, tag uint64, lreg abi.RegionID, loff uint64, n uint32, cookie uint64) *abi.Command {
	return &abi.Command{Op: abi.OpLookup, Slot: slot, Cookie: cookie, RemoteAddr: dst, RemoteRegion: rreg,
		RemoteOffset: bucket, Tag: tag, LocalRegion: lreg, LocalOffset: loff, Length: n}
}

// testLayout: buckets of 256 bytes, 8 entries of 32: tag u64 at 0,
// pointer u64 at 8, length u32 at 16, the rest of the entry the owner's.
func testLayout(linked abi.RegionID) abi.BucketLayout {
	return abi.BucketLayout{BucketBytes: 256, EntryBytes: 32, TagOff: 0, TagWidth: 8, PtrOff: 8, PtrWidth: 8, LenOff: 16, LenWidth: 4, Linked: linked}
}

// putEntry writes entry i of the bucket at b: tag, pointer, length, and
// a stamp in its last 8 bytes.
func putEntry(b []byte, i int, tag, ptr uint64, n uint32, stamp uint64) {
	e := b[i*32 : (i+1)*32]
	binary.LittleEndian.PutUint64(e[0:], tag)
	binary.LittleEndian.PutUint64(e[8:], ptr)
	binary.LittleEndian.PutUint32(e[16:], n)
	binary.LittleEndian.PutUint32(e[20:], 0)
	binary.LittleEndian.PutUint64(e[24:], stamp)
}

// allBytes reports whether every byte of b is v.
func allBytes(b []byte, v byte) bool {
	for _, c := range b {
		if c != v {
			return false
		}
	}
	return true
}

// lookupFixture: a pair whose b holds an index region (16 buckets of the
// test layout) linked to a slab of 64 KB, patterned, and a plain region;
// a's app has a 16 KB sink and has resolved b.
type lookupFixture struct {
	p                  *pair
	app, srv           *testApp
	index, slab, sink  []byte
	ri, rslab, rd, rrd abi.RegionID
	peer               uint32
}

func newLookupFixture(t *testing.T) *lookupFixture {
	x := &lookupFixture{p: newPair(t, testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)), peer: ipOf("10.0.0.2")}
	x.app = openApp(t, x.p.a, abi.ClassLow, 8)
	x.srv = openApp(t, x.p.b, abi.ClassLow, 0)
	x.slab, x.index, x.sink = make([]byte, 64<<10), make([]byte, 16*256), make([]byte, 16<<10)
	pattern(x.slab, 0x33)
	var err error
	if x.rslab, err = x.p.b.RegisterRegion(x.srv.id, x.slab, abi.PermRemoteRead, testKr); err != nil {
		t.Fatal(err)
	}
	if x.ri, err = x.p.b.RegisterLookupRegion(x.srv.id, x.index, abi.PermRemoteLookup|abi.PermRemoteRead, testKr, testLayout(x.rslab)); err != nil {
		t.Fatal(err)
	}
	if x.rd, err = x.p.a.RegisterRegion(x.app.id, x.sink, abi.PermAll, testKr); err != nil {
		t.Fatal(err)
	}
	x.rrd, _ = x.p.b.RegisterRegion(x.srv.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	x.app.post(t, readCmd(x.app.slots[0], x.peer, x.rrd, 0, x.rd, 0, 8, 99))
	x.p.run()
	if got := x.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("warm-up read: %+v", got)
	}
	return x
}

// do posts cmd and runs the pair until it completes.
func (x *lookupFixture) do(t *testing.T, cmd *abi.Command) abi.Completion {
	t.Helper()
	x.app.post(t, cmd)
	x.p.run()
	got := x.app.completions()
	if len(got) != 1 || got[0].Cookie != cmd.Cookie || got[0].Op != abi.OpLookup {
		t.Fatalf("completions %+v", got)
	}
	return got[0]
}

// audit checks both cores' books and that no window is held.
func (x *lookupFixture) audit(t *testing.T) {
	t.Helper()
	for _, c := range []*Core{x.p.a, x.p.b} {
		if err := c.Audit(); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.WindowInUse != 0 || s.OpsInFlight != 0 {
			t.Fatalf("leak: window %d, ops %d", s.WindowInUse, s.OpsInFlight)
		}
	}
}

func TestLookupFound(t *testing.T) {
	x := newLookupFixture(t)
	// Bucket 3: entries for tags 7..14 (entry j: tag 7+j), each pointing
	// at its own range of the slab; the length of entry j is sizes[j].
	sizes := []uint32{0, 1, 63, 64, 65, 1408, 2000, 4096 - 64}
	b := x.index[3*256 : 4*256]
	for j, n := range sizes {
		putEntry(b, j, uint64(7+j), uint64(1000+j*4100), n, uint64(0xabc0+j))
	}
	for j, n := range sizes {
		clear(x.sink)
		cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 3*256, uint64(7+j), x.rd, 100, 4096, uint64(j))))
		pad := uint32(32)
		if n > 0 {
			pad = 64
		}
		want := pad + n
		if n == 0 {
			want = 32
		}
		if cpl.Status != abi.StatusOK || cpl.Length != want {
			t.Fatalf("entry %d (%d bytes): %+v, want OK and %d bytes", j, n, cpl, want)
		}
		if !bytes.Equal(x.sink[100:132], b[j*32:(j+1)*32]) {
			t.Fatalf("entry %d: the answer's entry is not the bucket's", j)
		}
		if n > 0 && !bytes.Equal(x.sink[164:164+n], x.slab[1000+j*4100:1000+j*4100+int(n)]) {
			t.Fatalf("entry %d: target mismatch", j)
		}
		if !allBytes(x.sink[:100], 0) || !allBytes(x.sink[100+want:], 0) {
			t.Fatalf("entry %d: bytes outside the answer changed", j)
		}
	}
	if s := x.p.a.Stats(); s.CompletedLookup[abi.StatusOK] != uint64(len(sizes)) {
		t.Fatalf("CompletedLookup %v", s.CompletedLookup)
	}
	x.audit(t)
}

// Pointers into the bucket's own region (no linked region), narrow
// fields, and the first matching entry wins.
func TestLookupOwnRegionNarrowFields(t *testing.T) {
	x := newLookupFixture(t)
	lay := abi.BucketLayout{BucketBytes: 64, EntryBytes: 8, TagOff: 0, TagWidth: 2, PtrOff: 2, PtrWidth: 4, LenOff: 6, LenWidth: 2}
	mem := make([]byte, 8192)
	pattern(mem[1024:], 0x71)
	r, err := x.p.b.RegisterLookupRegion(x.srv.id, mem, abi.PermRemoteLookup, testKr, lay)
	if err != nil {
		t.Fatal(err)
	}
	ent := func(i int, tag uint16, ptr uint32, n uint16) {
		binary.LittleEndian.PutUint16(mem[i*8:], tag)
		binary.LittleEndian.PutUint32(mem[i*8+2:], ptr)
		binary.LittleEndian.PutUint16(mem[i*8+6:], n)
	}
	ent(2, 0xbeef, 2048, 300)
	ent(5, 0xbeef, 4096, 10) // a second match: the scan stops at the first
	cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, r, 0, 0xbeef, x.rd, 0, 1024, 1)))
	if cpl.Status != abi.StatusOK || cpl.Length != 64+300 || !bytes.Equal(x.sink[:8], mem[16:24]) || !bytes.Equal(x.sink[64:364], mem[2048:2348]) {
		t.Fatalf("%+v", cpl)
	}
	// A tag wider than the field never matches.
	if cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, r, 0, 0x1beef, x.rd, 0, 1024, 2))); cpl.Status != abi.StatusRemoteNotFound || cpl.Length != 0 {
		t.Fatalf("%+v", cpl)
	}
	x.audit(t)
}

// A pointer in units of 64 bytes (PtrShift 6, as an index of 64-byte
// aligned records stores it), and pointers whose shift would overflow or
// leave the slab: REMOTE_LOOKUP_BOUNDS, nothing read.
func TestLookupPointerShift(t *testing.T) {
	x := newLookupFixture(t)
	lay := abi.BucketLayout{BucketBytes: 64, EntryBytes: 16, TagOff: 0, TagWidth: 4, PtrOff: 4, PtrWidth: 8, PtrShift: 6, LenOff: 12, LenWidth: 4, Linked: x.rslab}
	mem := make([]byte, 4096)
	r, err := x.p.b.RegisterLookupRegion(x.srv.id, mem, abi.PermRemoteLookup, testKr, lay)
	if err != nil {
		t.Fatal(err)
	}
	ent := func(i int, tag uint32, ptr uint64, n uint32) {
		binary.LittleEndian.PutUint32(mem[i*16:], tag)
		binary.LittleEndian.PutUint64(mem[i*16+4:], ptr)
		binary.LittleEndian.PutUint32(mem[i*16+12:], n)
	}
	ent(0, 5, 100, 700)                     // bytes 6400..7100 of the slab
	ent(1, 6, 1<<58+1, 8)                   // << 6 would wrap to 64
	ent(2, 7, uint64(len(x.slab))/64-1, 65) // the last 64 bytes, and one more
	ent(3, 8, uint64(len(x.slab))/64-1, 64) // the last 64 bytes
	cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, r, 0, 5, x.rd, 0, 4096, 1)))
	if cpl.Status != abi.StatusOK || cpl.Length != 64+700 || !bytes.Equal(x.sink[64:764], x.slab[6400:7100]) {
		t.Fatalf("%+v", cpl)
	}
	for tag, want := range map[uint64]abi.Status{6: abi.StatusRemoteLookupBounds, 7: abi.StatusRemoteLookupBounds, 8: abi.StatusOK} {
		if cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, r, 0, tag, x.rd, 0, 4096, 2))); cpl.Status != want {
			t.Fatalf("tag %d: (-want %v +got) %+v", tag, want, cpl)
		}
	}
	x.audit(t)
}

func TestLookupNotFound(t *testing.T) {
	x := newLookupFixture(t)
	b := x.index[5*256 : 6*256]
	for j := range 8 {
		putEntry(b, j, uint64(100+j), 0, 8, 0)
	}
	for i := range x.sink {
		x.sink[i] = 0xee
	}
	cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 5*256, 42, x.rd, 0, 4096, 1)))
	if cpl.Status != abi.StatusRemoteNotFound || cpl.Length != 0 {
		t.Fatalf("%+v", cpl)
	}
	if !allBytes(x.sink, 0xee) {
		t.Fatal("a miss without FlagLookupBucket touched the sink")
	}
	// With the flag: the bucket, when it fits the command's length.
	cmd := lookupCmd(x.app.slots[1], x.peer, x.ri, 5*256, 42, x.rd, 64, 4096, 2)
	cmd.Flags = abi.FlagLookupBucket
	cpl = x.do(t, x.app.keyed(cmd))
	if cpl.Status != abi.StatusRemoteNotFound || cpl.Length != 256 || !bytes.Equal(x.sink[64:320], b) {
		t.Fatalf("%+v", cpl)
	}
	cmd = lookupCmd(x.app.slots[1], x.peer, x.ri, 5*256, 42, x.rd, 0, 200, 3)
	cmd.Flags = abi.FlagLookupBucket
	if cpl := x.do(t, x.app.keyed(cmd)); cpl.Status != abi.StatusRemoteNotFound || cpl.Length != 0 {
		t.Fatalf("a bucket larger than the length: %+v", cpl)
	}
	if s := x.p.a.Stats(); s.CompletedLookup[abi.StatusRemoteNotFound] != 3 {
		t.Fatalf("CompletedLookup %v", s.CompletedLookup)
	}
	x.audit(t)
}

// Corrupt entries: pointers and lengths outside the slab, and overflow,
// get REMOTE_LOOKUP_BOUNDS; an entry and target above the command's
// length, REMOTE_LOOKUP_TOO_LARGE; nothing reaches the sink.
func TestLookupCorruptEntry(t *testing.T) {
	x := newLookupFixture(t)
	b := x.index[0:256]
	n := uint64(len(x.slab))
	for _, tc := range []struct {
		name string
		ptr  uint64
		len  uint32
		max  uint32
		want abi.Status
	}{
		{"past the end", n - 10, 11, 4096, abi.StatusRemoteLookupBounds},
		{"pointer beyond", n + 1, 0, 4096, abi.StatusRemoteLookupBounds},
		{"pointer huge", 1<<63 + 5, 8, 4096, abi.StatusRemoteLookupBounds},
		{"length huge", 16, 0xffffffff, 4096, abi.StatusRemoteLookupBounds},
		{"too large", 0, 4096 - 63, 4096, abi.StatusRemoteLookupTooLarge},
		{"above the length", 0, 100, 163, abi.StatusRemoteLookupTooLarge},
		{"to the end", n - 10, 10, 4096, abi.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			putEntry(b, 4, 77, tc.ptr, tc.len, 0)
			for i := range x.sink {
				x.sink[i] = 0xee
			}
			cpl := x.do(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 77, x.rd, 0, tc.max, 1)))
			if cpl.Status != tc.want {
				t.Fatalf("(-want %v +got) %+v", tc.want, cpl)
			}
			if tc.want != abi.StatusOK && !allBytes(x.sink, 0xee) {
				t.Fatal("the sink changed")
			}
		})
	}
	x.audit(t)
}

// The remote statuses a LOOKUP gets for its bucket and its key.
func TestLookupRemoteErrors(t *testing.T) {
	x := newLookupFixture(t)
	putEntry(x.index[:256], 0, 5, 0, 8, 0)
	readKey := aesni.DeriveKey(testKr, x.app.ip, testPID, uint8(abi.OpRead))
	for _, tc := range []struct {
		name string
		cmd  *abi.Command
		want abi.Status
	}{
		{"bucket past the end", lookupCmd(x.app.slots[1], x.peer, x.ri, 16*256-255, 5, x.rd, 0, 4096, 1), abi.StatusRemoteBounds},
		{"bucket offset beyond", lookupCmd(x.app.slots[1], x.peer, x.ri, 1<<31, 5, x.rd, 0, 4096, 1), abi.StatusRemoteBounds},
		// a region without a layout (no PermRemoteLookup), with a LOOKUP key of it
		{"no permission", lookupCmd(x.app.slots[1], x.peer, x.rslab, 0, 5, x.rd, 0, 4096, 1), abi.StatusRemotePermission},
		{"READ key", &abi.Command{Op: abi.OpLookup, Slot: x.app.slots[1], Cookie: 1, RemoteAddr: x.peer, RemoteRegion: x.ri, Tag: 5, LocalRegion: x.rd, Length: 4096, Key: readKey}, abi.StatusRemoteAuthFailure},
		{"unknown region", lookupCmd(x.app.slots[1], x.peer, abi.MakeRegionID(9, 1), 0, 5, x.rd, 0, 4096, 1), abi.StatusRemoteAuthFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cpl := x.do(t, x.app.keyed(tc.cmd)); cpl.Status != tc.want || cpl.Length != 0 {
				t.Fatalf("(-want %v +got) %+v", tc.want, cpl)
			}
		})
	}
	// And a LOOKUP key does not READ.
	lk := aesni.DeriveKey(testKr, x.app.ip, testPID, uint8(abi.OpLookup))
	cmd := readCmd(x.app.slots[1], x.peer, x.ri, 0, x.rd, 0, 8, 2)
	cmd.Key = lk
	x.app.post(t, cmd)
	x.p.run()
	if got := x.app.completions(); len(got) != 1 || got[0].Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("a READ with a LOOKUP key: %+v", got)
	}
	x.audit(t)
}

// Local checks: the sink must be writable and in bounds, the length
// 1..4096, the bucket offset a u32.
func TestLookupLocalErrors(t *testing.T) {
	x := newLookupFixture(t)
	ro, _ := x.p.a.RegisterRegion(x.app.id, make([]byte, 4096), abi.PermLocalRead, testKr)
	for _, tc := range []struct {
		name string
		cmd  *abi.Command
		want abi.Status
	}{
		{"sink read-only", lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 5, ro, 0, 64, 1), abi.StatusLocalPermission},
		{"sink bounds", lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 5, x.rd, 16<<10-10, 64, 1), abi.StatusLocalBounds},
		{"zero length", lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 5, x.rd, 0, 0, 1), abi.StatusBadCommand},
		{"too large", lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 5, x.rd, 0, 4097, 1), abi.StatusTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cpl := x.do(t, x.app.keyed(tc.cmd)); cpl.Status != tc.want {
				t.Fatalf("(-want %v +got) %+v", tc.want, cpl)
			}
		})
	}
	// Straight to the initiator (an op source posts commands that no ring
	// carried): a bucket offset the command's layout has no room for.
	cmd := lookupCmd(x.app.slots[1], x.peer, x.ri, 1<<32, 5, x.rd, 0, 64, 1)
	if st := x.p.a.ini.validate(x.app.id, cmd, false); st != abi.StatusBadCommand {
		t.Fatalf("a bucket offset of 2^32: %v", st)
	}
	x.audit(t)
}

// The owner rewrites the bucket while a LOOKUP is in flight: the answer
// is the bucket's state when the serving core served it, entry and
// target of one state, never a mix; a state of the bucket before the
// request arrived, or after the answer left, shows nowhere.
func TestLookupBucketRewritten(t *testing.T) {
	x := newLookupFixture(t)
	b := x.index[7*256 : 8*256]
	state := func(v int) {
		clear(b)
		// the key's entry moves between slots and its record between
		// places in the slab, of another length each time
		putEntry(b, v%8, 9, uint64(8192*(v%4)), uint32(100+v), uint64(v))
		for j := range 100 + v {
			x.slab[8192*(v%4)+j] = byte(v)
		}
	}
	for v := 0; v < 20; v++ {
		state(v)
		x.app.post(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 7*256, 9, x.rd, 0, 4096, uint64(v))))
		x.p.a.Poll(x.p.now) // the request leaves
		state(v + 1)        // before it arrives
		x.p.ta.deliverTo(x.p.now, x.p.b)
		x.p.b.Poll(x.p.now) // served: state v+1
		state(v + 2)        // after the answer left
		x.p.run()
		got := x.app.completions()
		if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Length != 64+uint32(101+v) {
			t.Fatalf("round %d: %+v", v, got)
		}
		stamp := binary.LittleEndian.Uint64(x.sink[24:32])
		if stamp != uint64(v+1) || !allBytes(x.sink[64:64+101+v], byte(v+1)) {
			t.Fatalf("round %d: entry of state %d, target not all of state %d", v, stamp, v+1)
		}
	}
	x.audit(t)
}

// Chunks out of order, duplicated, and the chunks of a second service
// of a duplicated request (replay windows off): one completion, one
// answer, never a mix of the two.
func TestLookupChunksDuplicatedAndMixed(t *testing.T) {
	ca, cb := testConfig("10.0.0.1", 1), testConfig("10.0.0.2", 2)
	cb.ReplayPeers = 0 // a replayed request is served again
	x := &lookupFixture{p: newPair(t, ca, cb), peer: ipOf("10.0.0.2")}
	x.app = openApp(t, x.p.a, abi.ClassLow, 8)
	x.srv = openApp(t, x.p.b, abi.ClassLow, 0)
	x.slab, x.index, x.sink = make([]byte, 64<<10), make([]byte, 256), make([]byte, 16<<10)
	x.rslab, _ = x.p.b.RegisterRegion(x.srv.id, x.slab, abi.PermRemoteRead, testKr)
	var err error
	if x.ri, err = x.p.b.RegisterLookupRegion(x.srv.id, x.index, abi.PermRemoteLookup, testKr, testLayout(x.rslab)); err != nil {
		t.Fatal(err)
	}
	x.rd, _ = x.p.a.RegisterRegion(x.app.id, x.sink, abi.PermAll, testKr)
	put := func(v byte) {
		putEntry(x.index, 0, 9, 0, 3000, uint64(v))
		for j := range 3000 {
			x.slab[j] = v
		}
	}
	put(1)
	x.app.post(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 9, x.rd, 0, 4096, 1)))
	x.p.run() // resolves ARP and completes
	if got := x.app.completions(); len(got) != 1 || got[0].Status != abi.StatusOK {
		t.Fatalf("%+v", got)
	}
	x.app.post(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 9, x.rd, 0, 4096, 2)))
	x.p.a.Poll(x.p.now)
	req := x.p.ta.take()
	if len(req) != 1 {
		t.Fatalf("%d request frames", len(req))
	}
	x.p.b.Receive(x.p.now, req[0])
	x.p.b.Poll(x.p.now)
	first := x.p.tb.take()
	put(2)
	x.p.b.Receive(x.p.now, req[0]) // the duplicate, served again over the new state
	x.p.b.Poll(x.p.now)
	second := x.p.tb.take()
	// 64 + 3000 bytes in chunks of 1408: the entry shares the first with
	// the target's first 1344 bytes.
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("answers of %d and %d chunks, want 3 each", len(first), len(second))
	}
	// The second service's first chunk, then everything reversed and twice.
	x.p.a.Receive(x.p.now, second[0])
	for k := 2; k >= 0; k-- {
		x.p.a.Receive(x.p.now, first[k])
		x.p.a.Receive(x.p.now, second[k])
		x.p.a.Receive(x.p.now, first[k])
	}
	x.p.a.Poll(x.p.now)
	got := x.app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Length != 64+3000 {
		t.Fatalf("%+v", got)
	}
	if binary.LittleEndian.Uint64(x.sink[24:32]) != 2 || !allBytes(x.sink[64:64+3000], 2) {
		t.Fatal("the answer mixes two services")
	}
	x.audit(t)
}

func TestRegisterLookupRegionErrors(t *testing.T) {
	x := newLookupFixture(t)
	other := openApp(t, x.p.b, abi.ClassLow, 0)
	foreign, _ := x.p.b.RegisterRegion(other.id, make([]byte, 4096), abi.PermRemoteRead, testKr)
	mod := func(f func(*abi.BucketLayout)) abi.BucketLayout {
		l := testLayout(0)
		f(&l)
		return l
	}
	for _, tc := range []struct {
		name string
		size int
		perm abi.Perm
		lay  abi.BucketLayout
		want error
	}{
		{"no lookup permission", 4096, abi.PermRemoteRead, testLayout(0), ErrLayout},
		{"bucket 0", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.BucketBytes = 0 }), abi.ErrLayoutBucket},
		{"bucket above 4 KB", 8192, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.BucketBytes = 4097 }), abi.ErrLayoutBucket},
		{"bucket above the region", 128, abi.PermRemoteLookup, testLayout(0), ErrLayout},
		{"stride 0", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.EntryBytes = 0 }), abi.ErrLayoutEntry},
		{"stride above the bucket", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.EntryBytes = 257 }), abi.ErrLayoutEntry},
		{"entry of 4 KB", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.BucketBytes, l.EntryBytes = 4096, 4096 }), abi.ErrLayoutFit},
		{"tag width 3", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.TagWidth = 3 }), abi.ErrLayoutWidth},
		{"pointer width 0", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.PtrWidth = 0 }), abi.ErrLayoutWidth},
		{"length width 16", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.LenWidth = 16 }), abi.ErrLayoutWidth},
		{"tag outside the entry", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.TagOff = 25 }), abi.ErrLayoutField},
		{"pointer outside the entry", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.PtrOff = 1 << 31 }), abi.ErrLayoutField},
		{"length outside the entry", 4096, abi.PermRemoteLookup, mod(func(l *abi.BucketLayout) { l.LenOff = 29 }), abi.ErrLayoutField},
		{"linked region of another portal", 4096, abi.PermRemoteLookup, testLayout(foreign), ErrLinkedRegion},
		{"linked region stale", 4096, abi.PermRemoteLookup, testLayout(abi.MakeRegionID(x.rslab.Index(), x.rslab.Gen()+1)), ErrLinkedRegion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := x.p.b.RegisterLookupRegion(x.srv.id, make([]byte, tc.size), tc.perm, testKr, tc.lay); !errors.Is(err, tc.want) {
				t.Fatalf("(-want %v +got) %v", tc.want, err)
			}
		})
	}
	if _, err := x.p.b.RegisterRegion(x.srv.id, make([]byte, 64), abi.PermRemoteLookup, testKr); !errors.Is(err, ErrLayout) {
		t.Fatalf("PermRemoteLookup without a layout: %v", err)
	}
	if err := x.p.b.Audit(); err != nil {
		t.Fatal(err)
	}
}

func TestLookupHotPathAllocs(t *testing.T) {
	tx := newTestTx(64)
	c := newCore(t, testConfig("10.0.0.1", 1), tx)
	app := openApp(t, c, abi.ClassLow, 1)
	slab := make([]byte, 8192)
	rs, _ := c.RegisterRegion(app.id, slab, abi.PermAll, testKr)
	index := make([]byte, 1024)
	ri, err := c.RegisterLookupRegion(app.id, index, abi.PermRemoteLookup, testKr, testLayout(rs))
	if err != nil {
		t.Fatal(err)
	}
	putEntry(index[256:], 6, 31, 100, 4000, 1)
	cmd := app.keyed(lookupCmd(app.slots[0], ipOf("10.0.0.1"), ri, 256, 31, rs, 4096, 4096, 1))
	allocs, cpl := allocsPerOp(c, tx, app, cmd)
	if allocs != 0 || cpl.Status != abi.StatusOK || cpl.Length != 64+4000 {
		t.Fatalf("%v allocs per op, %+v", allocs, cpl)
	}
}

func BenchmarkLookupLoopback64(b *testing.B)   { benchLookup(b, 64) }
func BenchmarkLookupLoopback4096(b *testing.B) { benchLookup(b, 4096) }

// benchLookup is benchOp for LOOKUPs whose answers are size bytes (an
// entry of 64 bytes and a target of size-64), to set beside
// BenchmarkReadLoopback of the same size: the serving core's cost of the
// scan (8 entries, the match the last) and the hop, over a READ's.
func benchLookup(b *testing.B, size uint32) {
	c, tx, app, r := benchCore(b)
	lay := abi.BucketLayout{BucketBytes: 512, EntryBytes: 64, TagOff: 0, TagWidth: 8, PtrOff: 8, PtrWidth: 8, LenOff: 16, LenWidth: 4, Linked: r}
	index := make([]byte, 32*512)
	ri, err := c.RegisterLookupRegion(app.id, index, abi.PermRemoteLookup, testKr, lay)
	if err != nil {
		b.Fatal(err)
	}
	var cmds [32]*abi.Command
	for k := range cmds {
		bk := index[k*512 : (k+1)*512]
		for j := 0; j < 8; j++ {
			binary.LittleEndian.PutUint64(bk[j*64:], uint64(1000+k*8+j))
		}
		e := bk[7*64:]
		binary.LittleEndian.PutUint64(e[8:], uint64(k)*4096)
		binary.LittleEndian.PutUint32(e[16:], size-64)
		cmds[k] = app.keyed(lookupCmd(app.slots[k], ip4(c.cfg.LocalIP.As4()), ri, uint64(k)*512, uint64(1000+k*8+7), r, 512<<10+uint64(k)*4096, 4096, uint64(k)))
	}
	benchRounds(b, c, tx, app, &cmds, size, size)
}

// A LOOKUP whose error answer finds no tx buffer answers it on a later
// Poll, as its scan found it: not what the scan had half filled in, and
// not a second scan of a bucket that may have changed since.
func TestLookupErrorAnswerWaitsForTxBuffer(t *testing.T) {
	x := newLookupFixture(t)
	putEntry(x.index[:256], 0, 21, 0, 2000, 1)
	x.app.post(t, x.app.keyed(lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 21, x.rd, 0, 1000, 1)))
	x.p.a.Poll(x.p.now)
	x.p.ta.deliverTo(x.p.now, x.p.b)
	held := x.p.tb.free // b's Tx has no buffer for its answer
	x.p.tb.free = nil
	x.p.b.Poll(x.p.now)
	x.p.tb.free = held
	putEntry(x.index[:256], 0, 21, 0, 8, 2) // it would fit now: a second scan would answer OK
	x.p.run()
	got := x.app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusRemoteLookupTooLarge {
		t.Fatalf("%+v", got)
	}
	if s := x.p.b.Stats(); s.TxNoBuffer == 0 {
		t.Fatal("the answer found a tx buffer: the test tests nothing")
	}
	x.audit(t)
}

// A LOOKUP none of whose answer found a tx buffer is scanned again when
// it goes: a miss whose bucket gained the tag meanwhile answers with the
// matched entry, not NOT_FOUND with a bucket that holds the tag (status
// and bytes of one state).
func TestLookupAnswerWaitsForTxBufferRescans(t *testing.T) {
	x := newLookupFixture(t)
	b := x.index[0:256]
	putEntry(b, 0, 7, 0, 0, 1)
	cmd := lookupCmd(x.app.slots[1], x.peer, x.ri, 0, 21, x.rd, 0, 4096, 1)
	cmd.Flags = abi.FlagLookupBucket
	x.app.post(t, x.app.keyed(cmd))
	x.p.a.Poll(x.p.now)
	x.p.ta.deliverTo(x.p.now, x.p.b)
	held := x.p.tb.free // b's Tx has no buffer for the bucket it would answer with
	x.p.tb.free = nil
	x.p.b.Poll(x.p.now)
	x.p.tb.free = held
	putEntry(b, 1, 21, 0, 0, 2) // the tag is in the bucket now
	x.p.run()
	got := x.app.completions()
	if len(got) != 1 || got[0].Status != abi.StatusOK || got[0].Length != 32 || !bytes.Equal(x.sink[:32], b[32:64]) {
		t.Fatalf("%+v", got)
	}
	if s := x.p.b.Stats(); s.TxNoBuffer == 0 {
		t.Fatal("the answer found a tx buffer: the test tests nothing")
	}
	x.audit(t)
}
