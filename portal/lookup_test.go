package portal_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/portal"
)

// lookupLayout: buckets of 128 bytes, 4 entries of 32: tag u64 at 0,
// pointer u32 at 8, length u16 at 12, a stamp u64 at 24.
func lookupLayout(slab portal.RegionID) portal.BucketLayout {
	return portal.BucketLayout{BucketBytes: 128, EntryBytes: 32, TagWidth: 8, PtrOff: 8, PtrWidth: 4, LenOff: 12, LenWidth: 2, Linked: slab}
}

func putLookupEntry(b []byte, i int, tag uint64, ptr uint32, n uint16, stamp uint64) {
	e := b[i*32 : (i+1)*32]
	binary.LittleEndian.PutUint64(e[0:], tag)
	binary.LittleEndian.PutUint32(e[8:], ptr)
	binary.LittleEndian.PutUint16(e[12:], n)
	binary.LittleEndian.PutUint64(e[24:], stamp)
}

// lookup posts one LOOKUP and waits for its completion.
func lookup(t *testing.T, p *portal.Portal, op portal.Op) abi.Completion {
	t.Helper()
	s, ok := p.Slot()
	if !ok {
		t.Fatal("no free slot")
	}
	defer p.Release(s)
	op.Type, op.Slot, op.Remote = portal.OpLookup, s, engineIP
	if err := p.Submit(&op); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c [1]abi.Completion
	if _, err := p.Wait(ctx, c[:]); err != nil {
		t.Fatal(err)
	}
	if c[0].Cookie != op.Cookie || c[0].Op != abi.OpLookup {
		t.Fatalf("completion %+v", c[0])
	}
	return c[0]
}

