package soak

import (
	"net/netip"
	"strings"
	"testing"
)

var (
	testA = netip.MustParseAddr("10.1.0.2")
	testB = netip.MustParseAddr("10.2.0.2")
)

func TestNonceSet(t *testing.T) {
	s := newNonceSet([]netip.Addr{testA, testB})
	a, b := addr32(testA), addr32(testB)
	// Dense and sparse counters, two senders with the same counters.
	for c := uint64(1); c <= 100000; c += 3 {
		if !s.add(a, a, c, 1) || !s.add(b, b, c, 1) {
			t.Fatalf("counter %d refused", c)
		}
	}
	if !s.add(a, a, 1<<40, 1) {
		t.Fatal("a far counter refused")
	}
	if s.distinct != 2*33334+1 || s.repeats != 0 {
		t.Fatalf("distinct %d, repeats %d", s.distinct, s.repeats)
	}
	if s.add(a, a, 4, 1) || s.repeats != 1 {
		t.Fatalf("a repeated counter counted (repeats %d)", s.repeats)
	}
	if s.add(a, b, 5, 1) || s.mismatch != 1 {
		t.Fatal("a frame from A with B's nonce counted")
	}
	if s.add(addr32(netip.MustParseAddr("10.9.9.9")), 1, 2, 1) || s.foreign != 1 {
		t.Fatal("a frame from no engine counted")
	}
	if got := s.check(); len(got) != 3 {
		t.Fatalf("check: %q, want the repeat, the mismatch and the foreign frame", got)
	}
	// Counters up to 100000: four pages of 2^15 for each sender; and
	// the far one.
	if s.Bytes() != 9*4096 {
		t.Fatalf("%d bytes of pages", s.Bytes())
	}
}

func TestNonceIncarnations(t *testing.T) {
	s := newNonceSet([]netip.Addr{testA})
	a := addr32(testA)
	for c := uint64(1); c <= 1000; c++ {
		s.add(a, a, c, int64(c))
	}
	s.Died(testA, 2000)
	// The next incarnation resumes above the persisted mark.
	for c := uint64(1 << 32); c < 1<<32+10; c++ {
		s.add(a, a, c, 3000)
	}
	if p := s.check(); len(p) != 0 {
		t.Fatalf("check after a restart that resumed its counters: %q", p)
	}
	// A frame the dead engine sent before it was seen dead belongs to
	// its incarnation, whenever it is processed.
	s.add(a, a, 1001, 1999)
	if in := s.senders[a].incs; in[0].Frames != 1001 || in[1].Frames != 10 {
		t.Fatalf("incarnations %+v", in)
	}
	// An incarnation that starts again from 1 (its IV state lost).
	s.Died(testA, 4000)
	for c := uint64(2000); c < 2010; c++ {
		s.add(a, a, c, 5000)
	}
	p := s.check()
	if len(p) != 1 || !strings.Contains(p[0], "incarnation 3 used counter 2000") {
		t.Fatalf("check after a restart from counter 2000: %q", p)
	}
	// An incarnation with no frame at all.
	s.Died(testA, 6000)
	if p := s.check(); len(p) != 2 || !strings.Contains(p[1], "no frame captured from its incarnation 4") {
		t.Fatalf("check with a silent incarnation: %q", p)
	}
}
