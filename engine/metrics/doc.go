// Package metrics exports a running engine's state to Prometheus: a
// prometheus.Collector that reads each engine core once per scrape and
// turns what it read into metrics named onerma_*, counters ending
// _total, every per-core series labelled core.
//
// It records nothing itself and adds no work to the data path. A scrape
// calls each Core's Snapshot, which reads the core on its own goroutine
// between two iterations of its poll loop (rmad: the control server's
// stats reply through runner.Exec, the same read as `rmactl stats`, and a
// copy of the core's delay histograms in the same Exec); the HTTP handler
// never holds a lock the loop takes. The delay histograms are kept by the
// core as log2 buckets (engine/telemetry.Delays), fed a batch at a time
// from the delay batches it already makes for rmatop's probe, and exported
// as const histograms: there is no Observe per completion.
//
// Import graph: tools/rmad ──► engine/metrics ──► ctlmsg, engine/telemetry,
// github.com/prometheus/client_golang. It imports neither the engine nor
// DPDK.
package metrics
