package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/port/faultport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/engine/stage"
	"github.com/onerma/onerma/wire"
)

// The engine's polling cores: one engine.Group core per CPU of
// poll.cpus (or poll.cores unpinned), each a runner.Runner on its own
// queue pair of the port (dpdkport.Queues), pinned to its CPU.

// setCPUs is -cpu: "N", a list "1,2", or "-1" (one core, unpinned). It
// sets poll.cpus (and leaves poll.cpu -1), so the flag overrides either
// key of a config file.
func setCPUs(c *Config, v string) error {
	c.Poll.CPU, c.Poll.CPUs = -1, nil
	if strings.TrimSpace(v) == "-1" {
		return nil
	}
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("CPU %q: %w", f, err)
		}
		c.Poll.CPUs = append(c.Poll.CPUs, n)
	}
	return nil
}

// cpuList is the CPUs the polling cores are pinned to, core i to the i-th
// (none: unpinned): poll.cpus, or poll.cpu as a list of one.
func (p *PollConfig) cpuList() []int {
	if len(p.CPUs) > 0 {
		return p.CPUs
	}
	if p.CPU >= 0 {
		return []int{p.CPU}
	}
	return nil
}

// cores is the number of polling cores.
func (p *PollConfig) cores() int {
	if p.Cores > 0 {
		return p.Cores
	}
	return max(1, len(p.cpuList()))
}

// validate checks the polling cores against themselves and the port.
func (p *PollConfig) validate(port *PortConfig) error {
	cpus := p.cpuList()
	switch {
	case p.CPU < -1:
		return fmt.Errorf("%w: poll.cpu %d", errConfig, p.CPU)
	case p.CPU >= 0 && len(p.CPUs) > 0:
		return fmt.Errorf("%w: poll.cpu %d and poll.cpus %v both set: list every CPU in poll.cpus", errConfig, p.CPU, p.CPUs)
	case p.Cores < 0 || p.Cores > wire.MaxCores:
		return fmt.Errorf("%w: poll.cores %d, want 0..%d", errConfig, p.Cores, wire.MaxCores)
	case len(cpus) > wire.MaxCores:
		return fmt.Errorf("%w: poll.cpus lists %d CPUs, at most %d cores", errConfig, len(cpus), wire.MaxCores)
	case p.Cores > 0 && len(cpus) > 0 && p.Cores != len(cpus):
		return fmt.Errorf("%w: poll.cores %d but poll.cpus lists %d CPUs (one core per CPU; cores 0 follows the list)", errConfig, p.Cores, len(cpus))
	case port.Mbufs < 2*uint32(p.cores())*uint32(port.RxDesc):
		return fmt.Errorf("%w: port.mbufs %d < 2 x rx_desc (%d) x %d cores", errConfig, port.Mbufs, port.RxDesc, p.cores())
	}
	for i, c := range cpus {
		if c < 0 || c >= len(unix.CPUSet{})*64 {
			return fmt.Errorf("%w: poll.cpus: CPU %d", errConfig, c)
		}
		if slices.Index(cpus, c) != i {
			return fmt.Errorf("%w: poll.cpus: CPU %d listed twice", errConfig, c)
		}
	}
	return nil
}

// pollThreadsSpare is how many Ps GOMAXPROCS keeps beyond the polling
// threads: one for the control plane, scrapes and the runtime's other
// goroutines, one for the garbage collector's mark worker.
const pollThreadsSpare = 2

// setGOMAXPROCS makes room for the polling threads: each locked polling
// goroutine holds a P for good (busy and yield modes), and a cgo call's
// return, or a preempted poller, waits for a P when none is idle. With
// fewer Ps than pollers plus pollThreadsSpare, a control call, a scrape
// or the garbage collector would take a poller's P away. It returns the
// value in force (it only raises it; dpdk.KeepOthersOff keeps it fixed
// once the pollers have moved the other threads off their CPUs).
func setGOMAXPROCS(cores int) int {
	if want := cores + pollThreadsSpare; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
	return runtime.GOMAXPROCS(0)
}

// startLoops starts one runner per core of g on ports[i], each with base's
// settings, pinned to cpus[i] when cpus are given (and at nice in busy
// mode, as a performance setting: without the privilege the thread keeps
// the process's), marking its stages on stages[i] when stages are given
// (-selftest -profile). On an error the runners started are stopped.
// execSpin is runner.Config.ExecSpin for a busy loop pinned to a CPU.
const execSpin = 50 * time.Microsecond