// A LOOKUP through a real engine: found, not found (bare and with the
// bucket), a corrupt entry, a region without a layout, a READ key.
func TestLookupThroughEngine(t *testing.T) {
	sock := startEngine(t)
	owner, reader := dial(t, sock, "owner"), dial(t, sock, "reader")
	slab, err := owner.RegisterRegion(1<<16, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range slab.Bytes() {
		slab.Bytes()[i] = byte(i*13 + 5)
	}
	index, err := owner.RegisterLookupRegion(64*128, portal.PermRemoteLookup, lookupLayout(slab.ID()))
	if err != nil {
		t.Fatal(err)
	}
	b := index.Bytes()[9*128 : 10*128]
	putLookupEntry(b, 0, 100, 0, 10, 1)
	putLookupEntry(b, 2, 102, 5000, 3000, 2)
	putLookupEntry(b, 3, 103, 1<<16-10, 11, 3) // one byte past the slab
	reader.AllocSlots(1)
	sink, err := reader.RegisterRegion(8192, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	id := reader.Identity()
	kd := index.DeriveKey(id.Addr, id.PID, abi.OpLookup)
	op := portal.Op{RemoteRegion: index.ID(), RemoteOffset: 9 * 128, Key: kd, Local: sink, LocalOffset: 100, Length: 4096, Cookie: 1}

	op.Tag = 102
	c := lookup(t, reader, op)
	if c.Status != abi.StatusOK || c.Length != 64+3000 {
		t.Fatalf("found: %+v", c)
	}
	if !bytes.Equal(sink.Bytes()[100:132], b[64:96]) || !bytes.Equal(sink.Bytes()[164:164+3000], slab.Bytes()[5000:8000]) {
		t.Fatal("found: the answer is not the entry and its target")
	}

	clear(sink.Bytes())
	op.Tag, op.Cookie = 7, 2
	if c := lookup(t, reader, op); c.Status != abi.StatusRemoteNotFound || c.Length != 0 || !bytes.Equal(sink.Bytes(), make([]byte, 8192)) {
		t.Fatalf("not found: %+v", c)
	}
	op.LookupBucket, op.Cookie = true, 3
	if c := lookup(t, reader, op); c.Status != abi.StatusRemoteNotFound || c.Length != 128 || !bytes.Equal(sink.Bytes()[100:228], b) {
		t.Fatalf("not found, with the bucket: %+v", c)
	}
	op.LookupBucket = false

	clear(sink.Bytes())
	op.Tag, op.Cookie = 103, 4
	if c := lookup(t, reader, op); c.Status != abi.StatusRemoteLookupBounds || !bytes.Equal(sink.Bytes(), make([]byte, 8192)) {
		t.Fatalf("corrupt entry: %+v", c)
	}
	op.Tag, op.Cookie, op.Length = 102, 5, 1000
	if c := lookup(t, reader, op); c.Status != abi.StatusRemoteLookupTooLarge {
		t.Fatalf("a sink too small: %+v", c)
	}
	op.Length = 4096

	// The slab has no layout: a LOOKUP of it, with a LOOKUP key of it.
	ps := op
	ps.RemoteRegion, ps.RemoteOffset, ps.Key, ps.Cookie = slab.ID(), 0, slab.DeriveKey(id.Addr, id.PID, abi.OpLookup), 6
	if c := lookup(t, reader, ps); c.Status != abi.StatusRemotePermission {
		t.Fatalf("no permission: %+v", c)
	}
	// A READ's key does not do a LOOKUP.
	rk := op
	rk.Key, rk.Cookie = index.DeriveKey(id.Addr, id.PID, abi.OpRead), 7
	if c := lookup(t, reader, rk); c.Status != abi.StatusRemoteAuthFailure {
		t.Fatalf("a READ key: %+v", c)
	}
	// The bucket beyond the region.
	ob := op
	ob.RemoteOffset, ob.Cookie = 64*128-127, 8
	if c := lookup(t, reader, ob); c.Status != abi.StatusRemoteBounds {
		t.Fatalf("bucket beyond: %+v", c)
	}
	st, err := reader.Stats()
	if err != nil || st.CompletedLookup["OK"] != 1 || st.CompletedLookup["REMOTE_NOT_FOUND"] != 2 {
		t.Fatalf("completed_lookup %v, %v", st.CompletedLookup, err)
	}
}

func TestRegisterLookupRegionRefused(t *testing.T) {
	sock := startEngine(t)
	owner, other := dial(t, sock, "owner"), dial(t, sock, "other")
	slab, err := owner.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.RegisterRegion(4096, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	bad := lookupLayout(0)
	bad.TagWidth = 3
	for _, tc := range []struct {
		name string
		size uint64
		perm portal.Perm
		lay  portal.BucketLayout
		want string
	}{
		{"no PermRemoteLookup", 4096, abi.PermRemoteRead, lookupLayout(0), "want PermRemoteLookup"},
		{"a bad layout", 4096, portal.PermRemoteLookup, bad, "field width"},
		{"bucket above the region", 64, portal.PermRemoteLookup, lookupLayout(0), "for buckets of 128 bytes"},
		{"another portal's slab", 4096, portal.PermRemoteLookup, lookupLayout(foreign.ID()), "not a region of this portal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := owner.RegisterLookupRegion(tc.size, tc.perm, tc.lay); err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("(-want %q +got) %v", tc.want, err)
			}
		})
	}
	if _, err := owner.RegisterRegion(4096, abi.PermRemoteLookup); err == nil {
		t.Fatal("PermRemoteLookup without a layout accepted")
	}
	// The slab deregistered before the index: the index is still served,
	// its entries point nowhere (REMOTE_LOOKUP_BOUNDS).
	index, err := owner.RegisterLookupRegion(4096, portal.PermRemoteLookup, lookupLayout(slab.ID()))
	if err != nil {
		t.Fatal(err)
	}
	putLookupEntry(index.Bytes(), 1, 55, 0, 8, 1)
	owner.AllocSlots(1)
	sink, err := owner.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	id := owner.Identity()
	op := portal.Op{RemoteRegion: index.ID(), Tag: 55, Key: index.DeriveKey(id.Addr, id.PID, abi.OpLookup), Local: sink, Length: 4096, Cookie: 1}
	if c := lookup(t, owner, op); c.Status != abi.StatusOK || c.Length != 64+8 {
		t.Fatalf("before: %+v", c)
	}
	if err := owner.DeregisterRegion(slab); err != nil {
		t.Fatal(err)
	}
	op.Cookie = 2
	if c := lookup(t, owner, op); c.Status != abi.StatusRemoteLookupBounds {
		t.Fatalf("the slab gone: %+v", c)
	}
}

func TestPostLookupValidation(t *testing.T) {
	sock := startEngine(t)
	p := dial(t, sock, "p")
	p.AllocSlots(1)
	sink, err := p.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := p.Slot()
	for _, tc := range []struct {
		name string
		op   portal.Op
		want error
	}{
		{"bucket offset above 2^32-1", portal.Op{Type: portal.OpLookup, RemoteOffset: 1 << 32, Length: 64}, portal.ErrOp},
		{"a tag on a READ", portal.Op{Type: portal.OpRead, Tag: 1, Length: 64}, portal.ErrOp},
		{"the bucket flag on a WRITE", portal.Op{Type: portal.OpWrite, LookupBucket: true, Length: 64}, portal.ErrOp},
		{"length 0", portal.Op{Type: portal.OpLookup, Length: 0}, portal.ErrLength},
		{"sink bounds", portal.Op{Type: portal.OpLookup, Length: 4096, LocalOffset: 1}, portal.ErrBounds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := tc.op
			op.Slot, op.Remote, op.Local = s, engineIP, sink
			if err := p.Post(&op); !errors.Is(err, tc.want) {
				t.Fatalf("(-want %v +got) %v", tc.want, err)
			}
		})
	}
	if p.Staged() != 0 {
		t.Fatal("a refused op was staged")
	}
}

