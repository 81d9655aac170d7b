// Package ctl is the engine's control sockets: the software counterpart of
// the 1RMA driver (paper §4.1). Applications reach it through the
// portal library; it opens portals, hands out command slots under a
// per-application cap ("business priority", paper §4.3), creates and registers
// memory regions under the region key K_r the application gives, replaces
// that key on request (local rekey, paper §5.2: core.Rekey on the core's
// goroutine), allocates and reports the identity the engine stamps on a
// process's requests, holds every tenant to its quotas, and serves the
// engine's counters.
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
// Shared memory (shm.go). Every byte the application and the engine share
// is created by the engine: a memfd (MFD_HUGETLB when huge pages are
// available and the tenant's quota allows, else a plain memfd), sized,
// sealed with F_SEAL_SHRINK|F_SEAL_GROW so the application can never
// shrink it under the engine (which would turn an engine access into
// SIGBUS), and passed to the application, which maps it and faults it in
// (open, create_region). Then (attach, register_region) the engine adds
// F_SEAL_FUTURE_WRITE|F_SEAL_SEAL, which forbids punching holes in it,
// checks a region is all in memory (the application pays for it), maps it
// populated and locked, and only then gives it to the core. The portal
// segment's header is written by the engine (abi.Layout) at attach and
// never read back: the engine keeps its own Layout.
//
// Identity (identity.go, peer.go). The identity the engine stamps on a
// portal's requests (the header's PID, and that the portal reports to its
// application) is a number this server allocates per process, never a
// PID: the process is known by the pidfs inode of its pidfd
// (SO_PEERPIDFD), unique within a boot whatever PID namespace it runs in;
// every connection of a process gets the same identity, no other process
// ever gets it (identities are reserved in blocks, each recorded durably
// before any identity in it is used), and the application never supplies
// it. Persistence is off the path other tenants wait on: a new identity
// costs no disk write within its block; the table of processes is written
// by a background writer; pin and release wait on no disk write.
//
// Tenants (tenant.go, uidmap.go, policy.go, pool.go, quota.go,
// memwatch.go). A connection's tenant is its socket (Config.Sockets) and,
// on a socket that splits tenants by uid, the uid its peer's uid folds
// into: the operator's map (Config.UIDMap), else the user whose
// subordinate range holds it (Config.SubuidFile), else itself if the
// passwd file names it, else the socket's one "other" tenant; so a user's
// containers are one tenant, and uids nobody named are one more. The
// socket's AppPolicy grants class and slot caps by the peer's own uid and
// groups (per portal). Every finite pool of the control plane (control
// connections, portals, slots, region memory objects, memory, huge pages)
// gives each tenant a guarantee and bounds it by a quota, over all its
// connections, by one admission rule (pool.go) that keeps the guarantees
// of the other tenants, and of Config.ReserveTenants tenants to come,
// free; a refusal names the pool, the tenant and the numbers
// (ctlmsg.CodeQuota). Memory objects are charged until the kernel frees
// them, whatever the application keeps (memwatch.go: inotify). A
// connection that opens no portal within Config.OpenDeadline is closed.
//
// Concurrency. One goroutine per connection. Everything that touches an
// engine core runs through Executor.Exec between two iterations of the
// core's loop (engine/runner: on the loop's goroutine, or on the
// connection's when a loop asleep in Backoff lends it the core), so the
// core stays single-threaded. An engine of
// several cores (engine.Group) has one Executor per core (Listen); a
// portal is bound to one core (cores.go: the least loaded, or the one
// open asks for) and its calls run there. The region table is the
// engine's: a deregistration, and a portal's reclaim, wait until every
// core has passed a quiescent point (engine.Group.Quiesced) before the
// memory is unmapped. A failing, slow or
// malicious client only ever affects its own connection and its tenant:
// requests are size-limited and strictly validated, file descriptors sent
// to the engine are closed and refused, the number of connections, slots,
// regions and region bytes per portal are bounded by Config, and a
// tenant's totals by its pools.
//
// Stats. The stats reply sums the cores (ctlmsg.Stats's fields) and, on
// an engine of several, lists each (Stats.Cores); the portals list names
// each portal's core (PortalStats.Core), and attach tells the application
// its core (AttachReply.Core). A tenant's reply lists only its own
// portals and tenant row, an operator's (uid 0 or Config.OperatorGID) all;
// each tenant gets Config.StatsRate replies a second, and the cores run
// at most one collection at a time, shared by concurrent askers
// (statsview.go). Server.CoreStats reads one core with one Exec (the
// metrics' scrape: engine/metrics); Server.Tenants reports the tenants'
// usage against their quotas from the server's books, under its mutex,
// off the loops.
//
// Reclaim. When a connection closes for any reason (Close, exit, crash,
// kill -9) the server deregisters the portal's regions and closes the
// portal on the core, and only then unmaps its memory. If the core cannot
// confirm (Exec fails), the mappings are deliberately leaked rather than
// unmapped under a core that might still use them.
//
// Imports: engine, abi, ctlmsg, zerolog, x/sys/unix. Imported by tools/rmad.
package ctl
