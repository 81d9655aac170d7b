package portal

import (
	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
)

// The types and constants an application needs, so that it imports only
// portal. Each is an alias of the shared-memory ABI's (package abi) or the
// cipher's (package aesni): the same type under another name, so code that
// imports those packages too mixes them freely.
type (
	// OpType is the type of an op: OpRead, OpWrite, OpRekey or OpLookup.
	OpType = abi.Op
	// SlotID names a command slot (AllocSlots, Slot).
	SlotID = abi.SlotID
	// RegionID names a registered region, local or remote (Region.ID).
	RegionID = abi.RegionID
	// Perm is a set of region permissions (RegisterRegion).
	Perm = abi.Perm
	// Status is the outcome of an op, carried by its Completion.
	Status = abi.Status
	// Completion reports the outcome of one op (Poll, Wait).
	Completion = abi.Completion
	// Class is a portal's class of service (Options.Class).
	Class = abi.Class
	// Command is one op as it sits in the command ring (PostCommand).
	Command = abi.Command
	// Key is a 128-bit key: a region key K_r or a derived key K_d.
	Key = aesni.Key
	// BucketLayout is how a region's buckets are laid out, for LOOKUPs
	// (RegisterLookupRegion).
	BucketLayout = abi.BucketLayout
)

// Op types.
const (
	OpRead  = abi.OpRead  // two hops: request, responses (paper §3.1)
	OpWrite = abi.OpWrite // four hops: the serving engine pulls the data (§5.1)
	OpRekey = abi.OpRekey // install a region key; four hops like a WRITE (§5.2)
	// OpLookup: two hops like a READ; the serving engine scans one bucket
	// for a tag and answers with the entry and what it points to (RedN).
	OpLookup = abi.OpLookup
)

// Region permissions: what the owner's own ops may do with a region and
// what remote ops may do to it.
const (
	PermLocalRead   = abi.PermLocalRead   // source of the owner's WRITE and REKEY ops
	PermLocalWrite  = abi.PermLocalWrite  // sink of the owner's READ ops
	PermRemoteRead  = abi.PermRemoteRead  // remote READ ops may read it
	PermRemoteWrite = abi.PermRemoteWrite // remote WRITE ops may write it
	PermRemoteRekey = abi.PermRemoteRekey // remote REKEY ops may change its key
	PermAll         = abi.PermAll         // all of the above
	// PermRemoteLookup: remote LOOKUP ops may scan its buckets; only a
	// region with a bucket layout has it (RegisterLookupRegion), so it is
	// not in PermAll.
	PermRemoteLookup = abi.PermRemoteLookup
	PermAny          = abi.PermAny // every bit a region may hold
)

// Classes of service (paper §4.3).
const (
	ClassLow  = abi.ClassLow  // best effort (the default)
	ClassHigh = abi.ClassHigh // served first, without starving ClassLow
)

// Completion statuses. The first five are the paper's Table 3; the others
// name a precise local or remote access error. abi's documentation of each
// says when it is reported.
const (
	StatusOK                = abi.StatusOK
	StatusRemoteAuthFailure = abi.StatusRemoteAuthFailure
	StatusNack              = abi.StatusNack
	StatusTimeout           = abi.StatusTimeout
	StatusDispatchTimeout   = abi.StatusDispatchTimeout

	StatusBadCommand      = abi.StatusBadCommand
	StatusTooLarge        = abi.StatusTooLarge
	StatusBadSlot         = abi.StatusBadSlot
	StatusLocalRegion     = abi.StatusLocalRegion
	StatusLocalBounds     = abi.StatusLocalBounds
	StatusLocalPermission = abi.StatusLocalPermission
	StatusUnreachable     = abi.StatusUnreachable
	StatusAborted         = abi.StatusAborted
	StatusEngineGone      = abi.StatusEngineGone

	StatusRemoteRegion     = abi.StatusRemoteRegion
	StatusRemoteBounds     = abi.StatusRemoteBounds
	StatusRemotePermission = abi.StatusRemotePermission

	StatusRemoteNotFound       = abi.StatusRemoteNotFound
	StatusRemoteLookupBounds   = abi.StatusRemoteLookupBounds
	StatusRemoteLookupTooLarge = abi.StatusRemoteLookupTooLarge
)

const (
	// MaxOpBytes is the largest op: a longer transfer is split into ops
	// (Executor).
	MaxOpBytes = abi.MaxOpBytes
	// KeySize is the size of a Key in bytes, and the length of a REKEY.
	KeySize = aesni.KeySize
	// DefaultSocket is the engine's control socket unless its
	// configuration names another (the first argument of Dial).
	DefaultSocket = ctlmsg.DefaultSocket
)
