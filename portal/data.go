package portal

import (
	"context"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
)

// Post stages cmd in the command ring without publishing it (see Flush).
// It does not validate cmd: the engine does, and answers a bad command with
// a completion carrying a precise status. It returns ErrRingFull at once
// when the ring has no free entry, and the portal's *EngineGoneError once
// the engine is known gone (nothing is posted then).
func (p *Portal) Post(cmd *abi.Command) error {
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
// producer index (doorbell batching).
func (p *Portal) Flush() {
	if !p.closed {
		p.cmd.Publish()
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

// PostRead stages a READ of length bytes (1..abi.MaxOpBytes) from
// remoteRegion at remoteOffset on the engine at remoteAddr into local at
// localOffset. key is the derived key K_d the region's owner gave this
// process for READ (the owner's Region.DeriveKey of this portal's
// Identity().Addr, Identity().PID and abi.OpRead); with any other key the
// op completes with REMOTE_AUTHENTICATION_FAILURE. The completion names
// slot and echoes cookie. local must be this portal's region with
// abi.PermLocalWrite (the engine checks the permission; this checks
// ownership, length and bounds so the common mistakes fail at once). Call
// Flush to publish.
//
// The sink range belongs to the op until its completion: the engine
// decrypts response chunks straight into it. After OK it holds exactly the
// remote bytes; after any other status its contents are undefined (as
// after a failed RDMA READ): some chunks may have landed, and a chunk that
// failed authentication (damaged or forged on the network) leaves zeros
// until its genuine copy arrives. Bytes outside the range are never
// written.
func (p *Portal) PostRead(slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID, remoteOffset uint64,
	key aesni.Key, local *Region, localOffset uint64, length uint32, cookie uint64) error {
	return p.postOp(abi.OpRead, slot, remoteAddr, remoteRegion, remoteOffset, &key, local, localOffset, length, cookie)
}

// SubmitRead is PostRead followed by Flush.
func (p *Portal) SubmitRead(slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID, remoteOffset uint64,
	key aesni.Key, local *Region, localOffset uint64, length uint32, cookie uint64) error {
	if err := p.PostRead(slot, remoteAddr, remoteRegion, remoteOffset, key, local, localOffset, length, cookie); err != nil {
		return err
	}
	p.Flush()
	return nil
}

// PostWrite stages a WRITE of length bytes (1..abi.MaxOpBytes) from local
// at localOffset into remoteRegion at remoteOffset on the engine at
// remoteAddr (paper §5.1: four hops, the serving engine pulls the data
// when its own solicitation window allows). key is the K_d the region's
// owner derived for this process and abi.OpWrite; the remote region must
// allow abi.PermRemoteWrite and local must allow abi.PermLocalRead. The source
// range belongs to the op until its completion: the engine reads it when
// the serving engine pulls, sealing it straight into the frames.
//
// The serving engine commits the data to the region only when all of it
// has arrived and authenticated. OK means it was committed. Any other
// status means it was not and never will be, except TIMEOUT, which means
// the write may have been committed; even then the region holds either the
// old or the new bytes of the range (no mix), and nothing changes after
// the completion is written: the initiator times out only after the
// serving side has given up.
func (p *Portal) PostWrite(slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID, remoteOffset uint64,
	key aesni.Key, local *Region, localOffset uint64, length uint32, cookie uint64) error {
	return p.postOp(abi.OpWrite, slot, remoteAddr, remoteRegion, remoteOffset, &key, local, localOffset, length, cookie)
}

// SubmitWrite is PostWrite followed by Flush.
func (p *Portal) SubmitWrite(slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID, remoteOffset uint64,
	key aesni.Key, local *Region, localOffset uint64, length uint32, cookie uint64) error {
	if err := p.PostWrite(slot, remoteAddr, remoteRegion, remoteOffset, key, local, localOffset, length, cookie); err != nil {
		return err
	}
	p.Flush()
	return nil
}

// PostRekey stages a REKEY (paper §5.2): it asks the engine at
// remoteAddr to install, as remoteRegion's new region key K_r, the 16
// bytes at localOffset of local (this portal's region with
// abi.PermLocalRead; the engine copies them when it takes the command from
// the ring: keep them unchanged until the completion). key is the K_d
// the region's owner derived for this process and abi.OpRekey; the region
// must allow abi.PermRemoteRekey. The new key travels encrypted under that
// K_d. Like a WRITE it takes four hops (the serving engine pulls the key
// and installs it only once it authenticated). When the completion is OK,
// reads with K_d derived from the old key fail with
// REMOTE_AUTHENTICATION_FAILURE; whoever chose the new key hands out K_d
// derived from it. Any other status but TIMEOUT means the key was not
// installed and never will be; a TIMEOUT means it may have been installed
// before the completion was written (never after): retry with a K_d of
// either key.
func (p *Portal) PostRekey(slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID,
	key aesni.Key, local *Region, localOffset uint64, cookie uint64) error {
	return p.postOp(abi.OpRekey, slot, remoteAddr, remoteRegion, 0, &key, local, localOffset, aesni.KeySize, cookie)
}

// SubmitRekey is PostRekey followed by Flush.
func (p *Portal) SubmitRekey(slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID,
	key aesni.Key, local *Region, localOffset uint64, cookie uint64) error {
	if err := p.PostRekey(slot, remoteAddr, remoteRegion, key, local, localOffset, cookie); err != nil {
		return err
	}
	p.Flush()
	return nil
}

func (p *Portal) postOp(op abi.Op, slot abi.SlotID, remoteAddr netip.Addr, remoteRegion abi.RegionID, remoteOffset uint64,
	key *aesni.Key, local *Region, localOffset uint64, length uint32, cookie uint64) error {
	switch {
	case local == nil || local.p != p || local.mem == nil:
		return ErrRegion
	case length == 0 || length > abi.MaxOpBytes:
		return ErrLength
	case localOffset > local.size || uint64(length) > local.size-localOffset:
		return ErrBounds
	case !remoteAddr.Is4():
		return ErrAddr
	}
	a := remoteAddr.As4()
	cmd := abi.Command{
		Op:           op,
		Slot:         slot,
		Cookie:       cookie,
		RemoteAddr:   uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]),
		RemoteRegion: remoteRegion,
		RemoteOffset: remoteOffset,
		LocalRegion:  local.id,
		Length:       length,
		LocalOffset:  localOffset,
		Key:          *key,
	}
	return p.Post(&cmd)
}

// Poll copies up to len(out) completions into out and returns how many. It
// never blocks, never allocates and makes no system call.
//
// It returns an error only with n == 0: ErrClosed after Close,
// ErrRingCorrupt, or the portal's *EngineGoneError (errors.Is
// ErrEngineGone) once the engine is gone and every completion due has
// been returned. When the engine goes away (the portal notices within
// microseconds of its control connection closing, see Gone), Poll first
// returns the completions the engine wrote before, then one completion
// with abi.StatusEngineGone for every other op posted (Post, Post*,
// Submit*) and not yet completed, so that each op posted gets exactly one
// completion, and then the error, on every call.
func (p *Portal) Poll(out []abi.Completion) (int, error) { return p.poll(out, true) }

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
func (p *Portal) Wait(ctx context.Context, out []abi.Completion) (int, error) {
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
