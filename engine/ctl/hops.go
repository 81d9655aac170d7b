package ctl

import "sync/atomic"

// The hops of a control request through the server, the driver path of
// paper Fig. 14: read from the socket, decoded, handed to the core's
// executor, run on the core, back from the executor, the reply encoded.
// BenchmarkDriverHops times each hop of a rekey by them.

// hop is one point a request passes.
type hop int

const (
	hopRead    hop = iota // the request datagram read from the socket
	hopDecoded            // decoded and validated
	hopExec               // the core's Executor.Exec called
	hopRun                // the closure started on the core
	hopRan                // the closure done
	hopBack               // Exec returned to the connection's goroutine
	hopReply              // the reply encoded, about to be written to the socket
	numHops
)

// hopTrace, when set, is called at each hop of every request. Only tests
// set it; unset it costs an atomic load and a compare.
var hopTrace atomic.Pointer[func(hop)]

func traceHop(h hop) {
	if f := hopTrace.Load(); f != nil {
		(*f)(h)
	}
}
