package abi

import (
	"encoding/binary"
	"errors"
)

// Op is the type of an RMA operation.
type Op uint8

const (
	OpRead  Op = 1 // two hops: request, responses (§3.1)
	OpWrite Op = 2 // four hops, request-to-read (§5.1)
	OpRekey Op = 3 // §5.2: install a region key; four hops like a WRITE
	// OpLookup: two hops like a READ; the serving engine scans one bucket
	// of a region with a bucket layout for an entry with the command's
	// Tag and answers with the entry and the bytes it points to
	// (lookup.go).
	OpLookup Op = 4
)

func (o Op) String() string {
	switch o {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	case OpRekey:
		return "REKEY"
	case OpLookup:
		return "LOOKUP"
	}
	return "OP_" + itoa(int(o))
}

// MaxOpBytes is the largest single op (paper §1: each op moves at most 4 KB).
const MaxOpBytes = 4096

// RegionID names a registered region: the low 16 bits index the region
// table, the high 16 bits are the entry's generation, so a stale id never
// reaches a region registered later in the same entry. 0 is never valid.
type RegionID uint32

// MakeRegionID packs an index and a generation.
func MakeRegionID(index, gen uint16) RegionID { return RegionID(uint32(gen)<<16 | uint32(index)) }

// Index is the region table index.
func (r RegionID) Index() uint16 { return uint16(r) }

// Gen is the generation.
func (r RegionID) Gen() uint16 { return uint16(r >> 16) }

// SlotID names a command slot. It is global to the engine: slot partitions
// per engine core are contiguous, so the owning core is SlotID / slotsPerCore.
type SlotID uint32

// CommandSize is one cache line: the unit the app publishes per op.
const CommandSize = 64

// Command is one RMA op as the application posts it. Wire layout
// (little-endian, 64 bytes):
//
//	0  Op u8 | Flags u8 | reserved u16 | Slot u32
//	8  Cookie u64                       (opaque, echoed in the completion)
//	16 RemoteAddr u32 (IPv4, network order as a big-endian integer) | RemoteRegion u32
//	24 RemoteOffset u64
//	32 LocalRegion u32 | Length u32
//	40 LocalOffset u64
//	48 Key [16]byte                     (derived key K_d; used from the security issue on)
//
// An OpLookup command carries a Tag instead of a 64-bit remote offset,
// and its Length (at most MaxOpBytes) in the bytes that are reserved for
// the other ops:
//
//	0  Op u8 | Flags u8 | Length u16 | Slot u32
//	8  Cookie u64
//	16 RemoteAddr u32 | RemoteRegion u32   (the region the bucket is in)
//	24 Tag u64                             (the tag to match)
//	32 LocalRegion u32 | RemoteOffset u32  (the bucket's offset)
//	40 LocalOffset u64
//	48 Key [16]byte
//
// Encode saturates a lookup's Length above 0xffff (it is TOO_LARGE
// either way) and its RemoteOffset above 0xffffffff: a region with a
// bucket layout holds at most MaxLookupRegionBytes, so that offset is
// outside every one (REMOTE_BOUNDS).
type Command struct {
	Op           Op
	Flags        uint8
	Slot         SlotID
	Cookie       uint64
	RemoteAddr   uint32
	RemoteRegion RegionID
	RemoteOffset uint64
	LocalRegion  RegionID
	Length       uint32
	LocalOffset  uint64
	Key          [16]byte
	// Tag is an OpLookup's tag to match (the other ops have none).
	Tag uint64
}

// FlagLookupBucket in an OpLookup command's Flags: when no entry
// matches, the answer is the bucket (status REMOTE_NOT_FOUND, the sink
// holding the bucket's bytes) instead of the bare status.
const FlagLookupBucket uint8 = 1 << 0

// ErrShortCommand: fewer than CommandSize bytes.
var ErrShortCommand = errors.New("abi: command buffer shorter than 64 bytes")

// ErrReservedBits: reserved command bytes are not zero.
var ErrReservedBits = errors.New("abi: command has non-zero reserved bytes")

