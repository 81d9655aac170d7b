package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/testbed"
)

// The noisy-neighbour setups (issue 28): a victim tenant's read latency on
// an engine alone (noisy-neighbour-alone) and beside a hostile tenant
// (noisy-neighbour), in interleaved rounds.
//
// The engine is the loopback engine of the loopback setups (net_ring, busy
// on CPU 1, rmad's defaults: a 256 KB solicitation window, equal tenant
// weights), which is both initiator and server of every op: each tenant
// reads and writes regions its own processes own on the same engine. So
// the hostile tenant contends with the victim for everything issue 28
// bounds at once: the solicitation window of the initiating side, and the
// inbound queue, the pull contexts and the replay windows of the serving
// side, all on one polling core (two engines over memif would spread the
// two sides over two cores, each shared with the applications and the
// other engine's threads; the memif setup's unloaded p99 is the
// scheduler's, milliseconds).
//
// The two tenants are two unprivileged uids on the engine's main socket,
// each a tenant of its own (the engine's passwd file names both; rmad's
// default weights, equal): the victim, uid 2012, and the hostile tenant,
// uid 2011. Both ask for the low class: only the engine's tenant shares
// and per-owner bounds stand between them.
//
//   - The victim: rmaperf read_lat, 64 B and 4 KB, from its own region
//     (-self), busy-polling CPU 0 and yielding it after every empty poll
//     (as the isolation setup's latency application). Its tenant is kept
//     active for the whole setup by an rmaperf server of the same uid
//     (which posts nothing), so its data-path counters add up across
//     runs and each row's note gives what moved during it.
//   - The hostile tenant: four rmaperf processes on CPU 0, each on a
//     portal of its own and sleeping on its completion doorbell: 4 KB
//     READs and 64 B READs of its own region and 4 KB WRITEs to it, 64 in
//     flight each (the window, the inbound queue, the pulls), and 64 4 KB
//     READs toward nnDeadIP, an address the engine has a static neighbour
//     entry for and nobody answers (each op holds window until TIMEOUT).
//     They run in a cgroup of their own whose CPU bandwidth is limited to
//     nnCPUMax, so they take at most a fifth of CPU 0 from the victim,
//     however hard they drive the engine: what the rows compare is the
//     engine's work for the hostile tenant, not the share of the CPU its
//     processes would get. Their rows are recorded too (setup
//     noisy-neighbour, tests read_bw and write_bw), and the victim's rows
//     carry the engine's own latency (eng_p99_us) beside the
//     application's.
//
// A round is the victim alone (64 B, then 4 KB) and beside the hostile
// tenant (started, given nnLead to load the engine, then the victim's
// two measurements while it runs); odd rounds run backwards (interleaved).
// Target: the victim's p99 beside the hostile tenant at most nnGoal times
// its p99 alone, the median of the rounds' ratios (noisyRatios).
const (
	nnVictimUID  = 2012
	nnHostileUID = 2011
	nnIP         = "10.99.7.1"
	nnDeadIP     = "10.99.7.99"
	nnDeadMAC    = "02:00:0a:63:07:63"
	// nnCPUMax is the hostile group's CPU bandwidth, in cpu.max's syntax:
	// 20 ms of CPU time in every 100 ms period, a fifth of one CPU
	// between its four processes (the victim's CPU keeps four fifths at
	// least). Once the group has used the quota up, its processes wait
	// for the next period.
	nnCPUMax = "20000 100000"
	nnCgroup = "onerma-bench-noisy-neighbour"
	nnLead   = 1500 * time.Millisecond // the hostile processes' start-up and 0.5 s warm-up
	nnGoal   = 2.0
)

// nnRounds is how many interleaved rounds the setups run (-nn-rounds).
var nnRounds = 5

// nnEngineArgs are more rmad flags for the setups' engine
// (-nn-engine-args).
var nnEngineArgs []string

// nnSizes are the victim's READ sizes.
var nnSizes = []int{64, 4096}

// nnHostile are the hostile tenant's processes.
var nnHostile = []struct {
	what string
	s    spec
	args []string
}{
	{"64 4 KB READs of its own region", spec{"read_bw", 4096, 64}, nil},
	{"64 64 B READs of its own region", spec{"read_bw", 64, 64}, nil},
	{"64 4 KB WRITEs to its own region", spec{"write_bw", 4096, 64}, nil},
	{"64 4 KB READs toward " + nnDeadIP + ", which nobody answers", spec{"read_bw", 4096, 64}, []string{"-dst", nnDeadIP}},
}

