package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/metrics"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/port/dpdkport/xdp"
	"github.com/onerma/onerma/engine/port/faultport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/wire"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// run is rmad: it returns the process exit code. ready, if not nil, is
// called with the control socket path once the engine serves (tests).
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(socket string)) int {
	cfg, opt, err := loadConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, cli.ErrUsage) {
		return 2 // printed with the usage text
	}
	if err != nil {
		fmt.Fprintln(stderr, "rmad:", err)
		return 2
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, "rmad:", opt.nameFlag(err))
		return 2
	}
	defer heapProfile(cfg.Metrics.Pprof)()
	if opt.printConfig {
		b, _ := json.MarshalIndent(&cfg, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	lvl, _ := zerolog.ParseLevel(cfg.LogLevel)
	log := zerolog.New(stderr).Level(lvl).With().Timestamp().Str("svc", "rmad").Logger()
	if opt.cpuProfile != "" {
		f, err := os.Create(opt.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "rmad: -cpuprofile:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := serve(ctx, &cfg, &opt.selftest, stdout, log, ready); err != nil {
		log.Error().Err(err).Msg("rmad failed")
		return 1
	}
	return 0
}

// heapProfile sets whether the Go runtime samples the engine's heap
// allocations for a heap profile (runtime.MemProfileRate) and returns
// what restores the previous rate (tests run rmad in process). On only
// when metrics.pprof serves the profile: the runtime keeps a record of
// every distinct allocation stack and size it ever sampled, never freed,
// in a hash table it touches page by page, so the engine's memory creeps
// up for hours (by up to a few MB) for a profile nobody reads. At rate 0
// each P's allocation cache records one more allocation (the runtime
// samples one on a change of rate), then none. Called before the engine
// allocates its tables: a profile then sees them.
func heapProfile(on bool) (restore func()) {
	prev := runtime.MemProfileRate
	if !on {
		runtime.MemProfileRate = 0
	} else if prev == 0 {
		runtime.MemProfileRate = 512 << 10 // the runtime's default
	}
	return func() { runtime.MemProfileRate = prev }
}

// cleanup runs shutdown steps in reverse order of set-up.
type cleanup struct {
	log   zerolog.Logger
	steps []func() error
	names []string
}

func (c *cleanup) add(name string, f func() error) {
	c.steps = append(c.steps, f)
	c.names = append(c.names, name)
}

func (c *cleanup) run() {
	for i := len(c.steps) - 1; i >= 0; i-- {
		if err := c.steps[i](); err != nil {
			c.log.Error().Err(err).Str("step", c.names[i]).Msg("shutdown step failed")
		} else {
			c.log.Debug().Str("step", c.names[i]).Msg("shutdown step done")
		}
	}
	c.steps, c.names = nil, nil
}

// serve starts the engine, serves until ctx is done (SIGINT/SIGTERM) or a
// component fails, and shuts everything down in reverse order. With
// -selftest (sto.test) the engine's cores generate ops themselves, the
// result goes to stdout, and serve returns when the run has ended.
func serve(ctx context.Context, cfg *Config, sto *selfTestOptions, stdout io.Writer, log zerolog.Logger, ready func(string)) error {
	ctlCfg, err := cfg.ctlConfig()
	if err != nil {
		return err
	}
	faultCfg, err := cfg.faultConfig()
	if err != nil {
		return err
	}
	frameBytes := wire.EthLen + cfg.Engine.MTU
	// At least the DPDK default data room (2048): some PMDs (af_packet) size
	// their frames by it.
	dataRoom := dpdk.Headroom + max(frameBytes, 2048)
	if xdp.IsAFXDP(cfg.Port.Vdev) {
		dataRoom = afxdpDataRoom()
	}
	logStartup(log, cfg, frameBytes, dataRoom, &ctlCfg)
	ctlCfg.NackThreshold = cfg.nackThresholdMsg()
	logNackThreshold(log, ctlCfg.NackThreshold)

	down := &cleanup{log: log}
	defer down.run()

	// The kernel's OOM killer is to pick a tenant before the engine that
	// serves them all (a performance and safety setting: without the
	// privilege rmad runs, and says so).
	if err := setOOMScoreAdj(cfg.OOMScoreAdj); err != nil {
		log.Warn().Err(err).Int("oom_score_adj", cfg.OOMScoreAdj).Msg("oom_score_adj not set (lowering it needs CAP_SYS_RESOURCE)")
	} else {
		log.Info().Int("oom_score_adj", cfg.OOMScoreAdj).Msg("oom_score_adj set")
	}

	// IV counters first: a state file another engine holds, one that
	// cannot be made durable, or one lost beside a surviving identity
	// state, stops rmad before it touches DPDK.
	if err := checkIVStateLost(cfg); err != nil {
		return err
	}
	warnIdentityStateLost(log, cfg)
	iv, err := openIVSource(cfg.ivStatePath())
	if err != nil {
		return err
	}
	down.add("IV state close", iv.Close)
	ivs := iv.Stats()
	log.Info().Str("iv_state", cfg.ivStatePath()).Uint64("iv_next", ivs.Next).Uint64("iv_high_water", ivs.HighWater).
		Msg("IV counter state opened")

	// An AF_XDP port's XDP program, handed to DPDK in its --vdev.
	cores, cpus := cfg.Poll.cores(), cfg.Poll.cpuList()
	vdev := cfg.Port.Vdev
	var xp *afxdp
	if xdp.IsAFXDP(vdev) {
		if xp, vdev, err = newAFXDP(vdev, cores, log); err != nil {
			return err
		}
		down.add("AF_XDP program file removal", func() error { xp.removeObject(); return nil })
	}

	// EAL, mempool, port.
	ealArgs := cfg.ealArgs(vdev)
	log.Info().Strs("eal_args", ealArgs).Msg("initialising the DPDK EAL")
	if err := dpdk.Init(ealArgs); err != nil {
		return fmt.Errorf("EAL init: %w", err)
	}
	down.add("EAL cleanup", func() error {
		err := dpdk.Cleanup()
		// EAL leaves its runtime directory (config, fbarrays) behind; with
		// our own file prefix nothing else uses it once we are gone.
		if dir := cfg.ealRuntimeDir(); dir != "" && err == nil {
			err = os.RemoveAll(dir)
		}
		return err
	})

	var pool *dpdk.Mempool
	if xp != nil {
		pool, err = xp.newPool("onerma_mbufs", cfg.Port.Mbufs, cfg.Port.MbufCache, frameBytes)
	} else {
		pool, err = dpdk.NewPktmbufPool("onerma_mbufs", cfg.Port.Mbufs, cfg.Port.MbufCache, 0, uint16(dataRoom), dpdk.SocketAny)
	}
	if err != nil {
		return err
	}
	down.add("mempool free", func() error { pool.Free(); return nil })

	id, err := dpdk.PortByName(cfg.Port.Name)
	if err != nil {
		return fmt.Errorf("port %q: %w", cfg.Port.Name, err)
	}
	portMAC, err := id.MACAddr()
	if err != nil {
		return fmt.Errorf("port %q: %w", cfg.Port.Name, err)
	}
	engCfg, err := cfg.engineConfig(wire.MAC(portMAC), iv)
	if err != nil {
		return err
	}
	// The cores' delay histograms, for the metrics only: without them the
	// cores keep none.
	var delays []*telemetry.Delays
	if cfg.Metrics.Listen != "" {
		for range cores {
			delays = append(delays, new(telemetry.Delays))
		}
		engCfg.Delays = delays[0]
	}
	mtu := uint32(0) // the driver's default, unless the engine needs more
	if cfg.Engine.MTU != 1500 {
		mtu = uint32(cfg.Engine.MTU)
	}
	if err := checkQueues(id, cores); err != nil {
		return fmt.Errorf("port %q: %w", cfg.Port.Name, err)
	}
	if err := id.Setup(dpdk.PortConfig{
		Queues: uint16(cores), RSS: cores > 1, RxDesc: cfg.Port.RxDesc, TxDesc: cfg.Port.TxDesc, MTU: mtu, Pool: pool,
		Promiscuous: engCfg.LocalMAC != wire.MAC(portMAC), // frames to a MAC that is not the port's
	}); err != nil {
		return fmt.Errorf("port %q setup: %w", cfg.Port.Name, err)
	}
	down.add("port stop+close", func() error { return errors.Join(id.Stop(), id.Close()) })
	if cores > 1 {
		logQueues(log, id, cores, &cfg.Port)
	}
	if xp != nil {
		if err := xp.started(engCfg.LocalIP, log); err != nil {
			return fmt.Errorf("port %q: %w", cfg.Port.Name, err)
		}
		down.add("AF_XDP close", func() error { return xp.close(log) })
	}

	portCfg := dpdkport.DefaultConfig()
	portCfg.Burst, portCfg.Stash, portCfg.FrameBytes = cfg.Port.Burst, 2*cfg.Port.Burst, frameBytes
	portCfg.HandOverRing = cfg.Port.HandOverRing
	queues, err := dpdkport.NewQueues(cfg.Port.Name, pool, cores, engCfg.UDPPort, portCfg)
	if err != nil {
		return fmt.Errorf("port %q io: %w", cfg.Port.Name, err)
	}
	down.add("port io close", func() error { queues.Close(); return nil })
	// Each core and its loop use its port: its queue pair, or the fault
	// injector in front of it (which holds copies, never mbufs).
	ports := make([]runner.Port, cores)
	txs := make([]engine.Tx, cores)
	faults := make([]*faultport.Port, cores)
	for i, dport := range queues.Ports {
		fc := faultCfg
		fc.Seed += uint64(i) // the cores' faults independent of each other
		if ports[i], faults[i], err = wrapPort(dport, fc); err != nil {
			return err
		}
		txs[i] = ports[i]
	}
	ctlCfg.PortStats = func(i int) *ctlmsg.PortStats {
		dev, err := devStats(id, i, cores)
		m := portStatsMsg(cfg.Port.Name, queues.Ports[i].Stats(), dev, err)
		if xp != nil && i == 0 { // the device's: core 0 carries it
			m.XDP = xp.stats()
		}
		return m
	}
	fault := faults[0]
	if fault != nil {
		ctlCfg.FaultStats = func(i int) *ctlmsg.FaultStats { return faultStatsMsg(faults[i].Stats()) }
	} else {
		log.Debug().Msg("fault injection off")
	}
	if m := engCfg.LocalMAC; m == (wire.MAC{}) || m[0]&1 != 0 {
		log.Warn().Str("engine_mac", fmtMAC(m)).Msg("engine MAC is zero or multicast: peers cannot reach it by ARP; set engine.mac")
	}
	log.Info().Str("port", cfg.Port.Name).Uint16("port_id", uint16(id)).Str("port_mac", fmtMAC(portMAC)).
		Str("engine_mac", fmtMAC(engCfg.LocalMAC)).Str("ip", engCfg.LocalIP.String()).Msg("port started")
	logRoutes(log, &engCfg)

	// The cores and their poll loops.
	group, err := engine.NewGroup(engCfg, txs)
	if err != nil {
		return err
	}
	for i := 1; i < len(delays); i++ {
		group.SetDelays(i, delays[i])
	}
	var selftest *selfTestRun
	if sto.test != "" { // attached before the cores run
		if selftest, err = newSelfTest(ctx, sto, group, &engCfg, log); err != nil {
			return fmt.Errorf("-selftest: %w", err)
		}
		for i, s := range selftest.stages { // -profile: the ports mark their transmits
			queues.Ports[i].SetStages(s)
		}
	}
	if engCfg.Crypto == engine.CryptoIPsecMB {
		arch, _ := engine.MBArch() // engine.NewGroup checked it works
		log.Info().Str("crypto", engCfg.Crypto).Str("ipsec_mb_arch", arch).Msg("seals batched on intel-ipsec-mb, opens on crypto/cipher")
	} else {
		log.Info().Str("crypto", cmp.Or(engCfg.Crypto, engine.CryptoGo)).Msg("seals and opens on crypto/cipher")
	}
	rCfg := runner.DefaultConfig()
	// A loop asleep in backoff lends its core to the control call that
	// finds it so: the call runs there and then, with no thread woken
	// either way (the driver path: go doc ./engine/runner, Lend).
	rCfg.Lend = true
	switch cfg.Poll.Mode {
	case "busy":
		rCfg.Mode = runner.Busy
	case "yield":
		rCfg.Mode = runner.Yield
	}
	if cfg.Poll.MaxSleep > 0 {
		rCfg.MaxSleep = time.Duration(cfg.Poll.MaxSleep)
		rCfg.MinSleep = min(rCfg.MinSleep, rCfg.MaxSleep)
	}
	if fault != nil {
		logFault(log, &faultCfg, &rCfg)
	}
	procs := setGOMAXPROCS(cores)
	var stages []*stage.Stages
	if selftest != nil {
		stages = selftest.stages
	}
	rs, err := startLoops(group, ports, rCfg, cpus, cfg.Poll.Nice, stages, log)
	if err != nil {
		return err
	}
	ctlCfg.LoopStats = func(i int) *ctlmsg.LoopStats { return loopStatsMsg(rs[i].Stats()) }
	down.add("runner stop", func() error {
		err := stopLoops(rs, 5*time.Second)
		// The loops have exited: their cores and ports are safe to read.
		for i, r := range rs {
			logFinal(log.With().Int("core", i).Logger(), group.Core(i).Stats(), r.Stats(), queues.Ports[i].Stats(), faults[i])
		}
		return err
	})
	log.Info().Str("mode", rCfg.Mode.String()).Int("cores", cores).Ints("cpus", cpus).Int("gomaxprocs", procs).Msg("poll loops running")
	stopWatch, watched := make(chan struct{}), make(chan struct{})
	go func() {
		watchFragNeeded(rs, &fragWatch{log: log, routes: engCfg.RoutingTable(), engineMTU: engCfg.MTU}, fragWatchPeriod, stopWatch)
		close(watched)
	}()
	down.add("fragmentation-needed watch stop", func() error { close(stopWatch); <-watched; return nil })

	// Control sockets. The engine's own memory is all taken by now, so
	// Listen measures what is left to share between tenants.
	for _, sc := range ctlCfg.Sockets {
		dir := filepath.Dir(sc.Path)
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			down.add("remove socket directory "+dir, func() error { return os.Remove(dir) })
		}
	}
	execs := make([]ctl.Executor, len(rs))
	for i, r := range rs {
		execs[i] = r
	}
	srv, err := ctl.Listen(ctlCfg, group, execs, log.With().Str("component", "ctl").Logger())
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	down.add("control socket close", func() error {
		err := srv.Close() // reclaims every portal while the core still runs
		if serr := <-served; !errors.Is(serr, ctl.ErrClosed) {
			err = errors.Join(err, serr)
		}
		return err
	})
	if delays != nil {
		ms, err := startMetrics(cfg.Metrics, srv, delays, metrics.Limits{
			WindowBytes: uint64(engCfg.WindowBytes), Slots: engCfg.Slots, Portals: engCfg.Portals, Regions: engCfg.Regions,
			MaxRegionsPerPortal: ctlCfg.MaxRegionsPerPortal, MaxPortalBytes: ctlCfg.MaxPortalBytes,
		}, log)
		if err != nil {
			return err
		}
		down.add("metrics server close", ms.close)
	}
	log.Info().Str("socket", ctlCfg.Sockets[0].Path).Int("sockets", len(ctlCfg.Sockets)).Msg("rmad ready")
	if ready != nil {
		ready(ctlCfg.Sockets[0].Path)
	}
	if selftest != nil {
		return selftest.run(ctx, id, rs, queues, stdout, log)
	}

	select {
	case <-ctx.Done():
		log.Info().Msg("signal received: shutting down")
		return nil
	case err := <-served:
		served <- err // for the cleanup step
		return fmt.Errorf("control socket: %w", err)
	case <-anyDone(rs):
		return errors.New("poll loop exited unexpectedly")
	}
}

// openIVSource opens (creating it and its directory if missing) the IV
// counter state file.
func openIVSource(path string) (*aesni.IVSource, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("IV state directory: %w", err)
		}
	}
	iv, err := aesni.OpenIVSource(aesni.IVConfig{Path: path})
	if err != nil {
		return nil, fmt.Errorf("engine.iv_state: %w", err)
	}
	return iv, nil
}

