package e2e

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/frontdoor"
	"github.com/onerma/onerma/portal"
)

// LOOKUPs across engines over memif by the C and the Python clients: a Go
// owner registers an index with a bucket layout linked to a slab, and a C
// reader (examples/c/reader.c) or a Python one
// (examples/python/lookup_reader.py) looks tags up, every byte of every
// answer checked: a hit (entry and target, the index's pointers in 64-byte
// units: ptr_shift 6), a miss (with and without the bucket), corrupt
// entries, too short a sink, a bucket outside the region,
// a READ K_d, a region without a layout, a bucket rewritten by the owner,
// and an offset the library refuses.

const (
	lookupSlabBytes  = 64 << 10
	lookupIndexBytes = 16 * 256
	lookupBucket     = 3 * 256
	lookupPtrShift   = 6 // the index's pointers count 64-byte units, as kv's
)

// lookupOwner registers the slab (the pattern) and the index on owner:
// buckets of 8 entries of 32 bytes (tag u64 at 0, pointer u64 at 8 in
// units of 2^lookupPtrShift bytes, length u32 at 16), pointers into the
// slab. Bucket 3 holds a hit, an entry whose pointer is inside the slab
// as bytes but not as units, one past the slab's end and an empty target.
func lookupOwner(t *testing.T, owner *portal.Portal) (slab, index *portal.Region) {
	t.Helper()
	slab = ownerRegion(t, owner, lookupSlabBytes, abi.PermRemoteRead)
	lay := portal.BucketLayout{BucketBytes: 256, EntryBytes: 32, TagWidth: 8, PtrOff: 8, PtrWidth: 8, PtrShift: lookupPtrShift,
		LenOff: 16, LenWidth: 4, Linked: slab.ID()}
	index, err := owner.RegisterLookupRegion(lookupIndexBytes, abi.PermRemoteLookup, lay)
	if err != nil {
		t.Fatal(err)
	}
	putLookupEntry(index, 4, 0x99, lookupSlabBytes, 1) // stores 1024: a byte inside the slab, a unit past it
	putLookupEntry(index, 5, 0x1122334455667788, 1024, 700)
	putLookupEntry(index, 6, 0x66, lookupSlabBytes-128, 129)
	putLookupEntry(index, 7, 0x77, 0, 0)
	return slab, index
}

// putLookupEntry writes entry e of the bucket at lookupBucket: its
// pointer to the byte off (a multiple of 2^lookupPtrShift) of the slab.
func putLookupEntry(index *portal.Region, e int, tag, off uint64, n uint32) {
	if off&(1<<lookupPtrShift-1) != 0 {
		panic(fmt.Sprintf("lookup entry at byte %d: not a multiple of %d", off, 1<<lookupPtrShift))
	}
	b := index.Bytes()[lookupBucket+e*32:]
	binary.LittleEndian.PutUint64(b, tag)
	binary.LittleEndian.PutUint64(b[8:], off>>lookupPtrShift)
	binary.LittleEndian.PutUint32(b[16:], n)
}