// The owner rewrites an entry and its records while LOOKUPs of it are in
// flight (two goroutines, no lock: the engine reads while the owner
// stores). An answer may be torn, and the client's checks catch it: the
// entry's stamp must be the record's, at its head and its tail, and the
// record's bytes those of its stamp. An answer that passes is never older
// than what the owner had published when the LOOKUP was posted.
func TestLookupRacingOwner(t *testing.T) {
	sock := startEngine(t)
	owner, reader := dial(t, sock, "owner"), dial(t, sock, "reader")
	const areas, areaBytes = 8, 1024
	slab, err := owner.RegisterRegion(areas*areaBytes, abi.PermLocalRead)
	if err != nil {
		t.Fatal(err)
	}
	index, err := owner.RegisterLookupRegion(128, portal.PermRemoteLookup, lookupLayout(slab.ID()))
	if err != nil {
		t.Fatal(err)
	}
	body := func(stamp uint64, j int) byte { return byte(stamp*131 + uint64(j)*7) }
	var published atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the owner: RCU into a ring of areas it reuses soon (so reads race)
		defer close(done)
		for stamp := uint64(1); ; stamp++ {
			select {
			case <-stop:
				return
			default:
			}
			a := int(stamp % areas)
			n := 16 + int(stamp*37%900)
			r := slab.Bytes()[a*areaBytes : a*areaBytes+n]
			binary.LittleEndian.PutUint64(r[0:], stamp)
			for j := 8; j < n-8; j++ {
				r[j] = body(stamp, j)
			}
			binary.LittleEndian.PutUint64(r[n-8:], stamp)
			putLookupEntry(index.Bytes(), 1, 77, uint32(a*areaBytes), uint16(n), stamp)
			published.Store(stamp)
			if stamp%64 == 0 {
				runtime.Gosched()
			}
		}
	}()
	reader.AllocSlots(1)
	sink, err := reader.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	id := reader.Identity()
	op := portal.Op{RemoteRegion: index.ID(), Tag: 77, Key: index.DeriveKey(id.Addr, id.PID, abi.OpLookup), Local: sink, Length: 4096}
	good, torn := 0, 0
	for i := 0; i < 2000 && (good < 200 || i < 400); i++ {
		pub := published.Load()
		op.Cookie = uint64(i + 1)
		c := lookup(t, reader, op)
		if c.Status == abi.StatusRemoteLookupBounds {
			torn++ // an entry torn between two records' lengths and pointers
			continue
		}
		if c.Status != abi.StatusOK {
			t.Fatalf("lookup %d: %+v", i, c)
		}
		b := sink.Bytes()
		es := binary.LittleEndian.Uint64(b[24:])
		n := int(binary.LittleEndian.Uint16(b[12:]))
		r := b[64 : 64+n]
		ok := n >= 16 && int(c.Length) == 64+n && binary.LittleEndian.Uint64(r) == es && binary.LittleEndian.Uint64(r[n-8:]) == es
		for j := 8; ok && j < n-8; j++ {
			ok = r[j] == body(es, j)
		}
		if !ok {
			torn++
			continue
		}
		if es < pub {
			t.Fatalf("lookup %d returned version %d, posted after version %d was published", i, es, pub)
		}
		good++
	}
	close(stop)
	<-done
	t.Logf("%d answers checked good, %d torn (caught by the checks)", good, torn)
	if good == 0 {
		t.Fatal("no answer passed the checks")
	}
}
