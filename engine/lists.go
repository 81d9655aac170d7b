package engine

// Slot lists are intrusive doubly linked lists threaded through the slot
// table (prev/next are slot indices, -1 ends a list), so moving an op
// between the arbiter FIFOs, the resolving list and the in-service list
// allocates nothing and removal from the middle (a completion arriving out
// of order) is O(1).

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

func (c *Core) listInit() {
	for i := range c.lists {
		c.lists[i] = slotList{head: -1, tail: -1}
	}
}

func (c *Core) pushBack(l listID, i int32) {
	s := &c.slots[i]
	if s.list != listNone {
		panic("engine: slot already on a list")
	}
	L := &c.lists[l]
	s.list = l
	s.prev, s.next = L.tail, -1
	if L.tail >= 0 {
		c.slots[L.tail].next = i
	} else {
		L.head = i
	}
	L.tail = i
	L.n++
}

func (c *Core) unlink(i int32) {
	s := &c.slots[i]
	if s.list == listNone {
		return
	}
	L := &c.lists[s.list]
	if s.prev >= 0 {
		c.slots[s.prev].next = s.next
	} else {
		L.head = s.next
	}
	if s.next >= 0 {
		c.slots[s.next].prev = s.prev
	} else {
		L.tail = s.prev
	}
	L.n--
	s.list, s.prev, s.next = listNone, -1, -1
}
