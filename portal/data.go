package portal

import (
	"context"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
)

// Op is one op to post: a READ, a WRITE, a REKEY or a LOOKUP of a remote region,
// through this portal's engine to the engine at Remote.
//
// READ (two hops, paper §3.1) copies Length bytes of the remote region at
// RemoteOffset into Local at LocalOffset. Local must allow PermLocalWrite
// and the remote region PermRemoteRead. The sink range belongs to the op
// until its completion: the engine decrypts response chunks straight into
// it. After OK it holds exactly the remote bytes; after any other status
// its contents are undefined (as after a failed RDMA READ): some chunks
// may have landed, and a chunk that failed authentication (damaged or
// forged on the network) leaves zeros until its genuine copy arrives.
// Bytes outside the range are never written.
//
// WRITE (four hops, §5.1: the serving engine pulls the data when its own
// solicitation window allows) copies Length bytes of Local at LocalOffset
// into the remote region at RemoteOffset. Local must allow PermLocalRead
// and the remote region PermRemoteWrite. The source range belongs to the
// op until its completion: the engine reads it when the serving engine
// pulls, sealing it straight into the frames. The serving engine commits
// the data only once all of it has arrived and authenticated. OK means it
// was committed; any other status means it was not and never will be,
// except TIMEOUT, which means it may have been (and ENGINE_GONE: see
// StatusEngineGone). Even then the range holds either the old or the new
// bytes (no mix), and after a TIMEOUT nothing changes after the completion
// is written: the initiator times out only after the serving side has
// given up.
//
// REKEY (four hops like a WRITE, §5.2) installs the KeySize bytes of Local
// at LocalOffset as the remote region's new region key K_r. Local must
// allow PermLocalRead; the engine copies the bytes when it takes the
// command from the ring, so keep them unchanged until the completion. The
// remote region must allow PermRemoteRekey. RemoteOffset must be 0 and
// Length 0 or KeySize (a REKEY replaces the key of the whole region). The
// new key travels encrypted under Key, and the serving engine installs it
// only once it authenticated. After OK, ops with a K_d derived from the
// old K_r fail with REMOTE_AUTHENTICATION_FAILURE; whoever chose the new
// key hands out K_d derived from it. Any other status but TIMEOUT means
// the key was not installed and never will be; after a TIMEOUT it may have
// been installed before the completion was written (never after): retry
// with a K_d of either key. REMOTE_REGION, for a region that is live, says
// its key changed (its owner's Rekey, or another REKEY) after the request
// authenticated: a REKEY installs only over the key it was asked under.
//
// LOOKUP (two hops like a READ; RedN's offloaded lookup, done by the
// serving engine) names a bucket, at RemoteOffset of a remote region its
// owner registered with a bucket layout (RegisterLookupRegion) and
// PermRemoteLookup, and a Tag. The serving engine scans that one bucket
// for the first entry whose tag field equals Tag, follows its pointer
// once (into the region, or its linked region) and answers with the entry
// at LocalOffset and, from the next multiple of 64 on, the bytes it points
// to (abi.LookupTargetOffset); the bytes between are zero when the entry
// shares its frame with the target (an entry smaller than a frame's
// data), else left as they were.
// Length is the most the answer may take (the sink's size, 1..MaxOpBytes,
// debited from the window like a READ's): the completion's Length is the
// answer's. Local must allow PermLocalWrite. The sink range belongs to the
// op until its completion. After OK it holds an entry and a target the
// serving engine read while serving the op; the owner may have been
// storing meanwhile, so check what came back as after a READ: the entry's
// tag, its pointer and length against the target, and the target's own
// check (package kv checks a record's stamp and checksum). The answer is
// never a mix of two services of the request. Other statuses:
// REMOTE_NOT_FOUND, no entry has the tag: the sink is untouched, unless
// LookupBucket was set and the bucket fits Length (the sink then holds the
// bucket, and the completion's Length is its size); REMOTE_LOOKUP_BOUNDS,
// the matched entry points outside the region it leads into (corrupt or
// torn; nothing of the target was read, the sink is untouched);
// REMOTE_LOOKUP_TOO_LARGE, entry and target exceed Length (the sink is
// untouched); REMOTE_BOUNDS, the bucket is outside the region;
// REMOTE_PERMISSION, the region has no bucket layout; TIMEOUT and the
// rest as for a READ (the sink's contents undefined). An engine that does
// not know LOOKUP refuses it: BAD_COMMAND at once from the portal's own
// engine, TIMEOUT from a serving engine of an older protocol (it drops the
// request as an unknown message); fall back to READs then.
//
// Key is the derived key K_d the region's owner gave this process for
// Type: the owner's Region.DeriveKey of this portal's Identity().Addr,
// Identity().PID and Type (package keyx fetches it). With any other key
// the op completes with REMOTE_AUTHENTICATION_FAILURE.
type Op struct {
	Type         OpType
	Slot         SlotID     // a slot of this portal with no op in flight (Slot)
	Cookie       uint64     // echoed in the completion
	Remote       netip.Addr // the serving engine's IPv4 address
	RemoteRegion RegionID
	RemoteOffset uint64 // REKEY: 0
	Key          Key    // K_d for Type
	// Local is this portal's region: READ's sink, WRITE's source, or
	// where REKEY's new key is, at LocalOffset.
	Local       *Region
	LocalOffset uint64
	Length      uint32 // 1..MaxOpBytes; REKEY: 0 or KeySize
	// Tag is a LOOKUP's tag to match, and LookupBucket asks for the
	// bucket when nothing matches (abi.FlagLookupBucket); other ops have
	// neither.
	Tag          uint64
	LookupBucket bool
}

