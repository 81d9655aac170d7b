package abi

import (
	"errors"
	"testing"
)

func TestLookupCommandRoundTrip(t *testing.T) {
	c := Command{Op: OpLookup, Flags: FlagLookupBucket, Slot: 77, Cookie: 1 << 60, RemoteAddr: 0x0a000002, RemoteRegion: MakeRegionID(5, 9),
		RemoteOffset: 1<<32 - 256, Tag: 0xfedcba9876543210, LocalRegion: MakeRegionID(2, 1), Length: 4096, LocalOffset: 1<<40 - 1, Key: [16]byte{1, 2, 3}}
	b := make([]byte, CommandSize)
	c.Encode(b)
	var d Command
	if err := d.Decode(b); err != nil || d != c {
		t.Fatalf("(-want +got)\n%+v\n%+v %v", c, d, err)
	}
	// Values the layout cannot carry saturate: still too large, and
	// outside every region with a bucket layout.
	c.Length, c.RemoteOffset = 1<<20, 1<<40
	c.Encode(b)
	if err := d.Decode(b); err != nil || d.Length != 0xffff || d.RemoteOffset != 0xffffffff || d.RemoteOffset < MaxLookupRegionBytes {
		t.Fatalf("%+v %v", d, err)
	}
	// A READ has no tag: it is not encoded, and decodes as 0.
	r := Command{Op: OpRead, Tag: 5, RemoteOffset: 1 << 40, Length: 64}
	r.Encode(b)
	if err := d.Decode(b); err != nil || d.Tag != 0 || d.RemoteOffset != 1<<40 || d.Length != 64 {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestLookupStatusNames(t *testing.T) {
	for s, want := range map[Status]string{StatusRemoteNotFound: "REMOTE_NOT_FOUND", StatusRemoteLookupBounds: "REMOTE_LOOKUP_BOUNDS",
		StatusRemoteLookupTooLarge: "REMOTE_LOOKUP_TOO_LARGE"} {
		if s.String() != want || !s.IsRemote() {
			t.Errorf("%d: %q remote %v", s, s.String(), s.IsRemote())
		}
	}
	if OpLookup.String() != "LOOKUP" {
		t.Error(OpLookup.String())
	}
	if PermAll&PermRemoteLookup != 0 || PermAny != PermAll|PermRemoteLookup {
		t.Errorf("PermAll %#x PermAny %#x", PermAll, PermAny)
	}
}

func TestBucketLayoutValidate(t *testing.T) {
	good := BucketLayout{BucketBytes: 256, EntryBytes: 32, TagOff: 0, TagWidth: 8, PtrOff: 8, PtrWidth: 8, LenOff: 16, LenWidth: 4}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if good.Entries() != 8 || LookupTargetOffset(32) != 64 || LookupTargetOffset(64) != 64 || LookupTargetOffset(65) != 128 {
		t.Fatal("entries or target offset")
	}
	for _, tc := range []struct {
		name string
		mod  func(*BucketLayout)
		want error
	}{
		{"bucket 0", func(l *BucketLayout) { l.BucketBytes = 0 }, ErrLayoutBucket},
		{"bucket 4097", func(l *BucketLayout) { l.BucketBytes = 4097 }, ErrLayoutBucket},
		{"stride 0", func(l *BucketLayout) { l.EntryBytes = 0 }, ErrLayoutEntry},
		{"stride above bucket", func(l *BucketLayout) { l.EntryBytes = 300 }, ErrLayoutEntry},
		{"no room for a target", func(l *BucketLayout) { l.BucketBytes, l.EntryBytes = 4096, 4033 }, ErrLayoutFit},
		{"tag width 0", func(l *BucketLayout) { l.TagWidth = 0 }, ErrLayoutWidth},
		{"pointer width 5", func(l *BucketLayout) { l.PtrWidth = 5 }, ErrLayoutWidth},
		{"length width 3", func(l *BucketLayout) { l.LenWidth = 3 }, ErrLayoutWidth},
		{"tag past the entry", func(l *BucketLayout) { l.TagOff = 25 }, ErrLayoutField},
		{"pointer offset huge", func(l *BucketLayout) { l.PtrOff = 1<<32 - 1 }, ErrLayoutField},
		{"length past the entry", func(l *BucketLayout) { l.LenOff = 30 }, ErrLayoutField},
		{"pointer shift 33", func(l *BucketLayout) { l.PtrShift = 33 }, ErrLayoutShift},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := good
			tc.mod(&l)
			if err := l.Validate(); !errors.Is(err, tc.want) {
				t.Fatalf("(-want %v +got) %v", tc.want, err)
			}
		})
	}
	// Every width reads its bytes little-endian.
	b := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for w, want := range map[uint32]uint64{1: 1, 2: 0x0201, 4: 0x04030201, 8: 0x0807060504030201} {
		if got := Field(b, w); got != want {
			t.Errorf("width %d: %#x", w, got)
		}
	}
}
