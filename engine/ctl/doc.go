// Package ctl is the engine's control socket: the software counterpart of
// the 1RMA driver (paper §4.1). Applications reach it through the
// portal library; it opens portals, hands out command slots under a
// per-application cap ("business priority", paper §4.3), creates and registers
// memory regions under the region key K_r the application gives, replaces
// that key on request (local rekey, paper §5.2: core.Rekey on the core's
// goroutine), reports the identity the engine stamps on requests, and
// serves the engine's counters.
//
// Keys. A region key arrives in a register_region or rekey request and
// goes straight to the core; the server keeps no copy (it clears the
// request datagram and the decoded key after use) and never logs it: no
// log event or error message carries a request's key, and ctlmsg.Key
// prints as "[redacted]" should one ever be formatted.
//
// Transport and messages are defined in package ctlmsg: a unix-domain
// SOCK_SEQPACKET socket, one JSON message per datagram, file descriptors as
// SCM_RIGHTS beside successful open and register_region responses.
//
// Shared memory. Every byte the application and the engine share is created
// by the engine: a memfd (MFD_HUGETLB when huge pages are available, else a
// plain memfd), sized, sealed with F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL so
// the application can never shrink it under the engine (which would turn an
// engine access into SIGBUS), mapped by the engine, and only then passed to
// the application. The portal segment's header is written by the engine
// (abi.Layout) and never read back: the engine keeps its own Layout.
//
// Identity. The PID the engine stamps on a portal's requests (and that the
// portal reports to its application) is the peer's PID from SO_PEERCRED,
// i.e. as seen in the engine's PID namespace; the application never
// supplies it.
//
// Concurrency. One goroutine per connection. Everything that touches the
// engine core runs through Executor.Exec on the core's own goroutine
// (engine/runner), so the core stays single-threaded. A failing, slow or
// malicious client only ever affects its own connection: requests are
// size-limited and strictly validated, file descriptors sent to the engine
// are closed and refused, the number of connections, slots, regions and
// region bytes per portal are bounded by Config.
//
// Reclaim. When a connection closes for any reason (Close, exit, crash,
// kill -9) the server deregisters the portal's regions and closes the
// portal on the core, and only then unmaps its memory. If the core cannot
// confirm (Exec fails), the mappings are deliberately leaked rather than
// unmapped under a core that might still use them.
//
// Imports: engine, abi, ctlmsg, zerolog, x/sys/unix. Imported by tools/rmad.
package ctl
