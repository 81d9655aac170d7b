package testbed

import (
	"time"

	"github.com/onerma/onerma/cc"
)

// BackoffCC are congestion-control parameters for an Executor whose
// engines idle in backoff mode on two shared cores (the e2e tests', the
// soak's), where an op's delays are tens of µs to a few ms: the paper's
// µs targets (cc.DefaultParams) would keep every window at its floor, a
// fraction of an op per RTT.
func BackoffCC() cc.Params {
	p := cc.DefaultParams()
	p.LocalTarget = 2 * int64(time.Millisecond)
	p.RemoteTarget = 4 * int64(time.Millisecond)
	p.RTT = int64(time.Millisecond)
	p.CwndInit = 4
	p.CwndMax = 64
	return p
}
