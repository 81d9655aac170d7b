package soak

import (
	"bytes"
	"strings"
	"testing"
)

func TestBlockContent(t *testing.T) {
	big, small := make([]byte, 4096), make([]byte, 64)
	fillBlock(big, blockTag(1, 300), 7)
	fillBlock(small, blockTag(1, 300), 7)
	// A block's first bytes do not depend on the size written.
	if !bytes.Equal(big[:64], small) {
		t.Fatal("the first 64 bytes of a 4 KB block differ from a 64 B block of the same generation")
	}
	if g, err := checkBlock(big, blockTag(1, 300), 6, 7); err != nil || g != 7 {
		t.Fatalf("checkBlock of generation 7 against {6, 7}: %d, %v", g, err)
	}
	if _, err := checkBlock(big, blockTag(1, 300), 6, 8); err == nil || !strings.Contains(err.Error(), "generation 7") {
		t.Fatalf("generation 7 accepted as one of {6, 8}: %v", err)
	}
	if _, err := checkBlock(big, blockTag(1, 301), 7); err == nil {
		t.Fatal("another block's bytes accepted")
	}
	// Bytes of another generation past a prefix (a smaller WRITE that
	// did not cover them) are caught at the first word that differs.
	old := make([]byte, 4096)
	fillBlock(old, blockTag(1, 300), 6)
	mixed := append(append([]byte(nil), big[:1024]...), old[1024:]...)
	if _, err := checkBlock(mixed, blockTag(1, 300), 7); err == nil || !strings.Contains(err.Error(), "byte 1024") {
		t.Fatalf("a block of two generations: %v, want a mismatch at byte 1024", err)
	}
	big[4095] ^= 1
	if _, err := checkBlock(big, blockTag(1, 300), 7); err == nil || !strings.Contains(err.Error(), "byte 4088") {
		t.Fatalf("a flipped last byte: %v, want a mismatch in the last word", err)
	}
}

func TestRangeContent(t *testing.T) {
	whole := make([]byte, 1<<16)
	fillRange(whole, partTag(2, 1), 3, 0)
	part := make([]byte, 4096)
	fillRange(part, partTag(2, 1), 3, 8192)
	if !bytes.Equal(whole[8192:8192+4096], part) {
		t.Fatal("a range filled at an offset differs from the same bytes of a range filled from 0")
	}
	if err := checkRange(part, partTag(2, 1), 3, 8192); err != nil {
		t.Fatal(err)
	}
	if err := checkRange(part, partTag(2, 1), 4, 8192); err == nil {
		t.Fatal("generation 3 accepted as 4")
	}
	if err := checkRange(part, partTag(2, 1), 3, 8200); err == nil {
		t.Fatal("bytes accepted at the wrong offset")
	}
}