// Post stages op in the command ring without publishing it: Flush
// publishes every staged op with one store (doorbell batching), and
// Submit is Post and Flush in one call. It copies op, which the caller may
// reuse at once. The engine answers every op posted with exactly one
// Completion naming op.Slot and echoing op.Cookie.
//
// Post checks what the portal knows, so that common mistakes fail at once
// and nothing is posted: ErrRegion (Local is not this portal's), ErrLength
// (Length out of range), ErrBounds (the local range outside Local), ErrAddr
// (Remote not IPv4), ErrOp (Type unknown, a REKEY with a RemoteOffset, a
// LOOKUP's bucket offset above 2^32-1, a Tag on another op).
// The engine checks the rest (slot, permissions, the remote side) and
// reports a failure as the completion's status. Post returns ErrRingFull
// when the command ring has no free entry (Flush what is staged, Poll, and
// retry: nothing blocks), ErrClosed after Close, and the portal's
// *EngineGoneError once the engine is known gone.
func (p *Portal) Post(op *Op) error {
	length := op.Length
	var flags uint8
	if op.Type != OpLookup && (op.Tag != 0 || op.LookupBucket) {
		return ErrOp
	}
	switch op.Type {
	case OpRead, OpWrite:
	case OpLookup:
		if op.RemoteOffset > abi.MaxLookupRegionBytes {
			return ErrOp
		}
		if op.LookupBucket {
			flags = abi.FlagLookupBucket
		}
	case OpRekey:
		if op.RemoteOffset != 0 {
			return ErrOp
		}
		if length == 0 {
			length = KeySize
		} else if length != KeySize {
			return ErrLength
		}
	default:
		return ErrOp
	}
	local := op.Local
	switch {
	case local == nil || local.p != p || local.mem == nil:
		return ErrRegion
	case length == 0 || length > MaxOpBytes:
		return ErrLength
	case op.LocalOffset > local.size || uint64(length) > local.size-op.LocalOffset:
		return ErrBounds
	case !op.Remote.Is4():
		return ErrAddr
	}
	a := op.Remote.As4()
	cmd := Command{
		Op:           op.Type,
		Flags:        flags,
		Slot:         op.Slot,
		Cookie:       op.Cookie,
		RemoteAddr:   uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]),
		RemoteRegion: op.RemoteRegion,
		RemoteOffset: op.RemoteOffset,
		LocalRegion:  local.id,
		Length:       length,
		LocalOffset:  op.LocalOffset,
		Key:          op.Key,
		Tag:          op.Tag,
	}
	return p.PostCommand(&cmd)
}

// Submit is Post followed by Flush.
func (p *Portal) Submit(op *Op) error {
	if err := p.Post(op); err != nil {
		return err
	}
	p.Flush()
	return nil
}

// PostCommand stages cmd in the command ring as it is, without publishing
// it (see Flush): the raw ABI post, for tools and tests that craft
// commands. It does not validate cmd: the engine does, and answers a bad
// command with a completion carrying a precise status. Applications use
// Post, which fills the command from an Op and checks it first. It
// returns ErrRingFull at once when the ring has no free entry, and the
// portal's *EngineGoneError once the engine is known gone (nothing is
// posted then).
func (p *Portal) PostCommand(cmd *Command) error {
	if p.closed {
		return ErrClosed
	}
	if g := p.gone.Load(); g != nil {
		return g
	}
	b := p.cmd.Reserve()
	if b == nil {
		if p.cmd.Corrupt() {
			return ErrRingCorrupt
		}
		return ErrRingFull
	}
	if !p.record(cmd) {
		return ErrRingFull
	}
	cmd.Encode(b)
	p.cmd.Commit()
	return nil
}

