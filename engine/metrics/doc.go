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
// Rules of a scrape: each core is read with one runner.Exec
// (ctl.Server.CoreStats), whose closure builds that core's part of the
// stats reply and copies its delay histograms; metric objects, text
// encoding and compression happen on the HTTP goroutine. At most
// MaxScrapes run at once; one that takes longer than ScrapeTimeout (a
// stalled loop) gets a 503, and a core whose loop has stopped is reported
// as onerma_core_up 0 and nothing else. The histograms trail the
// completions by at most one batch (telemetry.BatchLen completions or
// telemetry.FlushNs). Bucket b of a Delays histogram holds delays in
// (2^(b-1), 2^b] ns, so its Prometheus le is exactly 2^b ns; buckets below
// 256 ns are folded into the first (the loop reads its clock once per
// iteration). Per-portal gauges carry the portal's id, name, uid, pid
// (identity), class and tenant, and are exported only when the operator
// asks (Config.PortalSeries): a tenant chooses names and starts
// processes, and would choose how many series there are. Per-uid gauges
// sum a uid's portals over all cores, for the UIDSeries lowest uids, the
// rest under uid "other". No other label takes a value a tenant chooses:
// tenants are the operator's (control sockets, uid files), cores, ports,
// ops, statuses and reasons are the engine's. Each tenant's usage against its quotas
// (onerma_tenant_usage, onerma_tenant_quota by resource) comes from
// Config.Tenants (ctl.Server.Tenants), and its counters in the data path
// (onerma_tenant_*: ops posted, its window share, held and borrowed, ops
// that waited for its share; labelled with the tenant's name only) from
// Config.Datapath.
//
// Import graph: tools/rmad ──► engine/metrics ──► ctlmsg, engine/telemetry,
// github.com/prometheus/client_golang. It imports neither the engine nor
// DPDK.
package metrics
