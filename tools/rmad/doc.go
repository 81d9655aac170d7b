// Command rmad is the OneRMA engine daemon: one process per host that plays
// the 1RMA NIC (Singhvi et al., SIGCOMM 2020) on a DPDK port, and serves
// applications through the control socket (engine/ctl) and shared-memory
// portals (package portal).
//
// Configuration: an embedded default (default.json), overridden key by key
// by a JSON file (-config FILE, unknown keys rejected), overridden by flags
// (each named after its key: -ip, -slots, -socket, ...; -h lists them).
// -print-config prints the effective configuration as JSON, a valid config
// file, and exits.
//
// TIMEOUT: engine.timeout (-timeout), by default 4 × the port's round
// trip (p99.9) at a full window, at least 2 ms: 2 ms on net_memif,
// net_ring and a NIC of DPDK's own, 6 ms on net_af_xdp, 7 ms on net_tap,
// 8 ms on net_af_packet, 10 ms on other vdevs (timeout.go says why, and
// how the round trips are measured). An explicit value wins.
//
// Applications: ctl.slot_policy maps each application, by the uid it runs
// as or a group it is in, to the highest class of service it may use and
// its cap on command slots (paper §4.3; the first matching rule wins, else
// default_class and default; -default-class and -slot-cap set those two).
// A rule cannot match on the name an application gives its portal: such a
// config is refused. An application asking for a class its rule does not
// grant cannot open a portal; one asking for more slots than its cap is
// refused at alloc_slots. Every portal opened is logged with its class and
// cap, the rule that granted them, its tenant and its identity.
//
// Tenants: rmad listens on ctl.socket (-socket; a tenant per uid) and on
// each of ctl.sockets (path, mode, uid/gid owning it, name, tenant
// "socket" or "uid", its own slot_policy, quota and guarantee). ctl.quota
// (counts, or percentages of what is left once the engine has its own)
// bounds each tenant's conns, portals, slots, regions, memory_bytes and
// hugepage_bytes, and ctl.guarantee gives each that much whatever the
// others hold, with room kept for ctl.reserve_tenants (-reserve-tenants)
// tenants to come; ctl.max_conns_per_uid (-max-conns-per-uid) is the
// older name of quota.conns. A control connection that opens no portal
// within ctl.open_deadline (-open-deadline) is closed. On a socket with a
// tenant per uid, uids fold into tenants: ctl.uid_map first, then a
// user's subordinate uids (ctl.subuid_file, -subuid-file; /etc/subuid)
// count as the user, then each uid ctl.passwd_file (-passwd-file;
// /etc/passwd) names is its own; the rest share one "other" tenant.
// rmactl stats shows a tenant its own portals and usage, an operator
// (root or ctl.operator_gid, -operator-gid) everyone's, each tenant at
// most ctl.stats_rate a second (-stats-rate, -stats-burst). Process
// identities are recorded in ctl.id_state (-id-state; default
// engine.iv_state + ".ids") and its mark (that path + ".mark"), which must
// live as long as the IV state. Each core's summary doorbell (a page of a
// bit per portal the applications set when they post, so the loop reads
// only the command rings that have something) is shared by the core's
// tenants; ctl.no_summary turns it off (docs/protocol.md, SECURITY.md).
// rmad writes oom_score_adj (-oom-score-adj, default -999) so the kernel's
// OOM killer picks a tenant before it.
//
// Start-up: validate everything, log every config field and derived size,
// open and lock the IV counter state file (engine.iv_state, -iv-state;
// default /var/lib/onerma/iv-<ip>.state, <ip> engine.ip's address without
// a prefix length: nonces are address ‖ counter, so
// the counters belong to the address; it must persist across restarts and
// reboots, or IVs repeat; rmad refuses to start when another engine holds
// it, and when it is missing while the identity state exists: the engine
// ran before and lost its counters, and the message says how to recover),
// initialise the EAL (eal_args plus --vdev=port.vdev), create the mbuf pool,
// set up and start the port, build the engine core (engine.NewGroup, one core) over a
// dpdkport.Port, start its poll loop (engine/runner: busy, backoff or yield, pinned
// to poll.cpu), then open the identity state and listen on the control
// sockets (quotas' percentages are taken of what is left then).
//
// Shutdown on SIGINT/SIGTERM, in reverse: close the control socket (every
// portal is reclaimed while the core still runs), remove the socket
// directory if rmad created it, stop the poll loop (remaining ops complete
// with ABORTED), release the port's mbufs, stop and close the port, free the
// pool, clean up the EAL, close the IV state. Nothing is left on disk but
// the IV state and identity state files, which must stay.
//
//	rmad -vdev net_tap0,iface=onerma0 -port-name net_tap0 -ip 10.0.0.1 \
//	     -socket /run/onerma/rmad.sock -poll-mode busy -cpu 1
//
// ICMP: the engine answers ping to its address, at most engine.icmp_rate
// replies a second (-icmp-rate; 0: none) and engine.icmp_burst at once
// (-icmp-burst). Every second rmad looks at the core's record of ICMP
// "fragmentation needed" about the engine's frames and, when new ones
// came, logs a warning with the latest destination, the next-hop MTU the
// router reported and the engine's MTU: the engine does not lower its
// MTU on such an unauthenticated message; a route's mtu does.
// Routing, as a host: -ip A.B.C.D/N (engine.ip) gives the engine its
// address and on-link subnet, -gateway G (engine.gateway) the next hop of
// every destination off it, -route DST[,via=ADDR][,mtu=N] (engine.routes,
// repeatable) static routes; longest prefix wins, ARP resolves the next
// hop, a route's mtu sets the chunk size toward it, and an op with no
// route is UNREACHABLE at once. A bare -ip A.B.C.D puts every destination
// on-link, as before. engine.dscp ({"low": N, "high": N}, -dscp-low,
// -dscp-high) marks each class's frames for the fabric;
// engine.neighbor_reachable (-neighbor-reachable) is how long a
// neighbor's MAC is trusted after it answered. The table is logged at
// start ("routing table"). A tenant's ops hold at most
// engine.neighbors_per_tenant (-neighbors-per-tenant) entries of new
// on-link addresses still being resolved, per core; the engine sends at
// most engine.arp_rate ARP requests a second (-arp-rate), engine.arp_burst
// at once (-arp-burst).
//
// NACK threshold: engine.nack_threshold (-nack-threshold) 0, the default,
// derives it as the paper's §6.1 does, from TIMEOUT, the port type's RTT
// and serving rate (or engine.serve_rate, -serve-rate): timeout.go. rmad
// logs the derivation at start ("NACK threshold"), and the stats reply
// carries it (nack_threshold).
//
//	rmad -vdev net_af_packet0,iface=eth1 -port-name net_af_packet0 \
//	     -ip 10.1.0.2/24 -gateway 10.1.0.1 -route 10.9.0.0/16,via=10.1.0.254,mtu=1400
//
// Fault injection (tests): a "fault" section (or the -fault-* flags) with
// any probability above zero wraps the DPDK port in an engine/port/faultport
// (drop, duplicate, reorder, delay; rx, tx or both; seeded); its counters
// appear under "fault" in the stats reply. Absent or all zero: no wrapper.
//
// Metrics: -metrics HOST:PORT (metrics.listen; "" by default: off)
// serves Prometheus metrics at http://HOST:PORT/metrics (engine/metrics):
// the stats reply's counters, the tenants' and uids' usage and the core's
// delay histograms, which the core keeps only then
// (engine.Config.Delays); -metrics-portals (metrics.portals; off by
// default) adds a series per portal, labelled with its name, uid and
// identity. A scrape reads the core with one runner.Exec. -metrics-pprof
// (metrics.pprof; off by default) serves the Go runtime's profiles
// (net/http/pprof) at /debug/pprof/ on the same listener, for finding
// what holds the engine's memory (the soak takes heap profiles there);
// without it the Go runtime samples no allocation for a heap profile.
// The EAL keeps its telemetry socket (dpdk-telemetry.py, /ethdev/stats,0)
// unless eal_args say --no-telemetry.
//
// Self-test (selftest.go): -selftest read_bw|write_bw|read_lat -s SIZE
// -O N -D DURATION makes every polling core post ops itself
// (engine/opgen.SelfTest: no application, no portal ring), check each
// op's data, and rmad prints a perftest-style table (a row per core and
// their sum; -json: one benchmark row) and exits, 0 only when every op
// completed OK and checked. The target is a region of this engine (with
// -hairpin-self=true through the port) or, with -selftest-peer
// HOST:PORT -selftest-region ID -creds DIR (or -creds-fd FD), a
// peer engine's region whose owner grants this engine's K_d (identity
// engine.SelfTestPID) over keyx; -selftest-handover makes every answer
// cross a hand-over ring. -profile (profile.go) adds the cost accounting
// of package engine/stage: every core, its loop and its port mark their
// stages on a counter of the CPU's time-stamp counter (internal/tsc; the
// port's crossing, which seals, sends and receives at once, is split by
// the counter's stamps its C side takes), and after the report rmad prints each stage's cycles and ns per op over the
// measured window beside its budget, derived from the speed targets
// (internal/benchrow) and the crypto cost of the run's op measured on
// core 0's thread after the run (with -json: the row's "stages").
//
//	rmad -vdev net_ring0 -port-name net_ring0 -ip 10.99.2.1 -hairpin-self=true \
//	     -poll-mode busy -cpu 1 -selftest read_bw -s 64 -O 64 -D 5s -profile
//
// Imports: aesni, dpdk, engine, engine/ctl, engine/metrics,
// engine/telemetry, ctlmsg, engine/port/dpdkport, engine/port/faultport,
// engine/runner, wire; engine/opgen, keyx, internal/pattern and
// internal/benchrow for the self-test; engine/stage, internal/tsc and
// aesni/mb for its -profile.
package main