// Flush publishes every staged command with one store of the ring's
// producer index (doorbell batching), and then, when it published
// something, rings the portal's bit in its core's summary doorbell (a
// load, and an atomic OR when the bit is clear: Summary).
func (p *Portal) Flush() {
	if !p.closed && p.cmd.Publish() && p.sum != nil {
		p.sum.Ring(p.portal)
	}
}

// Staged reports commands posted and not yet taken by the engine (as last
// seen; staged-but-unflushed ones included).
func (p *Portal) Staged() uint32 {
	if p.closed {
		return 0
	}
	return p.cmd.Pending()
}

// Poll copies up to len(out) completions into out and returns how many. It
// never blocks, never allocates and makes no system call.
//
// It returns an error only with n == 0: ErrClosed after Close,
// ErrRingCorrupt, or the portal's *EngineGoneError (errors.Is
// ErrEngineGone) once the engine is gone and every completion due has
// been returned. When the engine goes away (the portal notices as soon
// as its control connection closes, see Gone), Poll first returns the
// completions the engine wrote before, then one completion with
// StatusEngineGone for every other op posted (Post, Submit, PostCommand)
// and not yet completed, so that each op posted gets exactly one
// completion, and then the error, on every call.
func (p *Portal) Poll(out []Completion) (int, error) { return p.poll(out, true) }

// poll is Poll; track says whether completions settle Post's records
// (an Executor keeps its own).
func (p *Portal) poll(out []abi.Completion, track bool) (int, error) {
	if p.closed {
		return 0, ErrClosed
	}
	if p.dead == nil {
		// One atomic load per call, not per op. The engine wrote its
		// last completion before its control connection closed (a
		// shutting-down engine reclaims the portal first; a dead one
		// writes nothing), so from here the ring is drained once and
		// then left alone.
		p.dead = p.gone.Load()
	}
	n := 0
	if !p.drained {
		for n < len(out) {
			b := p.cpl.Peek()
			if b == nil {
				break
			}
			out[n].Decode(b)
			p.cpl.Advance()
			if track {
				p.settle(&out[n])
			}
			n++
		}
		if n > 0 {
			p.cpl.Release() // one store frees the batch for the engine
		}
		if p.dead == nil || n == len(out) {
			if n == 0 && p.cpl.Corrupt() {
				return 0, ErrRingCorrupt
			}
			return n, nil
		}
		p.drained = true
	}
	n += p.synthesize(out[n:])
	if n > 0 {
		return n, nil
	}
	return 0, p.dead
}

// Corrupt reports whether the engine wrote an impossible ring index (the
// portal is then unusable).
func (p *Portal) Corrupt() bool {
	return !p.closed && (p.cmd.Corrupt() || p.cpl.Corrupt())
}

// Wait returns at least one completion, or an error: ctx's, or Poll's
// (ErrClosed, ErrRingCorrupt, the *EngineGoneError once every completion
// due has been returned). It spins first (lowest latency); then, with the
// engine's completion doorbell, it arms the doorbell, checks the ring once
// more (a completion published while arming is never missed) and sleeps
// in poll(2) until the engine rings, or the portal does on noticing that
// the engine is gone; without one it sleeps with exponential backoff from
// waitSleepMin to waitSleepMax between polls. It never allocates.
func (p *Portal) Wait(ctx context.Context, out []Completion) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	for range p.spins {
		if n, err := p.Poll(out); n > 0 || err != nil {
			return n, err
		}
	}
	sleep := waitSleepMin
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if p.arm == nil {
			time.Sleep(sleep)
			sleep = min(2*sleep, waitSleepMax)
		} else {
			p.arm.Store(1) // pairs with the engine's CompareAndSwap after it publishes
			if n, err := p.Poll(out); n > 0 || err != nil {
				p.arm.Store(0)
				return n, err
			}
			ms := waitBellMaxMs // wake now and then to see ctx
			if dl, ok := ctx.Deadline(); ok {
				ms = max(0, min(ms, int(time.Until(dl)/time.Millisecond)+1))
			}
			p.pfd[0].Revents = 0
			if n, _ := unix.Poll(p.pfd[:], ms); n > 0 && p.pfd[0].Revents&unix.POLLIN != 0 {
				unix.Read(p.bellFD, p.evbuf[:]) // reset the eventfd counter
			}
		}
		if n, err := p.Poll(out); n > 0 || err != nil {
			return n, err
		}
	}
}

const (
	waitBellMaxMs = 10
	waitSpins     = 2000
	waitSleepMin  = time.Microsecond
	waitSleepMax  = time.Millisecond
)