// nnConfig is the engine's config overlay: the static neighbour with
// nobody behind it, and the passwd file that makes each uid a tenant.
const nnConfig = `{"engine": {"neighbors": [{"ip": %q, "mac": %q}]},
 "ctl": {"passwd_file": %q, "subuid_file": ""}}
`

// nnPasswd names the two tenants' uids.
var nnPasswd = fmt.Sprintf("root:x:0:0::/root:/bin/sh\nnn-hostile:x:%d:%d::/:/usr/sbin/nologin\nnn-victim:x:%d:%d::/:/usr/sbin/nologin\n",
	nnHostileUID, nnHostileUID, nnVictimUID, nnVictimUID)

// nnTenant is the engine's name of the tenant of uid on its main socket.
func nnTenant(uid int) string { return fmt.Sprintf("main uid %d", uid) }

// asUID are the process attributes of a child running as uid (and gid
// uid), killed if rmabench dies.
func asUID(uid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}, Pdeathsig: syscall.SIGKILL}
}

// nnBench is the setups' engine, processes and cgroup.
type nnBench struct {
	rmaperf, orig string // the copy of rmaperf every uid may run, and -bin's
	rmactl        string
	e             *testbed.Engine
	group         *cpuGroup
	d             time.Duration // each victim measurement
}

