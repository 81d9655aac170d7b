// Command rmatop shows a running engine's delays live: log2 histograms of
// total, remote and issue delay per op type and completion status, like the
// BCC tools biolatency and runqlat, over the whole engine, and each polling
// core's completions, throughput and total delay beside them. It loads a BPF program into the kernel
// and attaches it as a uprobe to the engine's telemetry hook
// (engine/telemetry.Hook), which rmad calls once per batch of 256
// completions or per millisecond, never per op: the engine runs at full
// speed while it is watched, and at no cost when it is not.
//
//	rmatop                       the one rmad running, every second
//	rmatop -pid 1234 -interval 5s -count 3 -delays total,remote,issue
//	rmatop -json                 one JSON object per interval
//
// Needs root (CAP_BPF, CAP_PERFMON).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry/probe"
	"github.com/onerma/onerma/internal/cli"
)

func main() {
	cli.Exit("rmatop", run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	pid        int
	exe        string
	interval   time.Duration
	count      int
	kinds      []probe.Kind
	json       bool
	cumulative bool
}

func parse(args []string, stderr io.Writer) (*options, error) {
	fs := cli.New("rmatop", "rmatop [-pid PID] [-exe PATH] [-interval DURATION] [-count N] [-delays total,remote,issue] [-json] [-cumulative]")
	fs.Notes("Needs root (CAP_BPF, CAP_PERFMON).")
	fs.Example("rmatop", "rmatop -pid 1234 -interval 5s -count 3 -delays total,remote,issue", "rmatop -json")
	fs.SetOutput(stderr)
	o := &options{}
	delays := "total"
	fs.IntVar(&o.pid, "pid", 0, "engine process (default: the one process whose executable is named rmad)")
	fs.StringVar(&o.exe, "exe", "", "the engine's executable (default: /proc/PID/exe, which still names it when its file was replaced or deleted)")
	fs.DurationVar(&o.interval, "interval", time.Second, "print every interval")
	fs.IntVar(&o.count, "count", 0, "stop after this many intervals (0: until interrupted or the engine exits)")
	fs.StringVar(&delays, "delays", delays, "histograms to show, comma-separated: total, remote (total - issue), issue")
	fs.BoolVar(&o.json, "json", false, "print one JSON object per interval")
	fs.BoolVar(&o.cumulative, "cumulative", false, "show totals since start, not each interval's")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case o.interval <= 0:
		return nil, fmt.Errorf("-interval %v: want a positive duration", o.interval)
	case o.count < 0:
		return nil, fmt.Errorf("-count %d: want 0 (until interrupted) or more", o.count)
	case o.pid < 0:
		return nil, fmt.Errorf("-pid %d: want a process id, or 0 (the one rmad)", o.pid)
	}
	for _, d := range strings.Split(delays, ",") {
		switch strings.TrimSpace(d) {
		case "total":
			o.kinds = append(o.kinds, probe.Total)
		case "remote":
			o.kinds = append(o.kinds, probe.Remote)
		case "issue":
			o.kinds = append(o.kinds, probe.Issue)
		default:
			return nil, fmt.Errorf("-delays: unknown delay %q (total, remote, issue)", d)
		}
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if o.pid == 0 {
		if o.pid, err = findEngine(); err != nil {
			return err
		}
	}
	shown := o.exe
	if o.exe == "" {
		o.exe = fmt.Sprintf("/proc/%d/exe", o.pid)
		if shown, err = os.Readlink(o.exe); err != nil {
			return fmt.Errorf("engine process %d: %w", o.pid, err)
		}
	}
	p, err := probe.Attach(o.exe, o.pid)
	if err != nil {
		return err
	}
	defer p.Close()
	first, err := p.Snapshot()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "rmatop: tracing engine %d (%s)\n", o.pid, shown)
	if !o.json {
		fmt.Fprintf(stdout, "Tracing engine %d: the delays of every completion. Ctrl-C to end.\n", o.pid)
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	prev, prevAt, start := first, time.Now(), time.Now()
	for n := 0; o.count == 0 || n < o.count; n++ {
		last := false
		select {
		case <-tick.C:
		case <-sig:
			last = true
		}
		gone := syscall.Kill(o.pid, 0) == syscall.ESRCH
		now := time.Now()
		cur, err := p.Snapshot()
		if err != nil {
			return err
		}
		base, since := prev, prevAt
		if o.cumulative {
			base, since = first, start
		}
		r := report(now, now.Sub(since), o.pid, cur.Sub(base), o.kinds)
		if o.json {
			if err := json.NewEncoder(stdout).Encode(r); err != nil {
				return err
			}
		} else {
			r.print(stdout)
		}
		prev, prevAt = cur, now
		if gone {
			fmt.Fprintf(stderr, "rmatop: engine %d exited\n", o.pid)
			return nil
		}
		if last {
			return nil
		}
	}
	return nil
}

// findEngine returns the pid of the one process whose executable is named
// rmad.
func findEngine() (int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", d.Name(), "exe")); err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "rmad" {
			pids = append(pids, pid)
		}
	}
	switch len(pids) {
	case 0:
		return 0, errors.New("no rmad process found: give -pid")
	case 1:
		return pids[0], nil
	}
	return 0, fmt.Errorf("%d rmad processes (%v): give -pid", len(pids), pids)
}

