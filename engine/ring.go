package engine

// ring is a fixed-capacity FIFO of T: a circular buffer allocated once, in
// New. The initiator's queue of WRITEs with data left to send and the
// frames the engine sends to itself are rings (the serving side's queues
// are FIFOs by owner over a pool: fairq.go). Entries stay where they are:
// one is filled through the pointer push returns and served through
// front, without copying, and an entry keeps what it held when it was
// popped (the self-loop reuses its frame buffers that way).
type ring[T any] struct {
	buf     []T
	head, n int
}

func newRing[T any](capacity int) ring[T] { return ring[T]{buf: make([]T, capacity)} }

// len is the number of entries queued.
func (r *ring[T]) len() int { return r.n }

// push appends an entry and returns it, to be filled in place; nil when
// the ring is full.
func (r *ring[T]) push() *T {
	if r.n == len(r.buf) {
		return nil
	}
	k := r.head + r.n
	if k >= len(r.buf) {
		k -= len(r.buf)
	}
	r.n++
	return &r.buf[k]
}

// front is the oldest entry; the ring must not be empty.
func (r *ring[T]) front() *T { return &r.buf[r.head] }

// at is the entry i places behind the front (0: the front); i < len.
func (r *ring[T]) at(i int) *T {
	k := r.head + i
	if k >= len(r.buf) {
		k -= len(r.buf)
	}
	return &r.buf[k]
}

// pop drops the oldest entry; the ring must not be empty.
func (r *ring[T]) pop() {
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
}

// clear drops every entry.
func (r *ring[T]) clear() { r.n = 0 }
