// Package e2e holds the integration tests that run real engines: rmad
// processes over DPDK vdevs (memif wires, af_packet ports on veth pairs in
// network namespaces), with applications linked against portal in this test
// process and in child processes. They need root and DPDK: outside CI they
// skip with the reason; in CI (CI=true) a missing prerequisite fails.
//
// Every read carries the derived key K_d its region's owner hands out
// (Region.DeriveKey of the reader's Identity); the test process plays both
// applications. security_test.go covers refusals of wrong keys, a local
// rekey under continuous reads, and IV counters across engine restarts
// (captured on the wire with a raw AF_PACKET socket in a network
// namespace). write_test.go covers WRITEs: verified writes of 1 B to 4 KB
// over memif and over af_packet/veth (each read back, and checked against
// the owner's own view of its region), refusals (read-only region, wrong
// K_d, bounds, local permission), and the serving engine SIGKILLed with
// writes in flight (every write completes once, OK or TIMEOUT; every
// range holds all old or all new bytes; ONERMA_KILL_TRIALS repeats it).
// attack_test.go and attack_write_test.go attack real engines from the
// network (raw frames on a Linux bridge; see the table in attack_test.go).
// routed_test.go and routed_fault_test.go run four engines (af_packet,
// AF_XDP, net_tap) on two subnets joined by a Linux router
// (internal/testbed.Routed): verified READs and WRITEs across it, ping from
// the router, the router's link down and up, a silently changed gateway
// MAC, routes to nowhere, and a path MTU below the engines'.
//
// failure_test.go covers failure in bounded time: an engine SIGKILLed
// with reads in flight (its application gets ENGINE_GONE for each, then
// ErrEngineGone, within microseconds of the connection closing, and
// Redial reconnects once the engine is back), and a region's owner
// process SIGKILLed (remote READs fail within a round trip).
//
// container_test.go runs engines and applications in podman containers of
// the images make image builds (scripts/image.sh): engines on af_packet
// and AF_XDP with their least privileges, two applications (e2e/ctrapp)
// in containers of their own, each mounting only its tenant's control
// socket directory; data verified across them, identities across PID
// namespaces and tenant quotas; and each port type's privileges, none of
// which can be left out.
//
// hostile_tenant_test.go runs a hostile tenant against engine A's
// control plane, as unprivileged processes of one user's uid and of its
// subordinate uids: idle connections kept as the open deadline closes
// them, the region, portal and slot tables filled, dropped huge page
// regions kept, a burst of new identities, stats hammered; each attack
// refused naming its pool and the one tenant. Another user is then
// refused nothing: portals, slots, regions on huge pages, verified READs
// and WRITEs against engine B; each sees only its own portals in stats,
// HugePages_Rsvd stays within the attacker's quota, and every pool of
// the attacker's tenant is back to 0 once its processes exit.
//
// hostile_datapath_test.go runs a hostile tenant's data-path attacks
// (issue 28) on three engines on a bridge, beside a victim tenant whose
// application keeps verified READs and WRITEs in flight from engine A to
// its region on engine B: a full window of READs to a dead destination
// on A, floods and slow pulls for the attacker's own region on B (raw
// frames forged from the victim's engine's address and from phantoms,
// sealed with K_d derived from the attacker's K_r), pushed and minted
// replay windows and forged IV addresses on B, ops to unused on-link
// addresses on A. Every op the victim posts completes once, OK; the
// tenants' data-path counters show each attack refused the attacker and
// nothing refused the victim.
//
// lookup_test.go has a Go owner register an index with a bucket layout
// linked to a slab, and the C reader (examples/c) and the Python one
// (examples/python/lookup_reader.py) LOOKUP tags in it across engines:
// hits checked byte for byte, misses with and without the bucket, a
// corrupt entry, a short sink, a bucket outside the region, a READ K_d, a
// region without a layout and a rewritten bucket, each with its status.
//
// kv_test.go runs the key/value cache's failover across four engines on
// a bridge (internal/kvfail): a replica rekeyed, its server process
// killed, its engine killed, and no GET failing.
//
// c_test.go runs libonerma, the C client, against real engines: its
// example reader (examples/c) beside a Go owner and its example owner
// beside a Go reader, READs and WRITEs checked byte for byte, wrong keys
// and rekeys seen from C, and the engine SIGKILLed under a C reader with
// reads in flight (ENGINE_GONE for each, within portal's bound, then a
// redial); docs/c.md's first program built as the document says (make
// install into a prefix, cc with pkg-config) and run; onerma-perf's rows
// decoded strictly as benchrow.Row; and, in the image of make image's
// c-sdk stage (no Go), the C reader built with pkg-config and reading
// through an engine. The examples and onerma-perf come from ONERMA_BIN
// (make build puts them in bin/) or are built with make -C libonerma
// examples tools. ckeyx_test.go has onerma-perf fetch its K_d from
// `rmaperf server` over keyx (libonerma's client, keyx's Server) and read
// verified data, and every refusal (not granted, address, unknown region,
// revoked, another CA, a loose file, a server's credentials) reaches C with
// its reason.
//
// tour_test.go runs the README's tour as a reader pastes it (the ```sh
// block after <!-- tour; internal/frontdoor parses it) and checks the
// output lines the README shows.
package e2e