// Report is one interval, as printed (and as -json encodes it).
type Report struct {
	Time       time.Time `json:"time"`
	IntervalS  float64   `json:"interval_s"`
	PID        int       `json:"pid"`
	Batches    uint64    `json:"batches"` // hook calls (uprobe hits)
	Samples    uint64    `json:"samples"` // completions
	ReadErrors uint64    `json:"read_errors"`
	OutOfRange uint64    `json:"out_of_range"`
	// Bytes moved by OK completions, by op name.
	Bytes map[string]uint64 `json:"bytes"`
	Hist  []Hist            `json:"hist"`
	// Cores are each engine core's share, by core (the hook names the
	// core of every batch).
	Cores []CoreReport `json:"cores"`
}

// CoreReport is one core's share of an interval: its batches and
// completions, its OK bytes by op, and its total delay by op (every
// status).
type CoreReport struct {
	Core    int               `json:"core"`
	Batches uint64            `json:"batches"`
	Samples uint64            `json:"samples"`
	Bytes   map[string]uint64 `json:"bytes"`
	Total   []Hist            `json:"total"` // Status "ALL"
}

// Hist is one histogram: its op, status and delay, its count, upper bounds
// of its quantiles, and its log2 buckets (bucket 0: 0 ns; bucket b:
// [2^(b-1), 2^b) ns).
type Hist struct {
	Op      string   `json:"op"`
	Status  string   `json:"status"`
	Delay   string   `json:"delay"`
	Count   uint64   `json:"count"`
	P50Ns   uint64   `json:"p50_ns"`
	P99Ns   uint64   `json:"p99_ns"`
	P999Ns  uint64   `json:"p999_ns"`
	Buckets []uint64 `json:"buckets"`
}

