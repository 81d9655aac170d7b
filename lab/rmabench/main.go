// Command rmabench is what `make bench` runs: it starts every engine it
// needs and measures, in one run on one machine,
//
//	(a) onerma, single-engine loopback: one engine on a net_ring port whose
//	    tx comes back as rx, acting as initiator and target, so one polling
//	    core's full per-op cost is measured (READ and WRITE; loopback-jumbo:
//	    the same at MTU 9000 for 4 KB), and 4 MB READs through
//	    portal.Executor (chunked into 4 KB ops, paced by package cc), whose
//	    goodput is compared with the raw 4 KB read_bw of the same run;
//	(b) onerma, two engines over memif, the client's K_d (for READ or
//	    WRITE) fetched from the rmaperf server over TLS 1.3 (package keyx;
//	    credentials from this process over inherited pipes);
//	(c) ucx_perftest over TCP on loopback (UCX_TLS=tcp), the peer a user
//	    would otherwise pick, with the same sizes and outstanding depth
//	    (ucp_get for the reads, ucp_put_bw / ucp_put_lat for the writes);
//	(d) one core's AES-128-GCM seal+open ceiling at 4 KB (aes-gcm-limit);
//	(e) isolation (paper Fig. 12): on the single loopback engine, a
//	    high-class application's 64 B read_lat alone (isolation-idle) and
//	    while a low-class application saturates the engine with 4 KB
//	    read_bw (isolation-loaded) or write_bw (isolation-loaded-write),
//	    the classes granted by a slot_policy in the engine's config;
//	(f) the host itself (platform, run first): how often and how long a
//	    busy thread loses its CPU (cpu-stall), and the round trip between
//	    two processes sharing a CPU, one sleeping on an eventfd (xproc-wake)
//	    (platform.go says why);
//	(g) what watching the loopback engine with rmatop costs (telemetry:
//	    64 B read_bw with and without rmatop attached, interleaved);
//	(h) only when asked (-only ab -ab-old DIR): an old build of the engine
//	    against the new one, -bin's, in interleaved rounds on the loopback
//	    engine (ab.go), and what one iteration of each build's poll loop
//	    costs at 16 in flight, sampled with perf (ab-loop, also alone with
//	    -only ab-loop; abloop.go);
//	(i) two engines on a veth pair between two network namespaces, on
//	    af_packet ports and on AF_XDP ports (af_packet, af_xdp) in
//	    interleaved rounds, so the ratio af_xdp / af_packet is measured
//	    (veth.go);
//	(j) what the EAL's telemetry socket and rmad -metrics cost (metrics:
//	    64 B read_bw and read_lat on the loopback engine started with
//	    --no-telemetry, with the socket, and with -metrics; then on one
//	    engine with -metrics, unscraped and scraped every second; each in
//	    interleaved rounds; metrics.go);
//	(k) only when asked (-only rtt): the engines' round trip on each port
//	    rmad runs on (memif, af_packet, af_xdp, net_tap), which rmad's
//	    default TIMEOUT per port type follows (rtt.go);
//	(l) key/value caches (kv): OneRMA's cache against memcached and
//	    Redis under the same YCSB workloads from one load generator
//	    (internal/kvload), closed loop in interleaved rounds, Figure 8's
//	    open-loop sweep of latency against offered load, and the peers'
//	    own tools, memcslap and pipelined redis-benchmark (kv.go);
//	(m) the engine's own op generator, rmad -selftest, with no
//	    application: on the loopback engine at one and two polling
//	    cores (selftest), and from one engine to another over memif
//	    (selftest-memif), each run's cycles by stage beside it
//	    (rmad -selftest -profile: rows selftest-stages and
//	    selftest-memif-stages) (selftest.go);
//	(n) head-of-line as paper Fig. 12 measures it: 64 B READs arriving
//	    Poisson at 10 k/s through the executor beside one background
//	    transfer of 4 KB to 64 MB on the same executor (hol: rows
//	    loopback-hol-bg, interleaved rounds; hol.go);
//	(o) the platform's 4 KB seal+open ceiling on one CPU and on two
//	    (crypto-scaling, part of platform; scaling.go);
//	(p) dpdk-testpmd forwarding 64-byte frames on net_ring and memif
//	    against the engine's frame rate on the same port type (testpmd,
//	    interleaved rounds; testpmd.go);
//	(q) libonerma, the C client, against package portal on the loopback
//	    engine: onerma-perf (rmaperf's tests in C, rows of system
//	    onerma-c) beside rmaperf, 64 B and 4 KB read_bw in interleaved
//	    rounds, each row with the client's CPU time per op (c-loopback;
//	    cloopback.go);
//	(r) tenants isolated on the data path (issue 28): on the loopback
//	    engine, a victim tenant's (uid 2012) 64 B and 4 KB read_lat alone
//	    (noisy-neighbour-alone) and beside a hostile tenant (uid 2011,
//	    noisy-neighbour) whose processes saturate the engine with READs
//	    and WRITEs and hold window with READs toward an address nobody
//	    answers, limited by a cgroup's CPU bandwidth, in interleaved
//	    rounds (noisy.go);
//	(s) the Python package (python/onerma) beside onerma-perf on the
//	    loopback engine: 64 B read_bw through its batch API and the
//	    latency of one Portal.read call, rows of system onerma-python for
//	    information (python-loopback; pyloopback.go);
//	(t) Figure 14 (fig14): a client on one engine reads a region on
//	    another over memif back to back while its key is rotated every
//	    50 ms, by the owner's Rekey through the control socket
//	    (fig14-driver), by a REKEY op of a control-plane application
//	    (fig14-rekey-op), or by the driver with the new K_d fetched over
//	    keyx after the first failure (fig14-keyx): the client's
//	    unavailability per rotation; the window in which neither key
//	    works (fig14-driver-neither, fig14-rekey-op-neither); and the
//	    driver path's latency on engines of one and two cores in
//	    backoff (fig14-rekey-call) (fig14.go; rmafigures -fig14 draws
//	    Figure 14);
//
// It appends one JSON object per measurement to -out (default
// $BENCH_OUT or bench/out.jsonl) as soon as the measurement ends, and at
// the end prints a side-by-side table and summary ratios of the run's
// rows. A setup that fails is reported and the run goes on with the next;
// the exit status says whether any failed.
//
// rmabench results regenerates the headline table at the top of
// bench/RESULTS.md from bench/out.jsonl (headline.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/benchrow"
)

