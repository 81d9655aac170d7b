package abi

import (
	"sync"
	"testing"
	"unsafe"
)

func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

func TestCommandRoundTrip(t *testing.T) {
	c := Command{Op: OpRead, Flags: 3, Slot: 77, Cookie: 1 << 60, RemoteAddr: 0x0a000002, RemoteRegion: MakeRegionID(5, 9),
		RemoteOffset: 1 << 40, LocalRegion: MakeRegionID(2, 1), Length: 4096, LocalOffset: 12345, Key: [16]byte{1, 2, 3}}
	b := make([]byte, CommandSize)
	c.Encode(b)
	var d Command
	if err := d.Decode(b); err != nil || d != c {
		t.Fatalf("(-want +got)\n%+v\n%+v %v", c, d, err)
	}
	b[3] = 1
	if err := d.Decode(b); err != ErrReservedBits || d != (Command{}) {
		t.Fatalf("reserved bytes accepted: %v", err)
	}
	if err := d.Decode(b[:63]); err != ErrShortCommand {
		t.Fatal(err)
	}
}

func TestCompletionRoundTrip(t *testing.T) {
	c := Completion{Cookie: 9, Slot: 3, Status: StatusNack, Op: OpRead, IssueDelayNs: 100, TotalDelayNs: 2000, Length: 64}
	b := make([]byte, CompletionSize)
	c.Encode(b)
	var d Completion
	d.Decode(b)
	if d != c {
		t.Fatalf("%+v", d)
	}
}

func TestStatusNames(t *testing.T) {
	for s, want := range map[Status]string{StatusOK: "OK", StatusRemoteAuthFailure: "REMOTE_AUTHENTICATION_FAILURE",
		StatusNack: "NACK", StatusTimeout: "TIMEOUT", StatusDispatchTimeout: "DISPATCH_TIMEOUT", 99: "STATUS_99"} {
		if s.String() != want {
			t.Errorf("%d: %q", s, s.String())
		}
	}
}

func TestRingWraparoundAndFull(t *testing.T) {
	mem := aligned(RingBytes(4, 8))
	p, err := NewProducer(mem, 4, 8)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := NewConsumer(mem, 4, 8)
	// Start near the uint32 wrap to prove free-running indices work.
	p.next, p.consCache = 1<<32-2, 1<<32-2
	p.prod.Store(p.next)
	p.cons.Store(p.next)
	c.next, c.prodCache = p.next, p.next
	for round := 0; round < 5; round++ {
		for k := 0; k < 4; k++ {
			e := p.Reserve()
			if e == nil {
				t.Fatalf("round %d: full after %d", round, k)
			}
			e[0] = byte(round*4 + k)
			p.Commit()
		}
		if p.Reserve() != nil {
			t.Fatal("reserve on a full ring")
		}
		if c.Peek() != nil {
			t.Fatal("unpublished entries visible")
		}
		p.Publish()
		for k := 0; k < 4; k++ {
			e := c.Peek()
			if e == nil || e[0] != byte(round*4+k) {
				t.Fatalf("round %d entry %d: %v", round, k, e)
			}
			c.Advance()
		}
		if c.Peek() != nil {
			t.Fatal("empty ring returned an entry")
		}
		c.Release()
	}
}

func TestRingCorruptIndices(t *testing.T) {
	mem := aligned(RingBytes(4, 8))
	c, _ := NewConsumer(mem, 4, 8)
	c.prod.Store(100)
	if c.Peek() != nil || !c.Corrupt() {
		t.Fatal("producer index far ahead not detected")
	}
	mem2 := aligned(RingBytes(4, 8))
	p, _ := NewProducer(mem2, 4, 8)
	p.cons.Store(7) // consumer ahead of producer
	if p.Free() != 0 || !p.Corrupt() {
		t.Fatal("consumer index ahead not detected")
	}
}

func TestRingConcurrentSPSC(t *testing.T) {
	mem := aligned(RingBytes(64, 8))
	p, _ := NewProducer(mem, 64, 8)
	c, _ := NewConsumer(mem, 64, 8)
	const n = 200000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < n; {
			e := p.Reserve()
			if e == nil {
				p.Publish()
				continue
			}
			*(*uint64)(unsafe.Pointer(&e[0])) = i
			p.Commit()
			i++
			if i%7 == 0 {
				p.Publish()
			}
		}
		p.Publish()
	}()
	for want := uint64(0); want < n; {
		e := c.Peek()
		if e == nil {
			c.Release()
			continue
		}
		if got := *(*uint64)(unsafe.Pointer(&e[0])); got != want {
			t.Fatalf("got %d want %d", got, want)
		}
		c.Advance()
		want++
	}
	wg.Wait()
}

