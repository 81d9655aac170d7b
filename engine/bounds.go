package engine

import "fmt"

// The serving side's bounds per region owner and per sender (SECURITY.md,
// "Serving side"). The inbound queues, the pull contexts and the window
// a core lends its pulls are shared by every remote initiator and by the
// regions of every tenant on the engine. Without bounds, a tenant that
// registers a writable region could hold every pull context (WRITEs to its
// own region, their pulls answered slowly or never), or flood the inbound
// queue past its NACK threshold with requests for its own region (with
// any source address: it derives K_d for any address from its own K_r),
// and every other owner's readers would be NACKed or wait; one initiator
// could do the same to the other readers of one owner.
//
// So each core counts, per owner (the region's tenant, region.tenant: an
// index below Config.Tenants) and per sender (the request's source
// address, within its owner: see below), the requests queued (in the
// inbound queues or waiting for a pull context) and the pull contexts
// held:
//
//   - a request whose owner already has InboundPerOwner queued, or whose
//     sender InboundPerSender, is NACKed at once (finishRequest), before
//     the class queue's threshold is looked at. NACK is the serving side's
//     one refusal (paper §6.1): nothing was done, the initiator may retry.
//   - a WRITE or REKEY whose owner holds PullsPerOwner contexts, or whose
//     sender PullsPerSender, waits in the pull queue while those behind it
//     are pulled (startPulls). It waits rather than being NACKed because
//     it was accepted: it stays exactly as a write waiting for window
//     always has (pulled later, or dropped unpulled once older than
//     TIMEOUT, its initiator timing out; nothing committed either way),
//     and an owner alone on the engine, whose writes all queue behind its
//     own, loses nothing but the pulls beyond its bound in flight at once,
//     where a NACK would fail every write beyond them. It must not wait at
//     the head of the queue: the writes of others behind it would wait for
//     the slow pulls the bound is there to contain.
//
// Defaults (Config.ServingBounds) give one owner, and one sender, half of
// the NACK threshold and half of the pulls the core can run at once, so
// the rest stays for the others whatever one of them does.
//
// A sender is a source address as the owner of the region a request
// names vouches for it: its K_d authenticates the address, and the owner,
// holding K_r, derives K_d for any address. Were senders counted by
// address alone, an owner could fill the bounds of another owner's
// reader with requests for its own region forged from that reader's
// address (or, were it a tenant on the reader's own engine, with genuine
// requests), and the reader's requests for the other owner's regions
// would be NACKed or wait. So the requests of one address are counted
// apart for each owner they name: an owner's traffic, forged from any
// addresses, fills only its own bound and its own part of each sender's,
// and one initiator still holds at most a sender's bounds of each
// owner's regions.
//
// Senders live in a fixed table per core, an entry for each (owner,
// address) with a request queued or a pull held, freed when it has none
// (hashed with a seed: senders choose their addresses, not their slots).
// It is sized so that every request and pull the core can hold at once
// could have a sender of its own (InboundQueue + PullContexts); should it
// be full, further senders share one overflow bucket, bounded as one
// sender.

// use is what one owner or one sender holds on a core's serving side.
type use struct {
	queued int32 // requests in the inbound queues or the pull queues
	pulls  int32 // pull contexts held
}

// senderUse is one sender's entry.
type senderUse struct {
	key uint64 // senderKey
	use
}

// senderKey names the sender of a request from addr for a region of
// owner.
func senderKey(owner uint16, addr uint32) uint64 { return uint64(owner)<<32 | uint64(addr) }

// senderOverflow names the shared bucket of the senders the table had no
// room for.
const senderOverflow = -1

// senderTable maps senders (senderKey) to their use: open addressing
// (linear probing) into e, whose entries do not move while in use, so a
// queued request or a pull names its sender's entry by index.
type senderTable struct {
	e     []senderUse
	free  []int32
	index []int32 // entry, or -1
	mask  uint32
	shift uint32 // 64 - log2(len(index))
	seed  uint64
	over  use // the senders without an entry
	// last is the entry take returned last: a stream of requests from
	// one sender skips the probe (its entry, while in use, is its own).
	last int32
}

func newSenderTable(n int, seed uint64) senderTable {
	size, bits := 2, uint32(1)
	for size < 2*n {
		size <<= 1
		bits++
	}
	t := senderTable{
		e:     make([]senderUse, n),
		free:  make([]int32, n),
		index: make([]int32, size),
		mask:  uint32(size - 1),
		shift: 64 - bits,
		seed:  seed,
	}
	t.reset()
	return t
}

// reset forgets every sender.
func (t *senderTable) reset() {
	for i := range t.index {
		t.index[i] = -1
	}
	t.free = t.free[:len(t.e)]
	for i := range t.free {
		t.free[i] = int32(len(t.e) - 1 - i)
	}
	clear(t.e)
	t.over = use{}
	t.last = 0
}

func (t *senderTable) slot(key uint64) uint32 {
	return uint32(mix64(key^t.seed) >> t.shift)
}

// find is key's slot in index, or the empty slot where it would go.
func (t *senderTable) find(key uint64) uint32 {
	k := t.slot(key)
	for t.index[k] >= 0 && t.e[t.index[k]].key != key {
		k = (k + 1) & t.mask
	}
	return k
}