// Row is the record rmaperf prints and this appends.
type Row = benchrow.Row

type spec struct {
	test        string
	size, depth int
}

// allSetups is -only's default: every setup but ab and rtt.
const allSetups = "platform,loopback,loopback-jumbo,c-loopback,python-loopback,hol,memif,af_packet,af_xdp,testpmd,tcp,aes,write-pairs,isolation,noisy-neighbour-alone,noisy-neighbour,telemetry,metrics,kv,selftest,selftest-memif,fig14"

const usage = `rmabench measures OneRMA and its peers on this machine, as make bench runs it.

Usage:
  rmabench [flags]
      run the setups of -only, appending each row to -out as it is measured
  rmabench results [-in FILE] [-results FILE] [-check]
      regenerate the headline table at the top of bench/RESULTS.md from
      bench/out.jsonl (rmabench results -h)

Examples:
  rmabench -bin bin -only loopback,aes -D 5s
  BENCH_OUT=/tmp/x.jsonl rmabench -bin bin -only isolation -D 3s
  rmabench results

Flags:
`

func main() {
	if role := os.Getenv(childEnv); role == "xproc" || role == "echo" {
		child := xprocChild
		if role == "echo" {
			child = echoChild
		}
		if err := child(); err != nil {
			fmt.Fprintln(os.Stderr, "rmabench:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "results" {
		os.Exit(resultsMain(os.Args[2:]))
	}
	os.Exit(run())
}

// run measures the setups the flags select and returns the exit status:
// 0 if every setup succeeded and every row was written, 1 otherwise, 2
// on a flag error.
func run() int {
	flag.Usage = func() {
		fmt.Fprint(flag.CommandLine.Output(), usage)
		flag.PrintDefaults()
	}
	out := flag.String("out", envOr("BENCH_OUT", "bench/out.jsonl"), "JSON lines output, each row appended as it is measured ($BENCH_OUT if set)")
	bin := flag.String("bin", "", "directory with rmad, rmaperf and onerma-perf (default: next to this binary)")
	dur := flag.Duration("D", 5*time.Second, "duration of each measurement")
	only := flag.String("only", allSetups, "setups to run (comma separated; a name also selects the setups it begins with or is part of: loopback-jumbo runs loopback too, selftest-memif selftest, af_packet and af_xdp run together, as noisy-neighbour-alone and noisy-neighbour do, platform runs crypto-scaling; ab, never by default, compares -ab-old's engine with -bin's (and runs ab-loop, their poll loops sampled with perf, also alone); rtt, never by default, measures each port's round trip)")
	abOld := flag.String("ab-old", "", "ab and ab-loop setups: directory holding the old build's rmad, rmaperf and (ab-loop) rmactl (the new ones are -bin's)")
	abRounds := flag.Int("ab-rounds", 5, "ab setup: interleaved rounds of each test")
	flag.IntVar(&metricsRounds, "metrics-rounds", metricsRounds, "metrics setup: interleaved rounds")
	flag.IntVar(&kvRounds, "kv-rounds", kvRounds, "kv setup: interleaved rounds of each closed-loop workload")
	flag.IntVar(&kvClients, "kv-clients", kvClients, "kv setup: clients (connections) of memcached and Redis")
	flag.Uint64Var(&kvKeys32, "kv-keys-32", kvKeys32, "kv setup: keys loaded at 32 B values")
	flag.Uint64Var(&kvKeys1K, "kv-keys-1k", kvKeys1K, "kv setup: keys loaded at 1 KB values")
	flag.DurationVar(&fig8D, "fig8-D", fig8D, "kv setup: measurement of each offered load of Figure 8's sweep")
	flag.IntVar(&fig14Rotations, "fig14-rotations", fig14Rotations, "fig14 setup: key rotations per design")
	flag.DurationVar(&fig14Every, "fig14-every", fig14Every, "fig14 setup: time between two rotations")
	flag.IntVar(&fig14Calls, "fig14-calls", fig14Calls, "fig14 setup: Rekey calls timed per engine (fig14-rekey-call)")
	flag.IntVar(&nnRounds, "nn-rounds", nnRounds, "noisy-neighbour setups: interleaved rounds")
	nnArgs := flag.String("nn-engine-args", "", "noisy-neighbour setups: more rmad flags for their engine, space separated (e.g. \"-window-bytes 32768\")")
	flag.IntVar(&isoWindow, "iso-window", 32<<10, "isolation setup: the engine's solicitation window in bytes (0: rmad's default, 256 KB)")
	holArgs := flag.String("hol-rmaperf-args", "", "hol setup: more rmaperf flags for its 64 B READs through the executor, space separated (e.g. \"-short-hold-max 50us\", the hold fixed at ShortHold)")
	holEngine := flag.String("hol-engine-args", "", "hol setup: more rmad flags for its engine, space separated (e.g. \"-poll-bytes 0\")")
	isoLoad := flag.String("iso-load-args", "", "isolation setup: more rmaperf flags for its low-class load, space separated (e.g. \"-moderate 16\", its doorbell moderated)")
	isoArgs := flag.String("iso-engine-args", "", "isolation setup: more rmad flags for its engine, space separated (e.g. \"-low-after-high 0 -poll-bytes 0\", to measure the engine without its bounds)")
	rttTimeout := flag.String("rtt-timeout", "1s", "rtt setup: the engines' TIMEOUT: 1s measures round trips (setups rtt-PORT); default keeps rmad's per port type, counting the ops it fails (rtt-default-PORT); or a duration (rtt-timeout-DUR-PORT)")
	rttPorts := flag.String("rtt-ports", "", "rtt setup: ports to run, comma separated among memif, memif-backoff, af_packet, af_xdp, net_ring, net_tap (\"\": all)")
	crypto := flag.String("crypto", "", "loopback setups: rmad's seal backend, -crypto of rmad (\"\": rmad's default)")
	python := flag.String("python", "/usr/bin/python3", "python-loopback setup: the Python interpreter (Debian's python3)")
	pyPath := flag.String("python-path", "", "python-loopback setup: the directory holding the onerma package (default: python/ beside -bin)")
	pgoOut := flag.String("pgo", "", "instead of measuring, profile rmad (built -pgo=off) on the loopback engine under the bench's workloads, -D each, and write the merged CPU profile here (scripts/pgo.sh)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rmabench: unexpected argument %q (setups go in -only)\n", flag.Arg(0))
		flag.Usage()
		return 2
	}
	flagErr := func(err error) int {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 2
	}
	isoEngineArgs = strings.Fields(*isoArgs)
	isoLoadArgs = strings.Fields(*isoLoad)
	holRmaperfArgs = strings.Fields(*holArgs)
	holEngineArgs = strings.Fields(*holEngine)
	nnEngineArgs = strings.Fields(*nnArgs)
	if *bin == "" {
		self, _ := os.Executable()
		*bin = filepath.Dir(self)
	}
	if *pyPath == "" {
		*pyPath = filepath.Join(filepath.Dir(filepath.Clean(*bin)), "python")
	}
	if *dur <= 0 {
		return flagErr(fmt.Errorf("-D %v: want a duration above 0", *dur))
	}
	want := func(s string) bool { return selects(*only, s) }
	// ab and ab-loop are matched as whole names, not as substrings as the
	// others are; ab runs ab-loop too.
	ab := slices.Contains(strings.Split(*only, ","), "ab")
	abLoop := ab || slices.Contains(strings.Split(*only, ","), "ab-loop")
	if abLoop {
		if _, _, err := abBins(*abOld); err != nil {
			return flagErr(err)
		}
		if *abRounds < 1 {
			return flagErr(fmt.Errorf("-ab-rounds %d: want at least 1", *abRounds))
		}
	}
	if nnRounds < 1 {
		return flagErr(fmt.Errorf("-nn-rounds %d: want at least 1", nnRounds))
	}
	if metricsRounds < 1 {
		return flagErr(fmt.Errorf("-metrics-rounds %d: want at least 1", metricsRounds))
	}
	if fig14Rotations < 1 || fig14Every < time.Millisecond || fig14Calls < 1 {
		return flagErr(fmt.Errorf("-fig14-rotations %d, -fig14-every %v, -fig14-calls %d: want at least 1, 1ms, 1", fig14Rotations, fig14Every, fig14Calls))
	}
	if kvRounds < 1 || kvClients < 1 || kvKeys32 == 0 || kvKeys1K == 0 || fig8D <= 0 {
		return flagErr(fmt.Errorf("-kv-rounds %d, -kv-clients %d, -kv-keys-32 %d, -kv-keys-1k %d, -fig8-D %v: want each above 0", kvRounds, kvClients, kvKeys32, kvKeys1K, fig8D))
	}
	var rtt rttBench
	if want("rtt") {
		b, err := newRTTBench(*rttTimeout, *rttPorts)
		if err != nil {
			return flagErr(err)
		}
		rtt = b
	}

	dir, err := os.MkdirTemp("", "onerma-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	rmad, rmaperf := filepath.Join(*bin, "rmad"), filepath.Join(*bin, "rmaperf")
	if *pgoOut != "" {
		if err := pgoRun(rmad, rmaperf, dir, *pgoOut, *dur); err != nil {
			fmt.Fprintln(os.Stderr, "rmabench:", err)
			return 1
		}
		return 0
	}

	runID := time.Now().UTC().Format("20060102T150405Z")
	rec, err := openRecorder(*out, runID)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		return 1
	}
	emit := rec.emit
	fmt.Fprintf(os.Stderr, "rmabench: run %s, rows appended to %s as they are measured\n", runID, *out)
	specs := []spec{{"read_bw", 64, 64}, {"read_bw", 4096, 64}, {"read_lat", 64, 1}, {"read_lat", 4096, 1},
		{"write_bw", 64, 64}, {"write_bw", 4096, 64}, {"write_lat", 64, 1}, {"write_lat", 4096, 1}}

	if want("platform") {
		rec.setup("platform", func() error { return platformRun(*dur, emit) })
	}
	if want("platform") || want("crypto-scaling") {
		rec.setup("crypto-scaling", func() error { return cryptoScaling(*dur, emit) })
	}
	// The loopback engine at the Ethernet MTU (a 4 KB READ answered in
	// three 1408-byte chunks, each sealed and opened on its own), and
	// with jumbo frames (MTU 9000: one chunk, as RoCE fabrics run with a
	// 4096-byte MTU), where its cost compares with aes-gcm-limit's single
	// 4 KB message.
	loops := []struct {
		setup, mtu string
		specs      []spec
	}{{"loopback", "1500", loopbackSpecs(specs)}, {"loopback-jumbo", "9000", []spec{{"read_bw", 4096, 64}, {"read_lat", 4096, 1}, {"write_bw", 4096, 64}, {"write_lat", 4096, 1}}}}
	for _, l := range loops {
		if want(l.setup) {
			rec.setup(l.setup, func() error { return loopbackRun(rmad, rmaperf, dir, l.setup, l.mtu, *crypto, l.specs, *dur, emit) })
		}
	}
	if want("c-loopback") {
		rec.setup("c-loopback", func() error {
			return cLoopbackRun(rmad, rmaperf, filepath.Join(*bin, "onerma-perf"), dir, *dur, emit)
		})
	}
	if want("python-loopback") {
		rec.setup("python-loopback", func() error {
			return pyLoopbackRun(rmad, filepath.Join(*bin, "onerma-perf"), *python, *pyPath, dir, *dur, emit)
		})
	}
	if want("hol") {
		rec.setup("hol", func() error { return holBgRun(rmad, rmaperf, dir, *dur, emit) })
	}
	if want("memif") {
		rec.setup("memif", func() error { return memifRun(rmad, rmaperf, dir, specs, *dur, emit) })
	}
	if want("selftest") {
		rec.setup("selftest", func() error { return selftestRun(rmad, dir, *dur, emit) })
	}
	if want("selftest-memif") {
		rec.setup("selftest-memif", func() error { return selftestMemifRun(rmad, rmaperf, dir, *dur, emit) })
	}
	if want("af_packet") || want("af_xdp") {
		rec.setup("af_packet,af_xdp", func() error { return vethRun(rmad, rmaperf, dir, *dur, emit) })
	}
	if want("testpmd") {
		rec.setup("testpmd", func() error { return testpmdRun(rmad, rmaperf, dir, *dur, emit) })
	}
	if want("rtt") {
		rec.setup("rtt", func() error { return rttRun(rmad, rmaperf, dir, rtt, *dur, emit) })
	}
	if want("tcp") {
		rec.setup("tcp", func() error { return tcpRun(specs, *dur, emit) })
	}
	if want("aes") {
		rec.setup("aes", func() error { return aesRun(*dur, emit) })
	}
	if want("write-pairs") {
		rec.setup("write-pairs", func() error { return writePairs(rmad, rmaperf, dir, *crypto, *dur, emit) })
	}
	if want("isolation") {
		rec.setup("isolation", func() error { return isolationRun(rmad, rmaperf, dir, *dur, emit) })
	}
	if want("noisy-neighbour") {
		// Both setups run together: their rows are interleaved rounds.
		rec.setup("noisy-neighbour-alone,noisy-neighbour", func() error { return noisyRun(rmad, rmaperf, *dur, emit) })
	}
	if want("telemetry") {
		rec.setup("telemetry", func() error {
			return telemetryRun(rmad, rmaperf, filepath.Join(*bin, "rmatop"), dir, *dur, emit)
		})
	}
	if want("metrics") {
		rec.setup("metrics", func() error { return metricsRun(rmad, rmaperf, dir, *dur, emit) })
	}
	if want("kv") {
		rec.setup("kv", func() error { return kvRun(*bin, dir, *dur, emit) })
	}
	if want("fig14") {
		rec.setup("fig14", func() error { return fig14Run(rmad, dir, emit) })
	}
	if ab {
		rec.setup("ab", func() error { return abRun(*abOld, rmad, rmaperf, dir, *crypto, *abRounds, *dur, emit) })
	}
	if abLoop {
		rec.setup("ab-loop", func() error { return abLoopRun(*abOld, rmad, rmaperf, dir, *crypto, *abRounds, *dur, emit) })
	}

	printTable(rec.rows)
	printSelfTestRatios(rec.rows)
	printStageSummaries(rec.rows)
	status := 0
	if err := rec.close(); err != nil {
		fmt.Fprintln(os.Stderr, "rmabench:", err)
		status = 1
	}
	fmt.Printf("\n%d rows appended to %s (run %s)\n", len(rec.rows), *out, runID)
	if !rec.summary(os.Stderr) {
		status = 1
	}
	return status
}

// selects reports whether -only's list only runs setup s: it names s, or
// a setup whose name begins with s.
func selects(only, s string) bool {
	for _, o := range strings.Split(only, ",") {
		if strings.HasPrefix(o, s) {
			return true
		}
	}
	return false
}

// tcpRun measures specs with ucx_perftest over TCP on loopback.
func tcpRun(specs []spec, dur time.Duration, emit emitFunc) error {
	if _, err := exec.LookPath("ucx_perftest"); err != nil {
		return fmt.Errorf("ucx_perftest not found (make bench installs ucx-utils): %v", err)
	}
	for _, s := range specs {
		r, err := ucxRun(s, dur)
		if err != nil {
			return err
		}
		emit(r)
	}
	return nil
}

// aesRun measures one core's 4 KB seal+open ceiling on both backends.
func aesRun(dur time.Duration, emit emitFunc) error {
	r, err := gcmLimit(dur)
	if err != nil {
		return err
	}
	emit(r)
	if r, err = gcmLimitMB(dur); err != nil {
		return err
	}
	emit(r)
	return nil
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}
