package sim

import (
	"fmt"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// Ops: what each op the random applications post tests, the simulator's
// record of it, and the heap of completion deadlines.

// opKind is what an op tests. Valid ops read remote data; the others are
// commands with exactly one thing wrong and a precise expected status.
type opKind uint8

const (
	kValid        opKind = iota
	kLocalBounds         // local offset+length outside the sink region -> LOCAL_BOUNDS
	kLocalRegion         // local region of another portal, stale or unknown -> LOCAL_REGION
	kLocalPerm           // local region without local-write permission -> LOCAL_PERMISSION
	kTooLarge            // length above 4 KB -> TOO_LARGE
	kZeroLen             // length 0 -> BAD_COMMAND
	kBadOp               // unknown op code -> BAD_COMMAND
	kSlotNotOurs         // a slot of the core that this portal does not own -> BAD_SLOT
	kSlotRange           // a slot outside the core's partition -> BAD_SLOT
	kSlotBusy            // one of our slots, busy with another op -> BAD_SLOT
	kUnreachable         // remote address nobody has -> UNREACHABLE
	kRemoteRegion        // stale or unknown remote region, with the K_d of another (the server has no K_r of it) -> REMOTE_AUTHENTICATION_FAILURE
	kRemoteBounds        // remote offset+length outside the region -> REMOTE_BOUNDS
	kRemotePerm          // remote region without remote-read permission -> REMOTE_PERMISSION
	kKeyRandom           // a random K_d -> REMOTE_AUTHENTICATION_FAILURE
	kKeyInitiator        // the K_d of another initiator (PID or address) -> REMOTE_AUTHENTICATION_FAILURE
	kKeyOp               // the K_d of another op type -> REMOTE_AUTHENTICATION_FAILURE
	kStaleKey            // a valid read with the K_d of a K_r the owner replaced (Rekey) -> REMOTE_AUTHENTICATION_FAILURE
	numKinds
)

var kindNames = [...]string{"valid", "local-bounds", "local-region", "local-perm", "too-large", "zero-length",
	"bad-op", "slot-not-ours", "slot-range", "slot-busy", "unreachable", "remote-region", "remote-bounds", "remote-perm",
	"key-random", "key-other-initiator", "key-other-op", "stale-key"}

var kindStatus = [...]abi.Status{abi.StatusOK, abi.StatusLocalBounds, abi.StatusLocalRegion, abi.StatusLocalPermission,
	abi.StatusTooLarge, abi.StatusBadCommand, abi.StatusBadCommand, abi.StatusBadSlot, abi.StatusBadSlot, abi.StatusBadSlot,
	abi.StatusUnreachable, abi.StatusRemoteAuthFailure, abi.StatusRemoteBounds, abi.StatusRemotePermission,
	abi.StatusRemoteAuthFailure, abi.StatusRemoteAuthFailure, abi.StatusRemoteAuthFailure, abi.StatusRemoteAuthFailure}

// KindName names what the ops counted in Result.ByKind[i] test.
func KindName(i int) string {
	if i < len(kindNames) {
		return kindNames[i]
	}
	return ""
}

// KindStatus is the status an op of kind i must get on a clean network.
func KindStatus(i int) abi.Status { return kindStatus[i] }

// NumKinds is the number of op kinds.
const NumKinds = int(numKinds)

// usesSlot: the op occupies one of the portal's idle slots.
func (k opKind) usesSlot() bool { return k != kSlotNotOurs && k != kSlotRange && k != kSlotBusy }

// local: decided by the initiating core without the network.
func (k opKind) local() bool { return k != kValid && k < kUnreachable }

// wrongKey: the command's K_d is not the one the server derives.
func (k opKind) wrongKey() bool { return k >= kKeyRandom && k <= kKeyOp }

// remote: the command reaches a server (a request is sent for it).
func (k opKind) remote() bool { return k == kValid || k >= kRemoteRegion }

type op struct {
	cookie   uint64
	kind     opKind
	p        *portal
	slotIdx  int // index in p.slots; -1: not one of the portal's slots
	cmd      abi.Command
	postedAt int64
	deadline int64
	target   *region // remote region named (valid and remote-* kinds)
	sink     *region // the portal's sink when posted (it may be replaced)
	local    *region // the region LocalRegion names (nil: none of ours)
	extraIdx int     // index in p.extra (ops without an own slot)
	// Key: the command carries a K_d derived from version keyVer of
	// keyRg's K_r (the newest this node knew when posting; wrong-key kinds
	// alter it). stale: the owner had replaced that K_r already, so the
	// request cannot authenticate. reqCorrupt: the fabric damaged a copy
	// of its request (the server may answer REMOTE_AUTHENTICATION_FAILURE).
	keyRg      *region
	keyVer     int
	stale      bool
	reqCorrupt bool
	// rxAuth0: the node's Stats.RxAuthFailed when the op was posted.
	rxAuth0 uint64

	// write: a WRITE (else a READ). Its data has pattern id stamp: byte j
	// of the target becomes patByte(stamp, j). An op with its own slot
	// stages it in its slot's area of wsrc, at [fillLo, fillHi) of the
	// area, for target offset fillOff.
	write bool
	stamp uint64
	// rekey: a remote REKEY (write is set too: it takes a WRITE's four
	// hops). newKr is the K_r it asks the server to install, staged in
	// its slot's area of wsrc at [fillLo, fillHi).
	rekey          bool
	newKr          aesni.Key
	wsrc           *region
	fillLo, fillHi int
	fillOff        uint64
	// What the simulator saw happen to a WRITE: its request (①) and the
	// request's IV; its commit (④ sent); the pull (②) its core accepted;
	// its completion (done, when, status), or orphan (its portal closed
	// first: no completion, and it may still commit).
	reqIV       [12]byte
	committed   bool
	pullFirst   int64      // the pull its core accepted arrived then (0: none)
	pullTimeout int64      // the timeout that pull carried
	pullIVs     [][12]byte // (Net.ForgeWrites only)
	done        bool
	doneAt      int64
	status      abi.Status
	orphan      bool
	// keyOp: the op type a key-other-op command's K_d is derived for
	// (0: drawn at random; tests set it).
	keyOp uint8
	// A valid READ of a remote-writable region: the model's bytes of its
	// range when posted, and the region's commit count then.
	snap []byte
	c0   int
	// lookup: a LOOKUP of bucket lkBucket of the index lkModel models.
	lookup   bool
	lkModel  *lookupModel
	lkBucket int
}

func (o *op) String() string {
	key := ""
	if o.keyRg != nil {
		key = fmt.Sprintf(" key=%#x@%d.v%d", uint32(o.keyRg.id), o.keyRg.node, o.keyVer)
		if v := len(o.keyRg.keys) - 1; v != o.keyVer {
			key += fmt.Sprintf("(current v%d)", v)
		}
	}
	if o.reqCorrupt {
		key += " req-corrupted"
	}
	typ := "READ"
	if o.lookup {
		typ = "LOOKUP"
	} else if o.rekey {
		typ = "REKEY"
	} else if o.write {
		typ = "WRITE"
	}
	return fmt.Sprintf("op{%s %s cookie=%#x node=%d portal=%d slot=%d remote=%08x region=%#x off=%d len=%d local=%#x loff=%d posted=%d%s}",
		typ, kindNames[o.kind], o.cookie, o.p.a.n.id, o.p.id, o.cmd.Slot, o.cmd.RemoteAddr, uint32(o.cmd.RemoteRegion),
		o.cmd.RemoteOffset, o.cmd.Length, uint32(o.cmd.LocalRegion), o.cmd.LocalOffset, o.postedAt-o.p.a.s.t0, key)
}

// noAuth: the op's request can never authenticate at its server (wrong
// key, a K_r replaced before it was posted, a region the server does not
// have): no answer but REMOTE_AUTHENTICATION_FAILURE can come back (no
// data, no NACK, no remote error).
func (o *op) noAuth() bool { return o.kind.wrongKey() || o.kind == kRemoteRegion || o.stale }

// want is the status op o gets on a clean network.
func (o *op) want() abi.Status {
	if o.stale && o.kind.remote() {
		return abi.StatusRemoteAuthFailure
	}
	return kindStatus[o.kind]
}

type deadline struct {
	t      int64
	cookie uint64
}

type deadlineHeap []deadline

func (h *deadlineHeap) push(d deadline) {
	*h = append(*h, d)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].t <= a[i].t {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *deadlineHeap) pop() {
	a := *h
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && a[r].t < a[l].t {
			m = r
		}
		if a[i].t <= a[m].t {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
}