// take is key's entry, a new one when it has none, or senderOverflow
// when the table is full.
func (t *senderTable) take(key uint64) int32 {
	if e := &t.e[t.last]; e.key == key && e.use != (use{}) {
		return t.last
	}
	k := t.find(key)
	if i := t.index[k]; i >= 0 {
		t.last = i
		return i
	}
	if len(t.free) == 0 {
		return senderOverflow
	}
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.e[i] = senderUse{key: key}
	t.index[k] = i
	t.last = i
	return i
}

// at is the use of entry i (senderOverflow: the shared bucket).
func (t *senderTable) at(i int32) *use {
	if i == senderOverflow {
		return &t.over
	}
	return &t.e[i].use
}

// release frees entry i once it holds nothing.
func (t *senderTable) release(i int32) {
	if i == senderOverflow || t.e[i].queued > 0 || t.e[i].pulls > 0 {
		return
	}
	k := t.find(t.e[i].key)
	t.index[k] = -1
	for j := (k + 1) & t.mask; t.index[j] >= 0; j = (j + 1) & t.mask { // backward-shift deletion
		home := t.slot(t.e[t.index[j]].key)
		if (j-home)&t.mask >= (j-k)&t.mask {
			t.index[k], t.index[j] = t.index[j], -1
			k = j
		}
	}
	t.free = append(t.free, i)
}

// bounds is a core's serving-side accounting: the bounds in force and
// what each owner and sender holds.
type bounds struct {
	inOwner, inSender     int32
	pullOwner, pullSender int32
	owners                []use // by owner tenant
	senders               senderTable
	scratch               []use // Audit's
}

func newBounds(cfg *Config, seed uint64) bounds {
	b := cfg.ServingBounds()
	return bounds{
		inOwner: int32(b.InboundPerOwner), inSender: int32(b.InboundPerSender),
		pullOwner: int32(b.PullsPerOwner), pullSender: int32(b.PullsPerSender),
		owners:  make([]use, cfg.Tenants),
		senders: newSenderTable(cfg.InboundQueue+cfg.PullContexts, seed),
	}
}

// refusal says why a request is NACKed at admission (refuseNone: it is
// not).
type refusal uint8

const (
	refuseNone   refusal = iota
	refuseOwner          // its owner's bound
	refuseSender         // its sender's bound
	refuseQueue          // its class queue at the NACK threshold (finishRequest)
)

// admit counts a request of owner from addr as queued, and returns its
// sender entry; or refuses it, counting nothing, when either already has
// its bound queued.
func (b *bounds) admit(owner uint16, addr uint32) (int32, refusal) {
	o := &b.owners[owner]
	if o.queued >= b.inOwner {
		return 0, refuseOwner
	}
	s := b.senders.take(senderKey(owner, addr))
	su := b.senders.at(s)
	if su.queued >= b.inSender {
		b.senders.release(s) // a new entry holds nothing
		return 0, refuseSender
	}
	o.queued++
	su.queued++
	return s, refuseNone
}

// unqueue: a queued request of owner and sender entry s left the queues
// without a pull.
func (b *bounds) unqueue(owner uint16, s int32) {
	b.owners[owner].queued--
	b.senders.at(s).queued--
	b.senders.release(s)
}

// pullBlocked is which bound keeps a write request of owner and sender s
// from a pull context now (refuseNone: neither).
func (b *bounds) pullBlocked(owner uint16, s int32) refusal {
	switch {
	case b.owners[owner].pulls >= b.pullOwner:
		return refuseOwner
	case b.senders.at(s).pulls >= b.pullSender:
		return refuseSender
	}
	return refuseNone
}

// pulled: a queued write request took a pull context.
func (b *bounds) pulled(owner uint16, s int32) {
	o, su := &b.owners[owner], b.senders.at(s)
	o.queued--
	o.pulls++
	su.queued--
	su.pulls++
}

// unpull: a pull context of owner and sender s was freed.
func (b *bounds) unpull(owner uint16, s int32) {
	b.owners[owner].pulls--
	b.senders.at(s).pulls--
	b.senders.release(s)
}

// reset forgets everything held (Shutdown, once the queues are empty and
// the pulls ended).
func (b *bounds) reset() {
	clear(b.owners)
	b.senders.reset()
}

// audit checks the counts against what is queued and pulled: owners and
// senders hold the counts recomputed, by owner and by sender entry (the
// overflow bucket last), named the entries the queues and pulls name.
func (b *bounds) audit(owners, senders []use, named []int32) error {
	for o := range b.owners {
		if b.owners[o] != owners[o] {
			return fmt.Errorf("audit: owner %d holds %+v, the queues and pulls %+v", o, b.owners[o], owners[o])
		}
	}
	t := &b.senders
	for _, i := range named {
		if t.index[t.find(t.e[i].key)] != i {
			return fmt.Errorf("audit: sender entry %d, named by the queues or pulls, is not in use", i)
		}
		if t.e[i].use != senders[i] {
			return fmt.Errorf("audit: sender %#x of owner %d holds %+v, the queues and pulls %+v", uint32(t.e[i].key), t.e[i].key>>32, t.e[i].use, senders[i])
		}
	}
	if len(named)+len(t.free) != len(t.e) {
		return fmt.Errorf("audit: senders: %d named, %d free of %d", len(named), len(t.free), len(t.e))
	}
	if t.over != senders[len(t.e)] {
		return fmt.Errorf("audit: sender overflow holds %+v, the queues and pulls %+v", t.over, senders[len(t.e)])
	}
	return nil
}