// wrapPort puts a fault injector in front of inner when fc injects faults
// (the config's "fault" section sets a probability); otherwise it returns
// inner itself: no wrapper, no cost.
func wrapPort(inner runner.Port, fc faultport.Config) (runner.Port, *faultport.Port, error) {
	if !fc.Active() {
		return inner, nil, nil
	}
	fp, err := faultport.New(inner, fc, nil) // runner.Monotonic: the runner's clock
	if err != nil {
		return nil, nil, err
	}
	return fp, fp, nil
}

// logFault says, loudly, that the port drops frames on purpose, and how
// late a delayed frame may be released (an idle backoff loop sleeps up to
// MaxSleep whatever the injector holds; other modes poll without sleeping).
func logFault(log zerolog.Logger, c *faultport.Config, r *runner.Config) {
	late := time.Duration(0)
	if r.Mode == runner.Backoff {
		late = r.MaxSleep
	}
	log.Warn().Str("direction", c.Direction).
		Float64("drop", c.Drop).Float64("duplicate", c.Duplicate).
		Float64("reorder", c.Reorder).Int("reorder_depth", c.ReorderDepth).
		Float64("delay", c.Delay).Stringer("delay_by", time.Duration(c.DelayNs)).Stringer("jitter", time.Duration(c.JitterNs)).
		Int("pool", c.Pool).Int("burst", c.Burst).Uint64("seed", c.Seed).
		Stringer("delay_late_at_most", late).
		Msg("fault injection ON: the port drops, duplicates, reorders or delays frames on purpose, as configured (config section \"fault\"; for tests)")
}