func report(now time.Time, d time.Duration, pid int, s *probe.Snapshot, kinds []probe.Kind) *Report {
	r := &Report{
		Time: now.UTC(), IntervalS: d.Seconds(), PID: pid,
		Batches: s.Calls, Samples: s.Samples, ReadErrors: s.ReadErrors, OutOfRange: s.OutOfRange,
		Bytes: map[string]uint64{},
	}
	for op, b := range s.Bytes {
		if b != 0 {
			r.Bytes[abi.Op(op).String()] = b
		}
	}
	keys := make([]probe.Key, 0, len(s.Hist))
	for k := range s.Hist {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Op != b.Op {
			return a.Op < b.Op
		}
		if a.Status != b.Status {
			return a.Status < b.Status
		}
		return a.Kind < b.Kind
	})
	for _, k := range keys {
		if !slices.Contains(kinds, k.Kind) {
			continue
		}
		r.Hist = append(r.Hist, hist(abi.Op(k.Op).String(), abi.Status(k.Status).String(), k.Kind.String(), s.Hist[k]))
	}
	cores := make([]int, 0, len(s.Cores))
	for k := range s.Cores {
		cores = append(cores, k)
	}
	sort.Ints(cores)
	for _, k := range cores {
		c := s.Cores[k]
		cr := CoreReport{Core: k, Batches: c.Calls, Samples: c.Samples, Bytes: map[string]uint64{}}
		for op := range probe.NumOps {
			if c.Bytes[op] != 0 {
				cr.Bytes[abi.Op(op).String()] = c.Bytes[op]
			}
			if h := &c.Total[op]; h.Count() > 0 {
				cr.Total = append(cr.Total, hist(abi.Op(op).String(), "ALL", probe.Total.String(), h))
			}
		}
		r.Cores = append(r.Cores, cr)
	}
	return r
}

// hist is h as reported.
func hist(op, status, delay string, h *probe.Histogram) Hist {
	return Hist{Op: op, Status: status, Delay: delay,
		Count: h.Count(), P50Ns: h.Quantile(0.5), P99Ns: h.Quantile(0.99), P999Ns: h.Quantile(0.999), Buckets: h[:]}
}

// print writes r as text: a summary line, then each histogram with a bar
// per non-empty bucket range (from the first to the last non-empty one).
func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\n%s  engine %d  %d completions in %d batches over %.2fs",
		r.Time.Local().Format("15:04:05"), r.PID, r.Samples, r.Batches, r.IntervalS)
	if r.ReadErrors+r.OutOfRange > 0 {
		fmt.Fprintf(w, "  (not shown: %d batches unreadable, %d samples out of range)", r.ReadErrors, r.OutOfRange)
	}
	fmt.Fprintln(w)
	ops := make([]string, 0, len(r.Bytes))
	for op := range r.Bytes {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		fmt.Fprintf(w, "  %s OK: %.1f MB/s\n", op, float64(r.Bytes[op])/r.IntervalS/1e6)
	}
	if len(r.Cores) > 1 || len(r.Cores) == 1 && r.Cores[0].Core != 0 {
		for _, c := range r.Cores {
			fmt.Fprintf(w, "  core %d: %d completions in %d batches", c.Core, c.Samples, c.Batches)
			for _, h := range c.Total {
				fmt.Fprintf(w, "; %s %.1f MB/s, total delay p50 < %s, p99 < %s", h.Op, float64(c.Bytes[h.Op])/r.IntervalS/1e6, ns(h.P50Ns), ns(h.P99Ns))
			}
			fmt.Fprintln(w)
		}
	}
	for _, h := range r.Hist {
		fmt.Fprintf(w, "\nop = %s, status = %s: %s delay, %d ops, p50 < %s, p99 < %s\n",
			h.Op, h.Status, h.Delay, h.Count, ns(h.P50Ns), ns(h.P99Ns))
		lo, hi := -1, -1
		var most uint64
		for b, c := range h.Buckets {
			if c > 0 {
				if lo < 0 {
					lo = b
				}
				hi = b
				most = max(most, c)
			}
		}
		fmt.Fprintf(w, "%24s : %-9s %s\n", "ns", "count", "distribution")
		for b := lo; b >= 0 && b <= hi; b++ {
			from, to := probe.BucketRange(b)
			c := h.Buckets[b]
			bar := int(c * 40 / most)
			fmt.Fprintf(w, "%10d -> %-10d : %-9d |%-40s|\n", from, to-1, c, strings.Repeat("*", bar))
		}
	}
}

func ns(v uint64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3gs", float64(v)/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3gms", float64(v)/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gµs", float64(v)/1e3)
	}
	return fmt.Sprintf("%dns", v)
}
