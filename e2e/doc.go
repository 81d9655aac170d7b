// Package e2e holds the integration tests that run real engines: rmad
// processes over DPDK vdevs (memif wires, af_packet ports on veth pairs in
// network namespaces), with applications linked against portal in this test
// process and in child processes. They need root and DPDK: outside CI they
// skip with the reason; in CI (CI=true) a missing prerequisite fails.
package e2e
