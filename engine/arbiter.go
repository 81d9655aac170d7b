package engine

import "github.com/onerma/onerma/abi"

// classArbiter is the rule of paper §4.3's two FIFO arbiters, applied
// wherever the two classes compete for something: the window the
// initiator grants to queued ops, the serving side's attention to its
// inbound request queues, and its pulls of WRITE data. The high class goes
// first; after burst consecutive high grants while a low one waited, the
// low class gets one, so neither class starves.
type classArbiter struct {
	burst  int // Config.HighBurst
	streak int // high grants in a row while the low class waited
}

// pick chooses between the classes waiting (hi, lo) without recording a
// grant; false when neither waits.
func (a *classArbiter) pick(hi, lo bool) (abi.Class, bool) {
	switch {
	case hi && (!lo || a.streak < a.burst):
		return abi.ClassHigh, true
	case lo:
		return abi.ClassLow, true
	}
	return abi.ClassLow, false
}

// granted records a grant to cl; loWaited tells whether the low class
// was waiting for it.
func (a *classArbiter) granted(cl abi.Class, loWaited bool) {
	switch {
	case cl == abi.ClassLow:
		a.streak = 0
	case loWaited:
		a.streak++
	}
}

// next picks and records the grant at once, for users whose pick always
// becomes a grant.
func (a *classArbiter) next(hi, lo bool) (abi.Class, bool) {
	cl, ok := a.pick(hi, lo)
	if ok {
		a.granted(cl, lo)
	}
	return cl, ok
}

// window is a core's solicitation window (paper §3.1): the bytes of
// inbound data it may have asked for at once. The ops it initiates debit
// it (a READ its size, a WRITE the 64 bytes of its pull and
// acknowledgment) and so do the WRITEs it serves (the data it pulls).
type window struct {
	size, used int
}

// room reports whether an op may enter service: ArbitrationBytes free,
// whatever its size, so small ops cannot starve big ones.
func (w *window) room() bool { return w.size-w.used >= ArbitrationBytes }

func (w *window) debit(n int)  { w.used += n }
func (w *window) refund(n int) { w.used -= n }