// lookupCases drives a reader (the C or the Python one, both answering
// "lookup STATUS LENGTH HEX") against lookupOwner's regions.
func lookupCases(t *testing.T, rd *cProc, slab, index *portal.Region, ia netip.Addr, pid uint32) {
	kd := index.DeriveKey(ia, pid, abi.OpLookup)
	lookup := func(region abi.RegionID, off uint64, tag uint64, length int, bucket int, key aesni.Key, want abi.Status, wantLen int) []byte {
		t.Helper()
		f := rd.ask("lookup %d %d %x %d %d %x", uint32(region), off, tag, length, bucket, key[:])
		if len(f) < 3 || f[0] != "lookup" || f[1] != want.String() {
			t.Fatalf("lookup of %#x at %d of %#x: %q, want %s", tag, off, uint32(region), f, want)
		}
		if n, err := strconv.Atoi(f[2]); err != nil || n != wantLen {
			t.Fatalf("lookup of %#x at %d: answer of %s bytes, want %d", tag, off, f[2], wantLen)
		}
		if wantLen == 0 {
			if len(f) != 3 {
				t.Fatalf("lookup of %#x at %d: bytes back with no answer: %q", tag, off, f)
			}
			return nil
		}
		got, err := hex.DecodeString(f[3])
		if err != nil || len(got) != wantLen || len(f) != 4 {
			t.Fatalf("lookup of %#x at %d: %d bytes back, want %d (%v)", tag, off, len(got), wantLen, err)
		}
		return got
	}
	entry := func(e int) []byte { return index.Bytes()[lookupBucket+e*32 : lookupBucket+e*32+32] }
	checkHit := func(got []byte, e int, ptr uint64, n int) {
		t.Helper()
		if !bytes.Equal(got[:32], entry(e)) {
			t.Fatalf("hit: entry %x, want %x", got[:32], entry(e))
		}
		if !bytes.Equal(got[32:64], make([]byte, 32)) { // the entry shares the target's frame
			t.Fatalf("hit: the bytes between entry and target are not zero: %x", got[32:64])
		}
		for i, b := range got[64:] {
			if b != pattern(ptr+uint64(i)) {
				t.Fatalf("hit: target byte %d is %#x, want %#x", i, b, pattern(ptr+uint64(i)))
			}
		}
		if len(got) != 64+n {
			t.Fatalf("hit: %d bytes, want %d", len(got), 64+n)
		}
	}

	checkHit(lookup(index.ID(), lookupBucket, 0x1122334455667788, 4096, 0, kd, abi.StatusOK, 764), 5, 1024, 700)
	if got := lookup(index.ID(), lookupBucket, 0x77, 4096, 0, kd, abi.StatusOK, 32); !bytes.Equal(got, entry(7)) {
		t.Fatalf("empty target: %x", got)
	}
	lookup(index.ID(), lookupBucket, 0x42, 4096, 0, kd, abi.StatusRemoteNotFound, 0)
	if got := lookup(index.ID(), lookupBucket, 0x42, 4096, 1, kd, abi.StatusRemoteNotFound, 256); !bytes.Equal(got, index.Bytes()[lookupBucket:lookupBucket+256]) {
		t.Fatalf("miss: the bucket back differs")
	}
	lookup(index.ID(), lookupBucket, 0x66, 4096, 0, kd, abi.StatusRemoteLookupBounds, 0)
	lookup(index.ID(), lookupBucket, 0x99, 4096, 0, kd, abi.StatusRemoteLookupBounds, 0)
	lookup(index.ID(), lookupBucket, 0x1122334455667788, 763, 0, kd, abi.StatusRemoteLookupTooLarge, 0)
	lookup(index.ID(), lookupIndexBytes-255, 1, 4096, 0, kd, abi.StatusRemoteBounds, 0)
	lookup(index.ID(), lookupBucket, 0x1122334455667788, 4096, 0, index.DeriveKey(ia, pid, abi.OpRead), abi.StatusRemoteAuthFailure, 0)
	lookup(slab.ID(), 0, 1, 4096, 0, slab.DeriveKey(ia, pid, abi.OpLookup), abi.StatusRemotePermission, 0)

	// The owner rewrites the bucket: the next LOOKUP follows the new entry.
	putLookupEntry(index, 5, 0x1122334455667788, 20032, 2000)
	checkHit(lookup(index.ID(), lookupBucket, 0x1122334455667788, 4096, 0, kd, abi.StatusOK, 2064), 5, 20032, 2000)
	putLookupEntry(index, 2, 0x1122334455667788, lookupSlabBytes-64, 64) // an earlier entry with the tag matches first
	checkHit(lookup(index.ID(), lookupBucket, 0x1122334455667788, 4096, 0, kd, abi.StatusOK, 128), 2, lookupSlabBytes-64, 64)

	// The library refuses a bucket offset above 2^32-1: nothing posted.
	if f := rd.ask("lookup %d %d 1 64 0 %x", uint32(index.ID()), uint64(1)<<32, kd[:]); len(f) < 2 || f[1] != "post" {
		t.Fatalf("lookup at 2^32: %q", f)
	}
}

// A Go owner and the C reader.
func TestCLookupGoOwner(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	owner := dial(t, b, "go-lookup-owner")
	slab, index := lookupOwner(t, owner)
	rd := startC(t, "onerma-c-reader", "-socket", a.Socket, "-remote", ipB.String(), "-region", strconv.Itoa(int(slab.ID())))
	addr, pid := identityOf(t, strings.Fields(rd.line(10*time.Second)))
	ia, err := parseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	lookupCases(t, rd, slab, index, ia, pid)
}

var (
	pyLibOnce sync.Once
	pyLibErr  error
)

// A Go owner and the Python reader (the package from the source tree,
// over the tree's libonerma, built here).
func TestPyLookupGoOwner(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	root, err := frontdoor.Root()
	if err != nil {
		t.Fatal(err)
	}
	pyLibOnce.Do(func() {
		if out, err := exec.Command("make", "-s", "-C", filepath.Join(root, "libonerma"), "all").CombinedOutput(); err != nil {
			pyLibErr = fmt.Errorf("make -C libonerma: %v\n%s", err, out)
		}
	})
	if pyLibErr != nil {
		t.Fatal(pyLibErr)
	}
	owner := dial(t, b, "go-lookup-owner")
	slab, index := lookupOwner(t, owner)
	cmd := exec.Command(frontdoor.Python(), filepath.Join(root, "examples", "python", "lookup_reader.py"),
		"-socket", a.Socket, "-remote", ipB.String())
	cmd.Env = append(cmd.Environ(), "PYTHONPATH="+filepath.Join(root, "python"), "ONERMA_LIB="+filepath.Join(root, "libonerma", "build", "libonerma.so"))
	rd := startCmd(t, cmd)
	addr, pid := identityOf(t, strings.Fields(rd.line(20*time.Second)))
	ia, err := parseAddr(addr)
	if err != nil {
		t.Fatal(err)
	}
	lookupCases(t, rd, slab, index, ia, pid)
}
