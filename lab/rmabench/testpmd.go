package main

// The testpmd setup: what a port type moves with no protocol on it, next
// to what the engine moves on it. dpdk-testpmd forwards 64-byte frames
// on the port types the engine runs on (io: rx burst straight back to tx,
// the frames untouched; macswap: the same, each frame's MAC addresses
// swapped, so every frame is touched once), and the engine runs 64 B
// READs on the same port type, its frame rate taken from its own
// counters. Their ratio is what the protocol (building, sealing, opening
// and answering every frame, the rings to the application) costs over
// the port itself.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/testbed"
)

// testpmdBin is DPDK's test application (Debian's dpdk-dev package, which
// scripts/setup.sh installs).
const testpmdBin = "dpdk-testpmd"

// testpmdRounds is how many interleaved rounds of each port type the
// testpmd setup runs.
const testpmdRounds = 3

// testpmdModes are the forwarding modes measured on each port type.
var testpmdModes = []string{"io", "macswap"}

// testpmdRun measures, for net_ring (one port whose tx is its rx, the
// loopback engine's) and memif (two processes on a memif wire, the memif
// setup's), testpmdRounds interleaved rounds of dpdk-testpmd in each of
// testpmdModes and of the engine's 64 B read_bw (O = 64) on the same
// port, each max(1 s, dur/testpmdRounds) long.
func testpmdRun(rmad, rmaperf, dir string, dur time.Duration, emit emitFunc) error {
	if _, err := exec.LookPath(testpmdBin); err != nil {
		return fmt.Errorf("%s not found (scripts/setup.sh installs dpdk-dev): %v", testpmdBin, err)
	}
	rmactl := filepath.Join(filepath.Dir(rmad), "rmactl")
	d := max(time.Second, dur/testpmdRounds)
	read64 := spec{"read_bw", 64, 64}
	for _, port := range []string{"net_ring", "memif"} {
		setup := "port-" + port
		var runs []func(emitFunc) error
		for _, mode := range testpmdModes {
			runs = append(runs, func(emit emitFunc) error {
				r, err := testpmdFwd(dir, port, mode, d)
				if err != nil {
					return err
				}
				emit(r)
				return nil
			})
		}
		runs = append(runs, func(emit emitFunc) error {
			return engineFrames(rmad, rmaperf, rmactl, dir, port, read64, d, setup, emit)
		})
		if err := interleavedRows(testpmdRounds, emit, runs...); err != nil {
			return err
		}
	}
	return nil
}

// engineFrames measures s on port's engine (net_ring: the loopback engine
// of benchLoopback; memif: the memif setup's two engines) for d and
// emits its row and a row of test rx-frames: the frames per second the
// measuring engine's port received, the row's ops/s times the frames it
// received per op completed over the run (its counters before and after,
// warm-up included).
func engineFrames(rmad, rmaperf, rmactl, dir, port string, s spec, d time.Duration, setup string, emit emitFunc) error {
	var (
		socket string
		run    func() (Row, error)
		stop   func()
	)
	switch port {
	case "net_ring":
		e, err := testbed.Start(benchLoopback(rmad, dir, "bench-tpmd-lo", "10.99.6.1", "1500"))
		if err != nil {
			return err
		}
		socket, stop = e.Socket, func() { e.Stop(10 * time.Second) }
		run = func() (Row, error) { return rmaperfRun(rmaperf, "0", s, d, setup, nil, "-socket", e.Socket, "-self") }
	case "memif":
		oa, ob := testbed.MemifPair(rmad, dir, "bench-tpmd-ma", "bench-tpmd-mb", "10.99.6.1", "10.99.6.2")
		p, err := startPinnedPair(rmaperf, oa, ob)
		if err != nil {
			return err
		}
		socket, stop = p.a.Socket, p.stop
		run = func() (Row, error) { return p.run(rmaperf, s, d, setup) }
	default:
		return fmt.Errorf("testpmd: no engine for port %q", port)
	}
	defer stop()
	before, err := engineStats(rmactl, socket)
	if err != nil {
		return err
	}
	r, err := run()
	if err != nil {
		return err
	}
	emit(r)
	after, err := engineStats(rmactl, socket)
	if err != nil {
		return err
	}
	rx, ops := after.RxFrames-before.RxFrames, completed(after)-completed(before)
	if ops == 0 {
		return fmt.Errorf("%s: the engine completed no op", setup)
	}
	perOp := float64(rx) / float64(ops)
	f := Row{System: "onerma", Setup: setup, Test: "rx-frames", Size: s.size, Outstanding: s.depth, Cores: 1,
		OpsPerSec: r.OpsPerSec * perOp, MBPerSec: r.MBPerSec, Ops: rx, Seconds: r.Seconds,
		Command: r.Command + "; " + rmactl + " stats -json before and after",
		Note: fmt.Sprintf("frames/s the engine's port received during %d B %s O=%d (%.0f ops/s): %d frames over %d ops completed = %.2f per op (engine counters, warm-up included)",
			s.size, s.test, s.depth, r.OpsPerSec, rx, ops, perOp)}
	if port == "memif" {
		f.Note += "; the client engine's (CPU 0, shared with the application)"
	}
	emit(f)
	return nil
}

