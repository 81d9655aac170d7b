package soak

import (
	"encoding/binary"
	"fmt"
)

// The bytes the soak writes are a function of where they go and which
// generation of that place they are, so a reader can tell any generation
// from any other and from garbage without keeping copies.
//
// A raw block (an op's range, at most 4 KB) of generation g holds, as
// little-endian words: word 0 = g, word 1 = the block's tag, and word k ≥ 2
// = mix(tag, g, k). A block's content does not depend on the op's size:
// the first n bytes of a 4 KB write of generation g are exactly a 64 B
// write of it, so a 64 B READ of a block last written with 4 KB checks
// against the same generation. Sizes are multiples of 64 bytes.
//
// An executor range of generation g holds at byte offset o of its
// partition the word mix(part, g, o/8): any length, any 8-aligned offset.

// mix is splitmix64's finaliser of a, b and c: consecutive words differ
// in about half their bits, so a misplaced or stale word never matches.
func mix(a, b, c uint64) uint64 {
	z := a*0x9e3779b97f4a7c15 ^ b*0xbf58476d1ce4e5b9 ^ c*0x94d049bb133111eb
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillBlock writes generation gen of the block tagged tag into b
// (len(b) a multiple of 8, at least 16).
func fillBlock(b []byte, tag, gen uint64) {
	binary.LittleEndian.PutUint64(b[0:], gen)
	binary.LittleEndian.PutUint64(b[8:], tag)
	for k := 2; k*8 < len(b); k++ {
		binary.LittleEndian.PutUint64(b[k*8:], mix(tag, gen, uint64(k)))
	}
}

// checkBlock reports which of the generations in gens b holds for the
// block tagged tag, or an error naming the first byte that fits none.
func checkBlock(b []byte, tag uint64, gens ...uint64) (uint64, error) {
	if len(b) < 16 || len(b)%8 != 0 {
		return 0, fmt.Errorf("block of %d bytes: want a multiple of 8, at least 16", len(b))
	}
	gen := binary.LittleEndian.Uint64(b[0:])
	known := false
	for _, g := range gens {
		known = known || g == gen
	}
	if !known {
		return 0, fmt.Errorf("block %#x holds generation %d, want one of %v", tag, gen, gens)
	}
	if got := binary.LittleEndian.Uint64(b[8:]); got != tag {
		return 0, fmt.Errorf("block %#x of generation %d: word 1 is the tag %#x", tag, gen, got)
	}
	for k := 2; k*8 < len(b); k++ {
		if got, want := binary.LittleEndian.Uint64(b[k*8:]), mix(tag, gen, uint64(k)); got != want {
			return 0, fmt.Errorf("block %#x of generation %d: word %d (byte %d) is %#x, want %#x", tag, gen, k, k*8, got, want)
		}
	}
	return gen, nil
}

// fillRange writes generation gen of partition part at partition offset
// off into b (off and len(b) multiples of 8).
func fillRange(b []byte, part, gen, off uint64) {
	w := off / 8
	for k := 0; k*8 < len(b); k++ {
		binary.LittleEndian.PutUint64(b[k*8:], mix(part, gen, w+uint64(k)))
	}
}

// checkRange reports the first word of b that is not generation gen of
// partition part at offset off.
func checkRange(b []byte, part, gen, off uint64) error {
	w := off / 8
	for k := 0; k*8 < len(b); k++ {
		if got, want := binary.LittleEndian.Uint64(b[k*8:]), mix(part, gen, w+uint64(k)); got != want {
			return fmt.Errorf("partition %d generation %d: the word at offset %d is %#x, want %#x", part, gen, off+uint64(k)*8, got, want)
		}
	}
	return nil
}
