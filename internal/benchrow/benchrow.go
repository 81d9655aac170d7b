// Package benchrow is the record of one measurement: what rmaperf prints
// with -json and what make bench (rmabench) appends to $BENCH_OUT, one
// JSON object per line.
package benchrow

// Row is one measurement. Latency fields a tool does not report are null.
type Row struct {
	System string `json:"system"` // "onerma", "onerma-c" (onerma-perf, libonerma), "onerma-python" (python -m onerma.perf), "ucx-tcp", "aes-gcm-limit", "host", "onerma-kv", "memcached", "redis", "dpdk-testpmd"
	// Setup: "loopback", "loopback-jumbo", "loopback-hol-idle",
	// "loopback-hol", "loopback-hol-bg", "loopback-pairs", "memif",
	// "port-net_ring", "port-memif", "tcp", "cpu",
	// "cpu-ipsec-mb", "isolation-idle", "isolation-loaded",
	// "isolation-loaded-lowclass", "isolation-loaded-write",
	// "noisy-neighbour-alone", "noisy-neighbour", "platform",
	// "loopback-pairs-footprint", "c-loopback", "python-loopback", "write-pairs", "write-pairs-jumbo",
	// "write-pairs-tcp", "write-pairs-cpu", "write-pairs-cpu-ipsec-mb",
	// "rtt-PORT", "rtt-default-PORT" and "rtt-timeout-DUR-PORT" (PORT:
	// memif, memif-backoff, af_packet, af_xdp, net_ring, net_tap),
	// "metrics-eal-no-telemetry", "metrics-eal-telemetry",
	// "metrics-histograms", "metrics-unscraped", "metrics-scrape",
	// "selftest", "selftest-rounds", "selftest-handover",
	// "selftest-memif" and their stage tables "selftest-stages" and
	// "selftest-memif-stages", the ab setup's "ab" and "ab-loop",
	// the key/value caches' "kv-ycsb-c" and "kv-ycsb-b" (closed loop;
	// "-memif" appended for OneRMA's cache over two engines), "kv-fig8"
	// (open loop, one row per offered load), and the peers' own tools
	// "kv-memcslap" and "kv-redis-benchmark-P16", Figure 14's key
	// rotations "fig14-driver", "fig14-rekey-op", "fig14-keyx",
	// "fig14-driver-neither", "fig14-rekey-op-neither" and the driver
	// path's "fig14-rekey-call" (bench/RESULTS.md describes each).
	Setup string `json:"setup"`
	// Test: "read_bw", "read_lat", "write_bw", "write_lat", "seal_open",
	// "cpu-stall", "xproc-wake", "crypto-scaling", "get", "set", "mget",
	// on the port-* setups dpdk-testpmd's "io-fwd" and "macswap-fwd" and
	// the engine's "rx-frames", and on the fig14-* setups "unavail",
	// "unavail_raw", "probe_lat", "rekey_call", "rekey_op", "keyx_fetch"
	// and "neither" (lab/rmabench/fig14.go says what each measures).
	Test        string `json:"test"`
	Size        int    `json:"size"`
	Outstanding int    `json:"outstanding"`
	// Cores is how many CPUs did the measured work: an engine's polling
	// cores serving the row's ops (a portal is served by one), or the
	// threads a host row ran, one per vCPU.
	Cores     int     `json:"cores"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MBPerSec  float64 `json:"mb_per_sec"`
	P50us     float64 `json:"p50_us"`
	// P99us and P999us: application-measured, like P50us.
	P99us  *float64 `json:"p99_us"`
	P999us *float64 `json:"p999_us"`
	// EngP50us, EngP99us, EngP999us and EngMaxUs: the engine's own
	// total_delay (command seen by the engine -> completion written),
	// without the application's polling and scheduling delays.
	EngP50us  *float64 `json:"eng_p50_us,omitempty"`
	EngP99us  *float64 `json:"eng_p99_us,omitempty"`
	EngP999us *float64 `json:"eng_p999_us,omitempty"`
	EngMaxUs  *float64 `json:"eng_max_us,omitempty"`
	Ops       uint64   `json:"ops,omitempty"`
	Errors    uint64   `json:"errors"`
	Seconds   float64  `json:"seconds,omitempty"`
	Run       string   `json:"run,omitempty"`     // make bench run id
	Command   string   `json:"command,omitempty"` // what produced the row
	Note      string   `json:"note,omitempty"`

	// BackgroundBytes (loopback-hol-bg rows): the size of the one
	// background transfer kept going on the same executor while the row's
	// ops ran (0: none).
	BackgroundBytes int `json:"background_bytes,omitempty"`

	// OfferedOpsPerSec (open-loop rows, kv-fig8, loopback-hol-bg): the load offered,
	// Poisson arrivals; OpsPerSec is what was served of it.
	OfferedOpsPerSec float64 `json:"offered_ops_per_sec,omitempty"`
	// CPUSecPerMOps (kv-* rows): the serving side's CPU seconds per
	// million operations of the run (its GETs, and its SETs in
	// kv-ycsb-b, whose get and set rows share the value): memcached's or
	// redis-server's process, or for onerma-kv the cache server's
	// process and its engine's (rmad, its polling core included).
	CPUSecPerMOps *float64 `json:"cpu_s_per_mops,omitempty"`

	// CPUNsPerOp (the raw tests of rmaperf and of onerma-perf, its C
	// twin): the client process's CPU time, user and system over all its
	// threads (getrusage RUSAGE_SELF), from the start of the measured
	// interval until its last op completed, divided by the ops counted:
	// what an op costs the application, whatever the engine's rate. On
	// the stage rows: the engine cores' time in the row's stage per op.
	CPUNsPerOp *float64 `json:"cpu_ns_per_op,omitempty"`

	// Stage rows (setups selftest-stages and selftest-memif-stages,
	// from rmad -selftest -profile; engine/stage): one row per line of
	// the run's stage table, beside the run's own row, whose test, size,
	// depth, cores and rate they repeat. Stage names the line (a stage,
	// "overhead", "unattributed" or "total"), CyclesPerOp and CPUNsPerOp
	// its cost per op, BudgetNs its budget (none: null); the note has its
	// share and sections per op, the total's the budget's origin.
	Stage       string   `json:"stage,omitempty"`
	CyclesPerOp *float64 `json:"cycles_per_op,omitempty"`
	BudgetNs    *float64 `json:"budget_ns,omitempty"`

	// LoopNs (ab-loop rows, lab/rmabench/abloop.go): ns per iteration of
	// the engine's poll loop by what perf's samples of its CPU fell on:
	// "clock", "crossings" (the Go runtime's side of calls into C),
	// "yields" (the kernel and the system calls' stubs), "other", and
	// "iteration" (their sum).
	LoopNs map[string]float64 `json:"loop_ns,omitempty"`

	// Timeline (fig14-* "unavail" rows): the probes around one key
	// rotation, the one whose unavailability is the median, for Figure
	// 14 (rmafigures -fig14).
	Timeline []Probe `json:"timeline,omitempty"`
}

// Probe is one op of a Timeline.
type Probe struct {
	// AtUs is when it was posted, in µs from the post of the first probe
	// that failed under the old key.
	AtUs float64 `json:"at_us"`
	// LatUs is its latency, post to completion seen, in µs.
	LatUs float64 `json:"lat_us"`
	// Status is its completion's status (abi.Status's name).
	Status string `json:"status"`
	// New says it was posted with the new key (else the old).
	New bool `json:"new,omitempty"`
}

// F returns a pointer to v, for the optional fields.
func F(v float64) *float64 { return &v }
