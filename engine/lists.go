package engine

// Slot lists are intrusive doubly linked lists threaded through the slot
// table (prev/next are slot indices, -1 ends a list), so moving an op
// between the class FIFOs, the resolving list and the in-service list
// allocates nothing and removal from the middle (a completion arriving out
// of order, an op granted ahead of other tenants' older ones) is O(1). A
// queued op is on two lists: its class FIFO (prev/next, every tenant's
// ops in the order they were queued) and its tenant's FIFO of the class
// (tprev/tnext, shares.go); unlink takes it off both.

type listID uint8

const (
	listNone listID = iota
	listFIFOLow
	listFIFOHigh
	listResolving
	listInService
	numLists
)

type slotList struct {
	head, tail int32
	n          int
}

func (n *initiator) pushBack(l listID, i int32) {
	s := &n.slots[i]
	if s.list != listNone {
		panic("engine: slot already on a list")
	}
	L := &n.lists[l]
	s.list = l
	s.prev, s.next = L.tail, -1
	if L.tail >= 0 {
		n.slots[L.tail].next = i
	} else {
		L.head = i
	}
	L.tail = i
	L.n++
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
	L := &n.lists[s.list]
	if s.prev >= 0 {
		n.slots[s.prev].next = s.next
	} else {
		L.head = s.next
	}
	if s.next >= 0 {
		n.slots[s.next].prev = s.prev
	} else {
		L.tail = s.prev
	}
	L.n--
	s.list, s.prev, s.next = listNone, -1, -1
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
		after = n.slots[after].prev
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
	s.prev = after
	if after >= 0 {
		s.next = n.slots[after].next
		n.slots[after].next = i
	} else {
		s.next = L.head
		L.head = i
	}
	n.slots[s.next].prev = i // s.next >= 0: i is not the tail
	L.n++
}