func TestLayout(t *testing.T) {
	l, err := NewLayout(7, 256, 512)
	if err != nil {
		t.Fatal(err)
	}
	seg := aligned(int(l.Size))
	l.Encode(seg)
	got, err := DecodeLayout(seg)
	if err != nil || got != l {
		t.Fatalf("%v %+v", err, got)
	}
	if l.CmdOff%64 != 0 || l.CplOff%64 != 0 {
		t.Fatal("rings not cache-line aligned")
	}
	seg[20] = 3 // capacity not a power of two
	if _, err := DecodeLayout(seg); err == nil {
		t.Fatal("bad layout accepted")
	}
	if _, err := DecodeLayout(seg[:10]); err == nil {
		t.Fatal("short segment accepted")
	}
}

func TestRingAllocs(t *testing.T) {
	mem := aligned(RingBytes(64, CommandSize))
	p, _ := NewProducer(mem, 64, CommandSize)
	c, _ := NewConsumer(mem, 64, CommandSize)
	var cmd Command
	if n := testing.AllocsPerRun(1000, func() {
		cmd.Encode(p.Reserve())
		p.Commit()
		p.Publish()
		_ = cmd.Decode(c.Peek())
		c.Advance()
		c.Release()
	}); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

// FuzzCommandDecode: any 64 bytes either decode and re-encode to themselves
// or are rejected with a zeroed command.
func FuzzCommandDecode(f *testing.F) {
	b := make([]byte, CommandSize)
	(&Command{Op: OpRead, Slot: 1, Length: 64, RemoteAddr: 0x0a000001, LocalRegion: MakeRegionID(1, 1)}).Encode(b)
	f.Add(b)
	l := make([]byte, CommandSize)
	(&Command{Op: OpLookup, Slot: 1, Length: 4096, Tag: 7, RemoteOffset: 256, RemoteAddr: 0x0a000001, LocalRegion: MakeRegionID(1, 1)}).Encode(l)
	f.Add(l)
	f.Add(make([]byte, 10))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if err := c.Decode(b); err != nil {
			if c != (Command{}) {
				t.Fatal("non-zero command on error")
			}
			return
		}
		out := make([]byte, CommandSize)
		c.Encode(out)
		if string(out) != string(b[:CommandSize]) {
			t.Fatalf("round trip\n%x\n%x", b[:CommandSize], out)
		}
	})
}

func TestClassNames(t *testing.T) {
	for _, c := range []Class{ClassLow, ClassHigh} {
		if got, ok := ParseClass(c.String()); !ok || got != c {
			t.Fatalf("ParseClass(%q) = %v, %v", c.String(), got, ok)
		}
	}
	if c, ok := ParseClass(""); !ok || c != ClassLow {
		t.Fatalf(`ParseClass("") = %v, %v, want low`, c, ok)
	}
	if _, ok := ParseClass("medium"); ok {
		t.Fatal(`ParseClass("medium") accepted`)
	}
	if s := Class(7).String(); s != "class(7)" {
		t.Fatalf("Class(7) = %q", s)
	}
}

// TestSummary: Ring sets a portal's bit (writing the word only when the
// bit is clear), Take returns and clears a word, a portal outside the
// summary does not ring, and the flag word shares the arm word's line
// without overlapping it.
func TestSummary(t *testing.T) {
	if SummaryBytes(1) != 8 || SummaryBytes(64) != 8 || SummaryBytes(65) != 16 {
		t.Fatal("SummaryBytes")
	}
	mem := make([]uint64, 2)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&mem[0])), 16)
	for _, bad := range [][]byte{nil, b[:12], b[4:12]} {
		if _, err := NewSummary(bad); err == nil {
			t.Errorf("NewSummary took %d bytes at offset %d", len(bad), uintptr(unsafe.Pointer(unsafe.SliceData(bad)))%8)
		}
	}
	s, err := NewSummary(b)
	if err != nil || s.Words() != 2 || s.Portals() != 128 {
		t.Fatalf("NewSummary: %v, %d words", err, s.Words())
	}
	s.Ring(3)
	s.Ring(3)
	s.Ring(70)
	s.Ring(128) // outside: nothing
	if mem[0] != 1<<3 || mem[1] != 1<<6 {
		t.Fatalf("words %#x %#x", mem[0], mem[1])
	}
	if s.Take(0) != 1<<3 || s.Take(0) != 0 || s.Take(1) != 1<<6 || mem[1] != 0 {
		t.Fatal("Take")
	}
	if SegmentSummaryOff < SegmentArmOff+4 || SegmentSummaryOff+4 > SegmentHeaderSize || SegmentSummaryOff/64 != SegmentArmOff/64 {
		t.Error("the summary flag word is not beside the arm word in the header's second line")
	}
}
