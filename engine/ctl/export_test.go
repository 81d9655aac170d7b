package ctl

// HopNames name the hops SetHopTrace reports, in order.
var HopNames = [numHops]string{"read", "decoded", "exec", "run", "ran", "back", "reply"}

// SetHopTrace makes the server call f with each hop's index (HopNames) as
// every request passes it; nil stops.
func SetHopTrace(f func(int)) {
	if f == nil {
		hopTrace.Store(nil)
		return
	}
	g := func(h hop) { f(int(h)) }
	hopTrace.Store(&g)
}