// loopStatsMsg converts the poll loop's counters to their control-socket
// form. TestLoopStatsMsgCoversEveryField keeps it in step with
// runner.Stats.
func loopStatsMsg(s runner.Stats) *ctlmsg.LoopStats {
	return &ctlmsg.LoopStats{Iterations: s.Iterations, RxFrames: s.RxFrames, IdleSleeps: s.IdleSleeps,
		Yields: s.Yields, SleptNs: s.SleptNs, Execs: s.Execs, Stalls: s.Stalls, StalledNs: s.StalledNs,
		WorkIterations: s.WorkIterations, ClockReads: s.ClockReads, WokenEarly: s.WokenEarly,
		Crossings: s.Crossings, CrossingsMax: s.CrossingsMax, CrossingsOver: s.CrossingsOver,
		RingLooks: s.RingLooks, RingLooksIdle: s.RingLooksIdle, RingScans: s.RingScans, RingRungIdle: s.RingRungIdle}
}

// portStatsMsg converts the port's counters, the driver's and the
// device's (devErr: those could not be read), to their control-socket
// form. TestPortStatsMsgCoversEveryField keeps it in step with
// dpdkport.Stats and dpdk.EthStats.
func portStatsMsg(name string, s dpdkport.Stats, dev dpdk.EthStats, devErr error) *ctlmsg.PortStats {
	m := &ctlmsg.PortStats{
		Name: name,
		Driver: ctlmsg.PortDriverStats{
			TxFrames: s.TxFrames, TxDropped: s.TxDropped, TxNoBuffer: s.TxNoBuffer, RxFrames: s.RxFrames,
			RxMultiSeg: s.RxMultiSeg, AllocFails: s.AllocFails, IOCalls: s.IOCalls, TxFullCalls: s.TxFullCalls,
			HandedOut: s.HandedOut, HandedIn: s.HandedIn, HandOverFull: s.HandOverFull,
		},
		Dev: ctlmsg.PortDevStats{
			RxPackets: dev.RxPackets, TxPackets: dev.TxPackets, RxBytes: dev.RxBytes, TxBytes: dev.TxBytes,
			RxMissed: dev.RxMissed, RxErrors: dev.RxErrors, TxErrors: dev.TxErrors, RxNoMbuf: dev.RxNoMbuf,
		},
	}
	if devErr != nil {
		m.DevErr = devErr.Error()
	}
	return m
}