// engineStats reads the counters of the engine at socket (rmactl stats).
func engineStats(rmactl, socket string) (*ctlmsg.Stats, error) {
	out, err := exec.Command(rmactl, "-socket", socket, "stats", "-json").Output()
	if err != nil {
		return nil, fmt.Errorf("%s stats: %v", rmactl, err)
	}
	var s ctlmsg.Stats
	if err := json.Unmarshal(out, &s); err != nil {
		return nil, fmt.Errorf("%s stats: %v", rmactl, err)
	}
	return &s, nil
}

// completed is how many ops the engine completed, whatever their status.
func completed(s *ctlmsg.Stats) uint64 {
	n := uint64(0)
	for _, v := range s.Completed {
		n += v
	}
	return n
}

// testpmdFwd runs dpdk-testpmd in forwarding mode mode on port for d and
// returns its row: net_ring, one process forwarding on CPU 1 (the
// loopback engine's); memif, two processes on the two ends of a memif
// wire, the server's forwarding on CPU 0 and the client's on CPU 1 (the
// memif engines'), the row the server's. Each sends 8 bursts of 32
// 64-byte frames first (tx_first), which then circulate; ops/s is the
// port's rx frames per second as testpmd reports it between two stats
// queries d apart.
func testpmdFwd(dir, port, mode string, d time.Duration) (Row, error) {
	var ps []*testpmd
	defer func() {
		for _, p := range ps {
			p.kill()
		}
	}()
	switch port {
	case "net_ring":
		p, err := startTestpmd("rmabench-tpmd-ring", 1, "net_ring0", mode)
		if err != nil {
			return Row{}, err
		}
		ps = append(ps, p)
	case "memif":
		sock := filepath.Join(dir, "tpmd.memif")
		os.Remove(sock)
		for i, role := range []string{"server", "client"} {
			p, err := startTestpmd("rmabench-tpmd-"+role, i, "net_memif0,role="+role+",id=0,socket="+sock+",socket-abstract=no", mode)
			if err != nil {
				return Row{}, err
			}
			ps = append(ps, p)
			if role == "server" {
				// A memif client that finds no socket does not retry.
				if err := p.waitFile(sock, 10*time.Second); err != nil {
					return Row{}, err
				}
			}
		}
	default:
		return Row{}, fmt.Errorf("testpmd: no port %q", port)
	}
	for _, p := range ps {
		if err := p.linkUp(10*time.Second, ps); err != nil {
			return Row{}, err
		}
	}
	for _, p := range ps {
		p.send("start tx_first 8")
	}
	time.Sleep(300 * time.Millisecond)
	for _, p := range ps {
		p.send("show port stats all")
	}
	time.Sleep(d)
	for _, p := range ps {
		p.send("show port stats all")
	}
	// The memif client stops and quits first, then the server: a memif
	// server stopped while its client still forwards may crash (DPDK
	// 22.11). A crash after the second stats query loses nothing: the
	// row counts it in its note.
	outs := make([]string, len(ps))
	crashed := 0
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].send("stop")
		ps[i].send("quit")
		out, err := ps[i].wait(10 * time.Second)
		if err != nil && len(rxPPS.FindAllStringSubmatch(out, -1)) < 2 {
			return Row{}, err
		}
		if err != nil {
			crashed++
		}
		outs[i] = out
	}
	pps := make([]float64, len(ps))
	for i, p := range ps {
		m := rxPPS.FindAllStringSubmatch(outs[i], -1)
		if len(m) < 2 {
			return Row{}, fmt.Errorf("%s: %d Rx-pps lines in its output, want 2:\n%s", p.name, len(m), outs[i])
		}
		pps[i], _ = strconv.ParseFloat(m[len(m)-1][1], 64)
	}
	note := "64-byte frames; one forwarding core; " + mode + " forwarding"
	if crashed > 0 {
		note += fmt.Sprintf("; %d testpmd process(es) crashed on the way out, after the stats", crashed)
	}
	if len(ps) == 2 {
		note += fmt.Sprintf("; the memif client's rx %.0f frames/s", pps[1])
	}
	return Row{System: "dpdk-testpmd", Setup: "port-" + port, Test: mode + "-fwd", Size: 64, Outstanding: 8 * 32, Cores: 1,
		OpsPerSec: pps[0], MBPerSec: pps[0] * 64 / 1e6, Seconds: d.Seconds(),
		Command: strings.Join(ps[0].cmd.Args, " ") + " (stdin: start tx_first 8; show port stats all; " + d.String() + " later show port stats all; stop; quit)",
		Note:    note}, nil
}

var rxPPS = regexp.MustCompile(`Rx-pps:\s+(\d+)`)

// testpmd is one interactive dpdk-testpmd process.
type testpmd struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	out   bytes.Buffer // stdout and stderr
	done  chan struct{}
	err   error // Wait's, once done is closed
}

// lockedOut appends to a testpmd's output under its lock.
type lockedOut struct{ p *testpmd }

