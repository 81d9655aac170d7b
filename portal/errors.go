package portal

import (
	"errors"

	"github.com/onerma/onerma/ctlmsg"
)

// Data-path errors: preallocated, returned without allocating.
var (
	// ErrRingFull: the command ring has no free entry. The engine frees
	// entries as it takes commands; Flush what is staged and retry.
	ErrRingFull = errors.New("portal: command ring full")
	// ErrRingCorrupt: the engine's side of a ring holds an impossible
	// index; the portal is unusable.
	ErrRingCorrupt = errors.New("portal: ring index corrupt")
	// ErrClosed: the portal was closed.
	ErrClosed = errors.New("portal: closed")
	// ErrRegion: the local region is nil, deregistered, or not this
	// portal's.
	ErrRegion = errors.New("portal: local region not registered with this portal")
	// ErrLength: the op length is 0 or above MaxOpBytes (a REKEY's:
	// neither 0 nor KeySize).
	ErrLength = errors.New("portal: op length must be 1..4096 bytes (REKEY: 16)")
	// ErrBounds: local offset+length lies outside the local region.
	ErrBounds = errors.New("portal: local offset+length outside the region")
	// ErrAddr: the remote address is not IPv4.
	ErrAddr = errors.New("portal: remote address is not IPv4")
	// ErrOp: the op's Type is not OpRead, OpWrite, OpRekey or OpLookup, a
	// REKEY names a remote offset (it replaces the whole region's key), a
	// LOOKUP's bucket offset is above 2^32-1 (no region with a bucket
	// layout is larger), or an op other than a LOOKUP has a Tag or
	// LookupBucket.
	ErrOp = errors.New("portal: op type must be READ, WRITE, REKEY or LOOKUP (REKEY: at remote offset 0; LOOKUP: a bucket offset below 2^32; a tag only for a LOOKUP)")
	// ErrSlot: Release of a slot this portal does not own, or that is
	// already free.
	ErrSlot = errors.New("portal: slot not owned or already free")
)

// Control-path errors, matched with errors.Is against an *Error from the
// engine.
var (
	ErrSlotCap = errors.New("portal: over the application's slot cap")
	ErrClass   = errors.New("portal: class of service not granted to this application")
	ErrNoSlots = errors.New("portal: the engine has no free slots")
	ErrLimit   = errors.New("portal: over an engine limit")
	// ErrQuota: over one of the tenant's quotas; Error.Quota names it
	// (ctlmsg.QuotaMemoryBytes, QuotaPortals, QuotaSlots, ...).
	ErrQuota       = errors.New("portal: over a quota of this tenant")
	ErrNoRegion    = errors.New("portal: region not registered by this portal")
	ErrResource    = errors.New("portal: the engine is out of resources")
	ErrUnavailable = errors.New("portal: the engine is shutting down")
	ErrBadRequest  = errors.New("portal: the engine rejected the request")
)

// Error is a failure reported by the engine. Msg is the engine's precise
// description; errors.Is matches it against the sentinels above.
type Error struct {
	Op    ctlmsg.Op
	Code  ctlmsg.Code
	Msg   string
	Quota string // ErrQuota: the quota's name (ctlmsg.Quota*)
}

func (e *Error) Error() string { return "portal: engine: " + e.Msg }

// Is maps the engine's code to a sentinel.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case ctlmsg.CodeSlotCap:
		return target == ErrSlotCap
	case ctlmsg.CodeClass:
		return target == ErrClass
	case ctlmsg.CodeNoSlots:
		return target == ErrNoSlots
	case ctlmsg.CodeLimit:
		return target == ErrLimit
	case ctlmsg.CodeQuota:
		return target == ErrQuota
	case ctlmsg.CodeNoRegion:
		return target == ErrNoRegion
	case ctlmsg.CodeResource:
		return target == ErrResource
	case ctlmsg.CodeUnavail:
		return target == ErrUnavailable
	case ctlmsg.CodeBadRequest, ctlmsg.CodeTooLarge, ctlmsg.CodeFDs, ctlmsg.CodeState:
		return target == ErrBadRequest
	}
	return false
}
