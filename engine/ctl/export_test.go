package ctl

// HopNames name the hops SetHopTrace reports, in order.
var HopNames = [numHops]string{"read", "decoded", "exec", "run", "ran", "back", "reply"}

// SetHopTrace makes the server call f with each hop's index (HopNames) as
// every request passes it; nil stops. Call it while no server runs.
func SetHopTrace(f func(int)) {
	if f == nil {
		hopTrace = nil
		return
	}
	hopTrace = func(h hop) { f(int(h)) }
}