func (w lockedOut) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

// startTestpmd starts dpdk-testpmd named name (its EAL file prefix) in
// interactive mode on the port vdev creates, forwarding in mode on CPU
// fwdCPU, its main lcore on the other CPU (where it waits for its
// commands), with a pool of 4096 mbufs (its default, sized for many
// ports and cores, takes 338 MB of hugepages).
func startTestpmd(name string, fwdCPU int, vdev, mode string) (*testpmd, error) {
	mem := []string{"--no-huge", "-m", "128"}
	if free, mounted := testbed.HugepagesFree(); mounted && free >= 48 {
		mem = []string{"-m", "64", "--huge-unlink"}
	}
	args := append([]string{"--no-pci", "--file-prefix=" + name, fmt.Sprintf("--lcores=0@%d,1@%d", 1-fwdCPU, fwdCPU)}, mem...)
	args = append(args, "--vdev="+vdev, "--", "-i", "--forward-mode="+mode, "--no-lsc-interrupt",
		"--total-num-mbufs=4096", "--txpkts=64", "--burst=32")
	// Line-buffered: testpmd prints with stdio, whose buffer a crash
	// would lose.
	p := &testpmd{name: name, cmd: exec.Command("stdbuf", append([]string{"-oL", testpmdBin}, args...)...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = lockedOut{p}, lockedOut{p}
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *testpmd) send(line string) { io.WriteString(p.stdin, line+"\n") }

func (p *testpmd) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// linkUp asks for the port's status until it is up (a memif port is up
// once its peer, one of all, connected); it fails early when one of all
// has exited.
func (p *testpmd) linkUp(timeout time.Duration, all []*testpmd) error {
	for t := time.Now(); time.Since(t) < timeout; time.Sleep(100 * time.Millisecond) {
		for _, q := range all {
			select {
			case <-q.done:
				return fmt.Errorf("%s exited: %v\n%s", q.name, q.err, q.output())
			default:
			}
		}
		if strings.Contains(p.output(), "Link status: up") {
			return nil
		}
		p.send("show port info 0")
	}
	return fmt.Errorf("%s: port not up after %v:\n%s", p.name, timeout, p.output())
}

// waitFile waits until path exists (the memif server's socket).
func (p *testpmd) waitFile(path string, timeout time.Duration) error {
	for t := time.Now(); time.Since(t) < timeout; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.output())
		default:
		}
	}
	return fmt.Errorf("%s: no %s after %v:\n%s", p.name, path, timeout, p.output())
}

// wait waits for the process to exit (after quit) and returns its output,
// and an error if it did not exit within timeout or not with status 0.
func (p *testpmd) wait(timeout time.Duration) (string, error) {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return p.output(), fmt.Errorf("%s did not quit within %v:\n%s", p.name, timeout, p.output())
	}
	if p.err != nil {
		return p.output(), fmt.Errorf("%s: %v\n%s", p.name, p.err, p.output())
	}
	return p.output(), nil
}

// kill ends the process if it still runs and waits for it.
func (p *testpmd) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.stdin.Close()
	p.cmd.Process.Kill()
	<-p.done
}

// testpmdRatio is, for one port and forwarding mode, the engine's rx
// frames per second and testpmd's of each round, and their ratios.
type testpmdRatio struct {
	setup, mode string
	eng, fwd    []float64
	ratios      []float64
}

// testpmdRatios returns each port's engine / testpmd ratios by round, in
// the order the ports ran.
func testpmdRatios(rows []Row) []testpmdRatio {
	type key struct{ setup, test string }
	by := map[key][]float64{}
	var setups []string
	for _, r := range rows {
		if !strings.HasPrefix(r.Setup, "port-") || (r.System != "dpdk-testpmd" && r.Test != "rx-frames") {
			continue
		}
		k := key{r.Setup, r.Test}
		if len(by[k]) == 0 && r.Test == "rx-frames" {
			setups = append(setups, r.Setup)
		}
		by[k] = append(by[k], r.OpsPerSec)
	}
	var out []testpmdRatio
	for _, s := range setups {
		eng := by[key{s, "rx-frames"}]
		for _, mode := range testpmdModes {
			t := by[key{s, mode + "-fwd"}]
			if len(t) != len(eng) {
				continue
			}
			ratios := make([]float64, len(t))
			for i := range t {
				ratios[i] = eng[i] / max(t[i], 1)
			}
			out = append(out, testpmdRatio{s, mode, eng, t, ratios})
		}
	}
	return out
}

// printTestpmd prints, for each port, the median over the rounds of the
// engine's rx frames per second against dpdk-testpmd's, in each mode.
func printTestpmd(rows []Row) {
	for _, t := range testpmdRatios(rows) {
		fmt.Printf("%s: engine rx frames/s in 64 B read_bw (median %.0f) / dpdk-testpmd %s-fwd (median %.0f), %d interleaved rounds: median %.4f (ratios %s)\n",
			t.setup, median(t.eng), t.mode, median(t.fwd), len(t.ratios), median(t.ratios), ratioListPrec(t.ratios, 4))
	}
}
