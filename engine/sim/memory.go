package sim

import (
	"bytes"
	"unsafe"

	"github.com/onerma/onerma/abi"
)

// Application memory: the portal sink layout, aligned allocation, the
// regions' data patterns and the poison of untouched bytes.

// Sink layout of a portal: one area per slot, then a scratch area that only
// commands which must never run point at. An op on slot k lands at
// areaBytes*k + x with x+length <= areaBytes, so in-flight ops never share
// bytes and every byte outside the current op of a slot must stay poison.
const (
	areaBytes = 2 * abi.MaxOpBytes
	poison    = 0xa5
)

// alignedBytes returns n zeroed bytes starting on a 64-byte boundary (the
// rings' cache-line layout requires it, as hugepage memory would give).
func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := int((64 - uintptr(unsafe.Pointer(unsafe.SliceData(b)))%64) % 64)
	return b[off : off+n : off+n]
}

func nextPow2(v uint32) uint32 {
	p := uint32(2)
	for p < v {
		p *= 2
	}
	return p
}

// Patterns: byte i of a remote-readable region with pattern id g.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func patByte(g, i uint64) byte { return byte(mix64(g<<32^i>>3) >> (8 * (i & 7))) }

// fillPatternAt writes bytes off.. of pattern g into dst, a word at a time.
func fillPatternAt(dst []byte, g, off uint64) {
	for i := 0; i < len(dst); {
		o := off + uint64(i)
		v := mix64(g<<32^o>>3) >> (8 * (o & 7))
		for k := o & 7; k < 8 && i < len(dst); k++ {
			dst[i] = byte(v)
			v >>= 8
			i++
		}
	}
}

func fillPattern(b []byte, g uint64) { fillPatternAt(b, g, 0) }

func checkPattern(b []byte, g uint64) bool {
	var want [areaBytes]byte
	for off := 0; off < len(b); off += len(want) {
		n := min(len(want), len(b)-off)
		fillPatternAt(want[:n], g, uint64(off))
		if !bytes.Equal(b[off:off+n], want[:n]) {
			return false
		}
	}
	return true
}

var poisonBuf = bytes.Repeat([]byte{poison}, areaBytes)

// firstNotPoison returns the index of the first byte of b that is not
// poison, or -1.
func firstNotPoison(b []byte) int {
	for off := 0; off < len(b); off += len(poisonBuf) {
		n := min(len(poisonBuf), len(b)-off)
		if !bytes.Equal(b[off:off+n], poisonBuf[:n]) {
			for i, v := range b[off : off+n] {
				if v != poison {
					return off + i
				}
			}
		}
	}
	return -1
}

func fill(b []byte, v byte) {
	if v == poison {
		for off := 0; off < len(b); off += len(poisonBuf) {
			copy(b[off:], poisonBuf)
		}
		return
	}
	for i := range b {
		b[i] = v
	}
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