// Encode writes c into b[:CommandSize].
func (c *Command) Encode(b []byte) {
	_ = b[CommandSize-1]
	b[0] = byte(c.Op)
	b[1] = c.Flags
	binary.LittleEndian.PutUint32(b[4:], uint32(c.Slot))
	binary.LittleEndian.PutUint64(b[8:], c.Cookie)
	binary.LittleEndian.PutUint32(b[16:], c.RemoteAddr)
	binary.LittleEndian.PutUint32(b[20:], uint32(c.RemoteRegion))
	binary.LittleEndian.PutUint32(b[32:], uint32(c.LocalRegion))
	binary.LittleEndian.PutUint64(b[40:], c.LocalOffset)
	*(*[16]byte)(b[48:64]) = c.Key
	if c.Op == OpLookup { // its layout (see Command): length, tag, bucket offset
		binary.LittleEndian.PutUint16(b[2:], uint16(min(c.Length, 0xffff)))
		binary.LittleEndian.PutUint64(b[24:], c.Tag)
		binary.LittleEndian.PutUint32(b[36:], uint32(min(c.RemoteOffset, 0xffffffff)))
		return
	}
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint64(b[24:], c.RemoteOffset)
	binary.LittleEndian.PutUint32(b[36:], c.Length)
}

// Decode reads a command from b. It checks only the layout (size, reserved
// bytes); the engine validates meaning (op, slot, regions, bounds) itself.
// On error c is zeroed.
func (c *Command) Decode(b []byte) error {
	if len(b) < CommandSize {
		*c = Command{}
		return ErrShortCommand
	}
	c.Op = Op(b[0])
	if c.Op == OpLookup { // its layout (see Command): length, tag, bucket offset
		c.Length = uint32(binary.LittleEndian.Uint16(b[2:]))
		c.Tag = binary.LittleEndian.Uint64(b[24:])
		c.RemoteOffset = uint64(binary.LittleEndian.Uint32(b[36:]))
	} else {
		if b[2] != 0 || b[3] != 0 {
			*c = Command{}
			return ErrReservedBits
		}
		c.Tag = 0
		c.RemoteOffset = binary.LittleEndian.Uint64(b[24:])
		c.Length = binary.LittleEndian.Uint32(b[36:])
	}
	c.Flags = b[1]
	c.Slot = SlotID(binary.LittleEndian.Uint32(b[4:]))
	c.Cookie = binary.LittleEndian.Uint64(b[8:])
	c.RemoteAddr = binary.LittleEndian.Uint32(b[16:])
	c.RemoteRegion = RegionID(binary.LittleEndian.Uint32(b[20:]))
	c.LocalRegion = RegionID(binary.LittleEndian.Uint32(b[32:]))
	c.LocalOffset = binary.LittleEndian.Uint64(b[40:])
	c.Key = [16]byte(b[48:64])
	return nil
}

// CompletionSize is the size of one completion ring entry.
const CompletionSize = 32

// Completion reports the outcome of one op (paper §4.5). Layout
// (little-endian, 32 bytes):
//
//	0  Cookie u64
//	8  Slot u32
//	12 Status u8 | Op u8 | reserved u16
//	16 IssueDelayNs u32   posted (seen by the engine) -> entered service
//	20 TotalDelayNs u32   posted -> completed
//	24 Length u32         bytes transferred (the op length when OK)
//	28 reserved u32
type Completion struct {
	Cookie       uint64
	Slot         SlotID
	Status       Status
	Op           Op
	IssueDelayNs uint32
	TotalDelayNs uint32
	Length       uint32
}

// Encode writes c into b[:CompletionSize].
func (c *Completion) Encode(b []byte) {
	_ = b[CompletionSize-1]
	binary.LittleEndian.PutUint64(b[0:], c.Cookie)
	binary.LittleEndian.PutUint32(b[8:], uint32(c.Slot))
	b[12] = byte(c.Status)
	b[13] = byte(c.Op)
	b[14], b[15] = 0, 0
	binary.LittleEndian.PutUint32(b[16:], c.IssueDelayNs)
	binary.LittleEndian.PutUint32(b[20:], c.TotalDelayNs)
	binary.LittleEndian.PutUint32(b[24:], c.Length)
	binary.LittleEndian.PutUint32(b[28:], 0)
}

// Decode reads a completion from b (len(b) >= CompletionSize).
func (c *Completion) Decode(b []byte) {
	_ = b[CompletionSize-1]
	c.Cookie = binary.LittleEndian.Uint64(b[0:])
	c.Slot = SlotID(binary.LittleEndian.Uint32(b[8:]))
	c.Status = Status(b[12])
	c.Op = Op(b[13])
	c.IssueDelayNs = binary.LittleEndian.Uint32(b[16:])
	c.TotalDelayNs = binary.LittleEndian.Uint32(b[20:])
	c.Length = binary.LittleEndian.Uint32(b[24:])
}