// noisyRun runs the noisy-neighbour setups: nnRounds interleaved rounds,
// each victim measurement max(1 s, dur/2) long.
func noisyRun(rmad, rmaperf string, dur time.Duration, emit emitFunc) (err error) {
	cgRoot, v2, err := cpuCgroupRoot("/sys/fs/cgroup")
	if err != nil {
		return err
	}
	// Every uid must reach the engine's socket and run rmaperf: a
	// directory of the setup's own, which all may enter.
	ndir, err := os.MkdirTemp("", "onerma-bench-nn-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ndir)
	if err := os.Chmod(ndir, 0o755); err != nil {
		return err
	}
	b := &nnBench{rmaperf: filepath.Join(ndir, "rmaperf"), orig: rmaperf, rmactl: filepath.Join(filepath.Dir(rmad), "rmactl"), d: max(time.Second, dur/2)}
	if bin, err := os.ReadFile(rmaperf); err != nil || os.WriteFile(b.rmaperf, bin, 0o755) != nil {
		return fmt.Errorf("copying %s to %s: %v", rmaperf, b.rmaperf, err)
	}
	passwd, cfg := filepath.Join(ndir, "passwd"), filepath.Join(ndir, "rmad.json")
	if err := os.WriteFile(passwd, []byte(nnPasswd), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, fmt.Appendf(nil, nnConfig, nnDeadIP, nnDeadMAC, passwd), 0o644); err != nil {
		return err
	}

	// The hostile tenant's group, removed (its processes killed) however
	// the setup ends: returning, or rmabench interrupted or terminated
	// meanwhile, when the setup's directory goes too and the signal then
	// ends rmabench (the engine and the victim's processes die with it:
	// Pdeathsig). A group left by a run killed outright is removed by the
	// next run's newCPUGroup.
	if b.group, err = newCPUGroup(cgRoot, v2, nnCgroup, nnCPUMax); err != nil {
		return fmt.Errorf("the hostile tenant's cgroup: %w", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	stopSig := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			b.group.remove()
			os.RemoveAll(ndir)
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			syscall.Kill(os.Getpid(), s.(syscall.Signal))
		case <-stopSig:
		}
	}()
	defer func() {
		signal.Stop(sig)
		close(stopSig)
		if rerr := b.group.remove(); err == nil && rerr != nil {
			err = rerr
		}
	}()
	fmt.Printf("noisy-neighbour: the hostile tenant's processes in %s, CPU bandwidth %s (%s)\n", b.group.dir, nnCPUMax, map[bool]string{true: "cgroup v2 cpu.max", false: "cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us"}[v2])

	if b.e, err = testbed.Start(benchLoopback(rmad, ndir, "bench-nn", nnIP, "1500", append([]string{"-config", cfg}, nnEngineArgs...)...)); err != nil {
		return err
	}
	defer b.e.Stop(10 * time.Second)
	// The victim's tenant, active for the whole setup.
	keeper, err := startPerfServerAttr(b.rmaperf, b.e.Socket, asUID(nnVictimUID), "-name", "nn-victim-keeper")
	if err != nil {
		return err
	}
	defer keeper.stop()
	if err := b.wantTenant(nnVictimUID); err != nil {
		return err
	}
	return interleavedRows(nnRounds, emit, b.alone, b.beside)
}

// wantTenant checks that the engine counts uid's processes as the tenant
// of that uid (not as the socket's other uids), data path counters and
// all.
func (b *nnBench) wantTenant(uid int) error {
	st, err := engineStats(b.rmactl, b.e.Socket)
	if err != nil {
		return err
	}
	if t := findTenant(st, nnTenant(uid)); t == nil || t.Datapath == nil {
		var names []string
		for _, t := range st.Tenants {
			names = append(names, t.Name)
		}
		return fmt.Errorf("noisy-neighbour: no active tenant %q on the engine (tenants %q)", nnTenant(uid), names)
	}
	return nil
}

func findTenant(st *ctlmsg.Stats, name string) *ctlmsg.TenantStats {
	for i := range st.Tenants {
		if st.Tenants[i].Name == name {
			return &st.Tenants[i]
		}
	}
	return nil
}

// alone measures the victim with no other tenant on the engine.
func (b *nnBench) alone(emit emitFunc) error {
	for _, size := range nnSizes {
		r, err := b.victim(size, "noisy-neighbour-alone", nil)
		if err != nil {
			return err
		}
		emit(r)
	}
	return nil
}

// nnProc is one of the hostile tenant's processes.
type nnProc struct {
	what string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func (p *nnProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// beside starts the hostile tenant's processes, measures the victim
// while they run, and records their rows once they end.
func (b *nnBench) beside(emit emitFunc) error {
	// Long enough for the lead and each victim measurement with its
	// start-up, warm-up and counters; the victim's rows are refused if
	// a hostile process ended first.
	hd := nnLead + time.Duration(len(nnSizes))*(b.d+2*time.Second)
	var procs []*nnProc
	defer func() { // on every path: none left running
		for _, p := range procs {
			if !p.exited() {
				p.cmd.Process.Kill()
			}
			<-p.done
		}
	}()
	for i, h := range nnHostile {
		args := append([]string{"-socket", b.e.Socket, "-self", "-name", fmt.Sprintf("nn-hostile-%d", i), "-event", "-spins=-1"}, h.args...)
		cmd, closeAfter, err := rmaperfCmd(b.rmaperf, "0", h.s, hd, "noisy-neighbour", nil, args...)
		if err != nil {
			return err
		}
		closeAfter()
		cmd.SysProcAttr = asUID(nnHostileUID)
		p := &nnProc{what: h.what, cmd: cmd, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = &p.out, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, p)
		go func() { p.err = cmd.Wait(); close(p.done) }()
		// Into the group before its warm-up begins: the limit holds for
		// all it does that counts.
		if err := b.group.add(cmd.Process.Pid); err != nil {
			return fmt.Errorf("moving hostile process %d into %s: %w", cmd.Process.Pid, b.group.dir, err)
		}
	}
	time.Sleep(nnLead)
	if err := b.wantTenant(nnHostileUID); err != nil {
		return err
	}
	for _, size := range nnSizes {
		r, err := b.victim(size, "noisy-neighbour", procs)
		if err != nil {
			return err
		}
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("noisy-neighbour: the hostile process doing %s ended before the victim's %d B measurement did (%v): raise its duration", p.what, size, p.err)
			}
		}
		emit(r)
	}
	for _, p := range procs {
		<-p.done
		if p.err != nil {
			return fmt.Errorf("%s: %v", strings.Join(p.cmd.Args, " "), p.err)
		}
		r, err := rmaperfRow(p.cmd, p.out.Bytes(), "noisy-neighbour")
		if err != nil {
			return err
		}
		b.command(&r, nnHostileUID)
		r.Note = addNote(r.Note, fmt.Sprintf("hostile tenant (uid %d), one of %d processes in a cgroup limited to cpu.max %s: %s", nnHostileUID, len(procs), nnCPUMax, p.what))
		emit(r)
	}
	return nil
}

// victim measures the victim's read_lat of size, rows of setup; hostile
// are the hostile tenant's processes running meanwhile (nil: none). The
// row's note says what moved of the tenants' and the engine's counters
// during the run, and what the hostile group got of the CPU.
func (b *nnBench) victim(size int, setup string, hostile []*nnProc) (Row, error) {
	before, err := engineStats(b.rmactl, b.e.Socket)
	if err != nil {
		return Row{}, err
	}
	g0, t0 := b.groupStat(), time.Now()
	cmd, closeAfter, err := rmaperfCmd(b.rmaperf, "0", spec{"read_lat", size, 1}, b.d, setup, nil,
		"-socket", b.e.Socket, "-self", "-name", "nn-victim", "-yield")
	if err != nil {
		return Row{}, err
	}
	closeAfter()
	cmd.SysProcAttr = asUID(nnVictimUID)
	r, err := rmaperfOutput(cmd, setup)
	if err != nil {
		return Row{}, err
	}
	g1, t1 := b.groupStat(), time.Now()
	after, err := engineStats(b.rmactl, b.e.Socket)
	if err != nil {
		return Row{}, err
	}
	b.command(&r, nnVictimUID)
	var note string
	if hostile == nil {
		note = fmt.Sprintf("victim tenant (uid %d) alone on the loopback engine (busy on CPU 1%s), busy-polling CPU 0 and yielding it", nnVictimUID, b.engineArgs())
	} else {
		note = fmt.Sprintf("victim tenant (uid %d) on the loopback engine (busy on CPU 1%s), busy-polling CPU 0 and yielding it, beside the hostile tenant (uid %d: %d processes on CPU 0 in a cgroup limited to cpu.max %s",
			nnVictimUID, b.engineArgs(), nnHostileUID, len(hostile), nnCPUMax)
		if g0 != nil && g1 != nil {
			note += "; meanwhile it got " + g1.since(*g0, t1.Sub(t0))
		}
		note += ")"
	}
	tenants := [][2]string{{"victim", nnTenant(nnVictimUID)}}
	if hostile != nil {
		tenants = append(tenants, [2]string{"hostile", nnTenant(nnHostileUID)})
	}
	r.Note = addNote(r.Note, note+"; counters that moved (rmactl stats, before and after the run): "+movedCounters(before, after, tenants))
	return r, nil
}

// engineArgs names -nn-engine-args for a row's note ("" without).
func (b *nnBench) engineArgs() string {
	if len(nnEngineArgs) == 0 {
		return ""
	}
	return nnArgsMark + strings.Join(nnEngineArgs, " ")
}

// nnArgsMark begins, in a row's note, the engine's flags beyond the
// setup's (-nn-engine-args).
const nnArgsMark = "; rmad "

// groupStat is the hostile group's cpu.stat now (nil if unreadable).
func (b *nnBench) groupStat() *cpuStat {
	s, err := b.group.stat()
	if err != nil {
		return nil
	}
	return &s
}

// command makes r's command, of a process that ran as uid, the one a
// reader can run: -bin's rmaperf, as that uid.
func (b *nnBench) command(r *Row, uid int) {
	r.Command = fmt.Sprintf("%s (as uid %d)", strings.Replace(r.Command, b.rmaperf, b.orig, 1), uid)
}

// nnEngineCounters are the engine-wide counters movedCounters reports: the
// serving side's refusals and what bounded them, and the completion
// doorbells rung (and held back) for the processes that sleep on them.
var nnEngineCounters = []string{"req_nacked", "req_nacked_owner", "req_nacked_sender", "sender_overflow",
	"pulls_deferred_owner", "pulls_deferred_sender", "req_expired", "pulls_expired", "rx_dropped", "tx_no_buffer",
	"replay_lanes_refused", "req_iv_mismatch", "doorbells", "doorbells_deferred"}

// nnGauges are the data path's gauges: not counters, left out.
var nnGauges = map[string]bool{"window_held": true, "window_share": true, "queued": true}

// movedCounters lists, for each tenant (label, name), its data-path
// counters that grew from before to after, then the engine's
// (nnEngineCounters) and its completions by status other than OK:
// "victim: posted +10, share_waits +2; hostile: ...; engine: req_nacked
// +5, TIMEOUT +64".
func movedCounters(before, after *ctlmsg.Stats, tenants [][2]string) string {
	var parts []string
	for _, t := range tenants {
		var d0, d1 ctlmsg.TenantDatapath
		if ts := findTenant(before, t[1]); ts != nil && ts.Datapath != nil {
			d0 = *ts.Datapath
		}
		if ts := findTenant(after, t[1]); ts != nil && ts.Datapath != nil {
			d1 = *ts.Datapath
		}
		parts = append(parts, t[0]+": "+orNone(grown(&d0, &d1, nil, nnGauges)))
	}
	eng := grown(before, after, nnEngineCounters, nil)
	for _, st := range slices.Sorted(maps.Keys(after.Completed)) {
		if d := after.Completed[st] - before.Completed[st]; st != "OK" && d > 0 {
			eng = append(eng, fmt.Sprintf("%s +%d", st, d))
		}
	}
	parts = append(parts, "engine: "+orNone(eng))
	return strings.Join(parts, "; ")
}

func orNone(v []string) string {
	if len(v) == 0 {
		return "none"
	}
	return strings.Join(v, ", ")
}

// grown lists "name +delta" for each uint64 field of *before and *after
// (the same struct type), named by its JSON key, that grew: those of only
// when only is not nil, in its order, else every field but skip's.
func grown(before, after any, only []string, skip map[string]bool) []string {
	bv, av := reflect.ValueOf(before).Elem(), reflect.ValueOf(after).Elem()
	byKey := map[string]int{}
	var keys []string
	for i := range bv.NumField() {
		f := bv.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type.Kind() != reflect.Uint64 || key == "" || key == "-" || skip[key] {
			continue
		}
		byKey[key] = i
		keys = append(keys, key)
	}
	if only != nil {
		keys = only
	}
	var out []string
	for _, k := range keys {
		i, ok := byKey[k]
		if !ok {
			continue
		}
		if b, a := bv.Field(i).Uint(), av.Field(i).Uint(); a > b {
			out = append(out, fmt.Sprintf("%s +%d", k, a-b))
		}
	}
	return out
}

// nnSummary is what the noisy-neighbour rows of one size give, a value per
// round: the victim's p99 alone and beside the hostile tenant (µs), their
// ratio, and the ratio of the engine's own p99 (eng_p99_us) where both
// rows have it.
type nnSummary struct {
	alone, beside, ratios, engRatios []float64
}

// noisyRatios pairs, in the order they were measured, the k-th
// noisy-neighbour-alone row of the victim's read_lat of size with the
// k-th noisy-neighbour row: a pair per round (each round measures one of
// each, whichever first).
func noisyRatios(rows []Row, size int) (nnSummary, bool) {
	var alone, beside []*Row
	for i := range rows {
		r := &rows[i]
		if r.System != "onerma" || r.Test != "read_lat" || r.Size != size || r.P99us == nil || *r.P99us <= 0 {
			continue
		}
		switch r.Setup {
		case "noisy-neighbour-alone":
			alone = append(alone, r)
		case "noisy-neighbour":
			beside = append(beside, r)
		}
	}
	var s nnSummary
	for k := range min(len(alone), len(beside)) {
		a, b := alone[k], beside[k]
		s.alone, s.beside = append(s.alone, *a.P99us), append(s.beside, *b.P99us)
		s.ratios = append(s.ratios, *b.P99us / *a.P99us)
		if a.EngP99us != nil && b.EngP99us != nil && *a.EngP99us > 0 {
			s.engRatios = append(s.engRatios, *b.EngP99us / *a.EngP99us)
		}
	}
	return s, len(s.ratios) > 0
}

// printNoisy prints each size's noisy-neighbour ratios.
func printNoisy(rows []Row) {
	for _, size := range nnSizes {
		s, ok := noisyRatios(rows, size)
		if !ok {
			continue
		}
		fmt.Printf("noisy-neighbour: victim %d B read_lat p99 beside the hostile tenant / alone, %d interleaved rounds: median %.2f (ratios %s; p99 alone %s us, beside %s us) (target <= %.0f)",
			size, len(s.ratios), median(s.ratios), ratioList(s.ratios), ratioList(s.alone), ratioList(s.beside), nnGoal)
		if len(s.engRatios) > 0 {
			fmt.Printf("; the engine's own p99: median %.2f (ratios %s)", median(s.engRatios), ratioList(s.engRatios))
		}
		fmt.Println()
	}
}
