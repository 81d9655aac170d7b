package abi

// Perm is a set of region permissions: what the owner's own ops may do
// with a region and what remote ops may do to it. The bits travel
// unchanged from the application (portal) through the control protocol
// (ctlmsg) into the engine's region table.
type Perm uint8

const (
	PermLocalRead   Perm = 1 << 0 // source of the owner's WRITE and REKEY ops
	PermLocalWrite  Perm = 1 << 1 // sink of the owner's READ ops
	PermRemoteRead  Perm = 1 << 2 // remote READ ops may read it
	PermRemoteWrite Perm = 1 << 3 // remote WRITE ops may write it
	PermRemoteRekey Perm = 1 << 4 // remote REKEY ops may change its key
	// PermRemoteLookup: remote LOOKUP ops may scan its buckets and
	// follow their pointers (into it, or into its linked region). Only a
	// region registered with a bucket layout may have it; so PermAll,
	// which any region may have, leaves it out.
	PermRemoteLookup Perm = 1 << 5
	PermAll               = PermLocalRead | PermLocalWrite | PermRemoteRead | PermRemoteWrite | PermRemoteRekey
	// PermAny is every bit a region may hold.
	PermAny = PermAll | PermRemoteLookup
)

// Class is a portal's class of service (paper §4.3: two FIFO arbiters).
// It is fixed when the portal opens; the engine's policy decides which
// classes an application may use.
type Class uint8

const (
	ClassLow  Class = 0 // best effort (default)
	ClassHigh Class = 1 // served first, without starving ClassLow
	NumClass        = 2
)

// String is the class's name in the control protocol and in configs:
// "low" or "high".
func (c Class) String() string {
	switch c {
	case ClassLow:
		return "low"
	case ClassHigh:
		return "high"
	}
	return "class(" + itoa(int(c)) + ")"
}

// ParseClass maps a class name (String) to its Class; "" is ClassLow.
func ParseClass(s string) (Class, bool) {
	switch s {
	case "", "low":
		return ClassLow, true
	case "high":
		return ClassHigh, true
	}
	return 0, false
}