func startLoops(g *engine.Group, ports []runner.Port, base runner.Config, cpus []int, nice int, stages []*stage.Stages, log zerolog.Logger) ([]*runner.Runner, error) {
	var rs []*runner.Runner
	for i, port := range ports {
		rc := base
		if stages != nil {
			rc.Stages = stages[i]
		}
		var pin []int
		if len(cpus) > 0 {
			pin = []int{cpus[i]}
		}
		rc.ThreadStart, rc.ThreadExit = dpdkport.ThreadHooks(pin...)
		if rc.Mode == runner.Busy && len(pin) > 0 {
			// The CPU is the loop's alone: a control call watches for its
			// closure to have run rather than wait to be woken.
			rc.ExecSpin = execSpin
		}
		if rc.Mode == runner.Busy && len(pin) > 0 && nice != 0 { // the CPU is the engine's
			start, lg := rc.ThreadStart, log.With().Int("core", i).Logger()
			rc.ThreadStart = func() error {
				if err := start(); err != nil {
					return err
				}
				if err := dpdk.SetNice(nice); err != nil {
					lg.Warn().Err(err).Int("nice", nice).Msg("the polling thread keeps the process's nice value (lowering it needs CAP_SYS_NICE)")
				} else {
					lg.Info().Int("nice", nice).Msg("polling thread's nice value set")
				}
				return nil
			}
		}
		r, err := runner.New(g.Core(i), port, rc)
		if err == nil {
			err = r.Start()
		}
		if err != nil {
			stopLoops(rs, time.Second)
			return nil, fmt.Errorf("core %d: %w", i, err)
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// stopLoops stops every runner at once: a core finishing its WRITEs may
// still need frames that land on another core's queue, which that core
// hands over only while it polls.
func stopLoops(rs []*runner.Runner, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Stop(ctx); err != nil {
				errs[i] = fmt.Errorf("core %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// anyDone is closed when the first of rs's loops has exited.
func anyDone(rs []*runner.Runner) <-chan struct{} {
	done := make(chan struct{})
	var once sync.Once
	for _, r := range rs {
		go func() {
			<-r.Done()
			once.Do(func() { close(done) })
		}()
	}
	return done
}

// devStats are the device counters of core q of cores (its queue pair's
// on an engine of several: their sum over the cores is the device's,
// and core 0 carries the counters the device keeps for no queue).
func devStats(id dpdk.PortID, q, cores int) (dpdk.EthStats, error) {
	if cores == 1 {
		return id.Stats()
	}
	qs, err := id.QueueStats(uint16(q))
	if err != nil {
		return dpdk.EthStats{}, err
	}
	s := dpdk.EthStats{RxPackets: qs.RxPackets, TxPackets: qs.TxPackets, RxBytes: qs.RxBytes, TxBytes: qs.TxBytes, RxErrors: qs.RxErrors}
	if q == 0 {
		dev, err := id.Stats()
		if err != nil {
			return dpdk.EthStats{}, err
		}
		s.RxMissed, s.RxNoMbuf, s.TxErrors = dev.RxMissed, dev.RxNoMbuf, dev.TxErrors
	}
	return s, nil
}

// checkQueues refuses a port that cannot give every core a queue pair,
// or that would receive on queues no core polls (an af_packet port's
// qpairs, an AF_XDP port's sockets: the kernel spreads frames over all of
// them).
func checkQueues(id dpdk.PortID, cores int) error {
	info, err := id.Info()
	if err != nil {
		return err
	}
	switch {
	case int(info.MaxRxQueues) < cores || int(info.MaxTxQueues) < cores:
		return fmt.Errorf("%w: %d polling cores, but the %s port has at most %d rx and %d tx queues", errConfig, cores, info.Driver, info.MaxRxQueues, info.MaxTxQueues)
	case info.Driver == "net_af_packet" && int(info.MaxRxQueues) != cores:
		return fmt.Errorf("%w: %d polling cores, but the af_packet port has %d queue pairs, over which the kernel spreads frames: give port.vdev qpairs=%d", errConfig, cores, info.MaxRxQueues, cores)
	}
	return nil
}

// logQueues says how an engine of several cores gets its frames: by the
// device's RSS, or not, and in either case handed over between the
// cores' queues by engine.Steer's rule.
func logQueues(log zerolog.Logger, id dpdk.PortID, cores int, p *PortConfig) {
	ring := p.HandOverRing
	// Frames a core has handed over and its destination not yet taken
	// stay out of the pool: with every ring full and every rx queue's
	// descriptors filled, the pool may run dry (rx_nombuf, tx_no_buffer).
	held := cores*(cores-1)*ring + cores*int(p.RxDesc)
	if held > int(p.Mbufs) {
		log.Warn().Int("mbufs", int(p.Mbufs)).Int("held_at_most", held).
			Msg("port.mbufs is less than the rx descriptors and full hand-over rings may hold: raise port.mbufs or lower port.handover_ring")
	}
	hf, err := id.RSSHashes()
	ev := log.Info().Int("queues", cores).Int("handover_ring", ring).Int("handover_rings", cores*(cores-1)).Int("mbufs_held_at_most", held)
	if err != nil {
		ev = ev.AnErr("rss_error", err)
	}
	if hf != 0 {
		ev.Str("rss_hashes", fmt.Sprintf("%#x", hf)).Msg("port queues: the device spreads flows over them by RSS; each core hands the frames of other cores over to them")
		return
	}
	ev.Str("rss", "none: the driver does not hash (memif: a queue receives what the peer sent on it; net_tap, af_packet, AF_XDP: what the kernel hashed to it)").
		Msg("port queues: each core hands the frames of other cores over to them")
}

// logFinal logs a core's counters, its loop's, its port's and its fault
// injector's (nil: none) once its loop has exited.
func logFinal(log zerolog.Logger, st engine.Stats, rs runner.Stats, ps dpdkport.Stats, fault *faultport.Port) {
	log.Info().Uint64("posted", st.Posted).Uint64("rx_frames", st.RxFrames).Uint64("tx_frames", st.TxFrames).
		Uint64("rx_dropped", st.RxDropped).Uint64("req_served", st.ReqServed).Uint64("slots_in_use", st.SlotsInUse).
		Uint64("rx_auth_failed", st.RxAuthFailed).Uint64("req_auth_failed", st.ReqAuthFailed).
		Uint64("rekeys", st.Rekeys).Uint64("iv_errors", st.IVErrors).
		Uint64("icmp_echo_replies", st.ICMPEchoReplies).Uint64("icmp_rate_limited", st.ICMPRateLimited).
		Uint64("icmp_frag_needed", st.ICMPFragNeeded).
		Msg("final core counters")
	log.Info().Uint64("iterations", rs.Iterations).Uint64("rx_frames", rs.RxFrames).Uint64("idle_sleeps", rs.IdleSleeps).
		Uint64("yields", rs.Yields).Uint64("slept_ns", rs.SleptNs).Uint64("execs", rs.Execs).
		Uint64("stalls", rs.Stalls).Uint64("stalled_ns", rs.StalledNs).
		Uint64("clock_reads", rs.ClockReads).Uint64("crossings", rs.Crossings).Uint64("crossings_max", rs.CrossingsMax).
		Uint64("crossings_over", rs.CrossingsOver).Uint64("ring_looks", rs.RingLooks).Uint64("ring_looks_idle", rs.RingLooksIdle).
		Uint64("ring_scans", rs.RingScans).
		Msg("final runner counters")
	log.Info().Uint64("tx_frames", ps.TxFrames).Uint64("tx_dropped", ps.TxDropped).Uint64("tx_no_buffer", ps.TxNoBuffer).
		Uint64("rx_frames", ps.RxFrames).Uint64("rx_multi_seg", ps.RxMultiSeg).Uint64("alloc_fails", ps.AllocFails).
		Uint64("io_calls", ps.IOCalls).Uint64("tx_full_calls", ps.TxFullCalls).Uint64("handed_out", ps.HandedOut).Uint64("handed_in", ps.HandedIn).
		Uint64("handover_full", ps.HandOverFull).Msg("final port counters")
	if fault != nil {
		fs := faultStatsMsg(fault.Stats())
		log.Info().Interface("rx", fs.Rx).Interface("tx", fs.Tx).Uint64("held", fs.Held).
			Msg("final fault injection counters")
	}
}