// faultStatsMsg converts the fault injector's counters to their
// control-socket form. TestFaultStatsMsgCoversEveryField keeps it in step
// with faultport.Stats.
func faultStatsMsg(s faultport.Stats) *ctlmsg.FaultStats {
	dir := func(d *faultport.DirStats) ctlmsg.FaultDirStats {
		return ctlmsg.FaultDirStats{
			Frames: d.Frames, Passed: d.Passed, Dropped: d.Dropped, Duplicated: d.Duplicated,
			Delayed: d.Delayed, Reordered: d.Reordered, Deferred: d.Deferred, Released: d.Released,
			PoolEmpty: d.PoolEmpty, Overflow: d.Overflow, NoBuffer: d.NoBuffer,
		}
	}
	return &ctlmsg.FaultStats{Rx: dir(&s.Rx), Tx: dir(&s.Tx), Held: s.Held}
}

func fmtMAC(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// logRoutes logs the engine's routing table, in the order it is looked
// up (longest prefix first).
func logRoutes(log zerolog.Logger, ec *engine.Config) {
	var table []string
	for _, r := range ec.RoutingTable() {
		table = append(table, r.String())
	}
	ev := log.Info().Str("ip", ec.LocalIP.String())
	if ec.Subnet.IsValid() {
		ev = ev.Str("subnet", ec.Subnet.Masked().String())
	} else {
		ev = ev.Str("subnet", "none: every destination on-link")
	}
	if ec.Gateway.IsValid() {
		ev = ev.Str("gateway", ec.Gateway.String())
	}
	ev.Strs("routes", table).Uints8("dscp", ec.DSCP[:]).Str("neighbor_reachable", ec.NeighborReachable.String()).Msg("routing table")
}

// logStartup logs every config field and every size derived from them.
func logStartup(log zerolog.Logger, cfg *Config, frameBytes, dataRoom int, c *ctl.Config) {
	logFields(log.Info(), cfg).Msg("effective config")
	ev := log.Info().
		Int("frame_bytes", frameBytes).
		Int("mbuf_data_room", dataRoom).
		Uint64("mbuf_pool_bytes_approx", uint64(cfg.Port.Mbufs)*uint64(dataRoom+mbufOverhead)).
		Int("max_payload_bytes", wire.MaxPayload(cfg.Engine.MTU)).
		Int("window_ops_at_arbitration", cfg.Engine.WindowBytes/engine.ArbitrationBytes).
		Str("responsive_effective", responsiveOf(&cfg.Engine).String()).
		Str("port_kind", portKind(&cfg.Port)).
		Str("timeout_port_default", defaultTimeout(&cfg.Port, cfg.Poll.Mode).String())
	if l, err := abi.NewLayout(0, c.CmdCap, c.CplCap); err == nil {
		ev = ev.Uint64("portal_segment_bytes", l.Size).
			Int("cmd_ring_bytes", abi.RingBytes(c.CmdCap, abi.CommandSize)).
			Int("cpl_ring_bytes", abi.RingBytes(c.CplCap, abi.CompletionSize))
	}
	if ec, err := cfg.engineConfig(wire.MAC{0x02, 0, 0, 0, 0, 1}, aesni.NewVolatileIVSource(aesni.IVConfig{})); err == nil {
		b := ec.ServingBounds() // per core
		ev = ev.Int("inbound_per_owner", b.InboundPerOwner).Int("inbound_per_sender", b.InboundPerSender).
			Int("pulls_per_owner", b.PullsPerOwner).Int("pulls_per_sender", b.PullsPerSender).
			Int("replay_lanes_per_sender", b.ReplayLanesPerSender).Int("replay_peers_per_owner", b.ReplayPerOwner)
	}
	ev.Uint64("shared_region_bytes_max", uint64(c.MaxConns)*c.MaxPortalBytes).
		Int("control_sockets", len(c.Sockets)).
		Msg("derived sizes")
}

// responsiveOf is engine.Config.Responsive as the cores use it: 0 is a
// quarter of the TIMEOUT.
func responsiveOf(e *EngineConfig) time.Duration {
	if e.Responsive != 0 {
		return time.Duration(e.Responsive)
	}
	return time.Duration(e.Timeout) / 4
}

// mbufOverhead approximates the per-mbuf memory beyond its data room
// (struct rte_mbuf plus mempool object header).
const mbufOverhead = 128 + 64
