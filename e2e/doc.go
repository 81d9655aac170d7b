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
// namespace).
package e2e
