package engine

// Slot lists are intrusive doubly linked lists threaded through the slot
// table (a slot's link[k].prev/next are slot indices, -1 ends a list), so
// moving an op between the class FIFOs, the resolving list and the
// in-service list allocates nothing and removal from the middle (a
// completion arriving out of order, an op granted ahead of other tenants'
// older ones) is O(1). A slot is on up to three lists at once, each
// through its own link: the list its state puts it on (byList: a class
// FIFO of every tenant's queued ops in the order they were queued,
// resolving, in service), a queued op's tenant's FIFO of its class
// (byTenant, shares.go), and a queued short op's tenant's list of short
// ops (byShort); unlink takes it off all of them.

type listID uint8

const (
	listNone listID = iota
	listFIFOLow
	listFIFOHigh
	listResolving
	listInService
	numLists
)

// The links of a slot, by the lists they thread it through.
const (
	byList = iota
	byTenant
	byShort
	numLinks
)

type slotLink struct{ prev, next int32 }

type slotList struct {
	head, tail int32
	n          int
}

// linkBack appends slot i to L through its link k.
func (n *initiator) linkBack(L *slotList, i int32, k int) {
	n.slots[i].link[k] = slotLink{L.tail, -1}
	if L.tail >= 0 {
		n.slots[L.tail].link[k].next = i
	} else {
		L.head = i
	}
	L.tail = i
	L.n++
}

// linkOut takes slot i off L, which it is on through its link k.
func (n *initiator) linkOut(L *slotList, i int32, k int) {
	l := &n.slots[i].link[k]
	if l.prev >= 0 {
		n.slots[l.prev].link[k].next = l.next
	} else {
		L.head = l.next
	}
	if l.next >= 0 {
		n.slots[l.next].link[k].prev = l.prev
	} else {
		L.tail = l.prev
	}
	*l = slotLink{-1, -1}
	L.n--
}

func (n *initiator) pushBack(l listID, i int32) {
	s := &n.slots[i]
	if s.list != listNone {
		panic("engine: slot already on a list")
	}
	s.list = l
	n.linkBack(&n.lists[l], i, byList)
}

func (n *initiator) unlink(i int32) {
	s := &n.slots[i]
	if s.list == listNone {
		return
	}
	if s.list == listFIFOLow || s.list == listFIFOHigh { // a queued op: its tenant's FIFO too
		n.queued--
		if n.multi {
			n.tunlink(i)
		}
		if s.short {
			n.sunlink(i)
		} else if n.shortq && !prio(s.class, s.length) {
			n.bulkQueued[s.class]--
			n.tq[s.tenant].bulk[s.class]--
		}
	}
	n.linkOut(&n.lists[s.list], i, byList)
	s.list = listNone
}

// insertInService puts slot i (on no list) into the in-service list, which
// is ordered by deadline so that expire looks at its head only. Most ops
// go to the tail (every deadline is now+Timeout); a WRITE whose serving
// side asked for a shorter timeout walks back from the tail.
func (n *initiator) insertInService(i int32) {
	L := &n.lists[listInService]
	d := n.slots[i].deadline
	after := L.tail
	for after >= 0 && n.slots[after].deadline > d {
		after = n.slots[after].link[byList].prev
	}
	if after == L.tail {
		n.pushBack(listInService, i)
		return
	}
	s := &n.slots[i]
	if s.list != listNone {
		panic("engine: slot already on a list")
	}
	s.list = listInService
	l := &s.link[byList]
	l.prev = after
	if after >= 0 {
		l.next = n.slots[after].link[byList].next
		n.slots[after].link[byList].next = i
	} else {
		l.next = L.head
		L.head = i
	}
	n.slots[l.next].link[byList].prev = i // l.next >= 0: i is not the tail
	L.n++
}
