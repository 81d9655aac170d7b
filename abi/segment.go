package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// SegmentMagic is "1RMA" little-endian; SegmentVersion changes with any
// layout change of this package.
const (
	SegmentMagic   uint32 = 0x414d5231
	SegmentVersion uint16 = 1
	// SegmentHeaderSize is padded to two cache lines.
	SegmentHeaderSize = 128
	// SegmentArmOff is the completion doorbell's arm word (uint32), in
	// the header's second cache line (with the summary flag word,
	// SegmentSummaryOff). The application stores 1 before
	// it sleeps on the doorbell; the engine, after publishing completions,
	// swaps a 1 back to 0 and rings (like ibv_req_notify_cq). Both sides
	// use sequentially consistent atomics, so a completion published
	// while the application arms is never missed: either the engine sees
	// the 1, or the application, re-checking the ring after arming, sees
	// the completion.
	SegmentArmOff = 64
)

// Layout describes a portal segment. The engine chooses it, writes it into
// the segment header, and keeps its own copy (it never re-reads the header,
// which the application could overwrite).
//
//	0  magic u32 | version u16 | reserved u16
//	8  size u64
//	16 cmdOff u32 | cmdCap u32 | cplOff u32 | cplCap u32
//	32 portal u32 | reserved ...
type Layout struct {
	Size   uint64
	CmdOff uint32
	CmdCap uint32
	CplOff uint32
	CplCap uint32
	Portal uint32
}

// NewLayout lays out rings of the given capacities (powers of two).
func NewLayout(portal, cmdCap, cplCap uint32) (Layout, error) {
	if cmdCap < 2 || cmdCap&(cmdCap-1) != 0 || cplCap < 2 || cplCap&(cplCap-1) != 0 {
		return Layout{}, ErrRingCapacity
	}
	l := Layout{CmdOff: SegmentHeaderSize, CmdCap: cmdCap, CplCap: cplCap, Portal: portal}
	l.CplOff = align64(l.CmdOff + uint32(RingBytes(cmdCap, CommandSize)))
	l.Size = uint64(align64(l.CplOff + uint32(RingBytes(cplCap, CompletionSize))))
	return l, nil
}

func align64(v uint32) uint32 { return (v + 63) &^ 63 }

// Encode writes the header into seg.
func (l *Layout) Encode(seg []byte) {
	binary.LittleEndian.PutUint32(seg[0:], SegmentMagic)
	binary.LittleEndian.PutUint16(seg[4:], SegmentVersion)
	binary.LittleEndian.PutUint64(seg[8:], l.Size)
	binary.LittleEndian.PutUint32(seg[16:], l.CmdOff)
	binary.LittleEndian.PutUint32(seg[20:], l.CmdCap)
	binary.LittleEndian.PutUint32(seg[24:], l.CplOff)
	binary.LittleEndian.PutUint32(seg[28:], l.CplCap)
	binary.LittleEndian.PutUint32(seg[32:], l.Portal)
}

// ErrSegment: the header is not a valid portal segment header.
var ErrSegment = errors.New("abi: invalid portal segment header")

// DecodeLayout reads and validates a header from a mapped segment.
func DecodeLayout(seg []byte) (Layout, error) {
	if len(seg) < SegmentHeaderSize {
		return Layout{}, fmt.Errorf("%w: %d bytes", ErrSegment, len(seg))
	}
	if m := binary.LittleEndian.Uint32(seg[0:]); m != SegmentMagic {
		return Layout{}, fmt.Errorf("%w: magic %#x", ErrSegment, m)
	}
	if v := binary.LittleEndian.Uint16(seg[4:]); v != SegmentVersion {
		return Layout{}, fmt.Errorf("%w: version %d, want %d", ErrSegment, v, SegmentVersion)
	}
	l := Layout{
		Size:   binary.LittleEndian.Uint64(seg[8:]),
		CmdOff: binary.LittleEndian.Uint32(seg[16:]),
		CmdCap: binary.LittleEndian.Uint32(seg[20:]),
		CplOff: binary.LittleEndian.Uint32(seg[24:]),
		CplCap: binary.LittleEndian.Uint32(seg[28:]),
		Portal: binary.LittleEndian.Uint32(seg[32:]),
	}
	want, err := NewLayout(l.Portal, l.CmdCap, l.CplCap)
	if err != nil || want != l || uint64(len(seg)) < l.Size {
		return Layout{}, fmt.Errorf("%w: inconsistent layout %+v (mapped %d bytes)", ErrSegment, l, len(seg))
	}
	return l, nil
}

// CmdRing returns the command ring's memory inside seg.
func (l *Layout) CmdRing(seg []byte) []byte {
	return seg[l.CmdOff : l.CmdOff+uint32(RingBytes(l.CmdCap, CommandSize))]
}

// CplRing returns the completion ring's memory inside seg.
func (l *Layout) CplRing(seg []byte) []byte {
	return seg[l.CplOff : l.CplOff+uint32(RingBytes(l.CplCap, CompletionSize))]
}
