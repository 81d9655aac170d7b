// Package kvload is the load generator that drives every key/value
// system make bench compares (OneRMA's cache, memcached, Redis) with the
// same workloads, so their rows differ only in the system.
//
// Workloads are YCSB's core workloads C (100 % GET) and B (95 % GET, 5 %
// SET) over keys drawn by YCSB's scrambled Zipfian (theta 0.99; zipf.go),
// 16-byte keys and values of a chosen size (32 B, HERD's, and 1 KB),
// written first by Load. A run (Run) is
//
//   - closed loop: each client sends its next operation when the last
//     one ends, at a fixed concurrency: a system's throughput; or
//   - open loop: operations arrive at Poisson times fixed in advance, and
//     each one's latency counts from its arrival, however long it waited
//     for a free client, so a stall of the system is charged for every
//     request it delayed (no coordinated omission): latency against
//     offered load.
//
// A client is a Store used by one goroutine (memcached through
// gomemcache, Redis through go-redis: memcached.go, redis.go), or an
// AsyncStore, one goroutine keeping Depth GETs in flight (posted, then
// polled), as OneRMA's cache client does. Latencies go to HdrHistograms
// (three significant digits, merged across clients). A CPUMeter measures
// the serving side's processes from /proc during the measurement, and
// Server starts memcached and redis-server on loopback for a benchmark
// or a test.
//
// Imported by lab/rmabench (the kv-* setups and Figure 8); imports
// none of the engine.
package kvload
