package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// The memory check. An engine's own memory is its anonymous memory
// (smaps_rollup's Anonymous: the Go heap and the runtime's other memory,
// C's malloc, thread stacks; not the tenants' shared memory, which it
// maps but does not own, nor its binary's pages, nor the EAL's huge
// pages). It is sampled per incarnation (a restarted engine starts
// over) with the Go runtime's figures from the engine's metrics page,
// and judged after the incarnation's warm-up (rssWarm):
//
//   - Ceiling: the anonymous memory never exceeds its value at the end
//     of the warm-up by more than memCeiling, in any run.
//   - Trend: over the second half of the incarnation's life after its
//     warm-up, when that half spans trendSpan or more, the least-squares
//     slopes of the Go live heap (what the last collection marked) and
//     of the anonymous memory beyond the Go heap's pages (anonymous
//     memory minus the heap pages the runtime holds from the OS,
//     heap_sys - heap_released) are each at most trendBound per hour.
//
// Why those two and not the anonymous memory itself: a settled Go heap
// holds pages between its live size and about 1.1 times its goal (twice
// the live heap; the scavenger's retainExtraPercent): garbage between
// collections, and free pages the background scavenger returns to the
// OS a few at a time and the allocator takes back. The anonymous memory swings by a MB or more over
// minutes with them, which over a window of minutes tilts its slope by
// tens of MB an hour either way. A leak in the Go heap shows in the live
// heap, which does not swing; a leak outside it (C, threads, the
// runtime's own structures) shows in the rest, which the heap's swings
// leave alone. The rest counts the heap's pages the runtime holds but
// nothing has touched yet (fresh memory of the engine's preallocated
// tables) against it: their first touches show as growth early in an
// incarnation, the warm-up's and the first half's business.
//
// The bounds. trendBound, 4 MB an hour, is about 100 MB a day: what an
// operator would call a leak. With the soak's rates it is a leak of a
// byte per 10,000 ops, of 250 bytes per control request (the stall watch
// asks each engine for its counters every second, the sampler reads its
// metrics every few), or of a KB per redial, rekey or restart times a
// thousand. Over trendSpan, 4 minutes (the second half of an 8-minute
// run), the two slopes of a settled engine wander by less than half of it
// (a collection finds a little more or less live, the allocator maps a
// page run, a C allocator arena grows by a page); over shorter windows
// they do not, and are not judged: a run of 1 minute (make test) is held
// to the ceiling alone. A leak slower than the bound passes: every run
// reports every slope, and those of a long run (make soak SOAK=2h, an
// hour's half) show it. memCeiling, 8 MB, is over twice what an
// engine whose heap is still settling gains after a warm-up of 15 s (its
// heap's pages reach 1.1 times the goal, its tables are first touched):
// more is a leak of megabytes a minute.
const (
	memCeiling = 8 << 20
	trendBound = 4 << 20 // per hour
	trendSpan  = 4 * time.Minute
)

// rssSample is one reading of an engine's memory (bytes). The Go
// figures are 0 when its metrics page could not be read.
type rssSample struct {
	At                time.Duration // since the incarnation started
	RSS, File, Shmem  uint64        // /proc/PID/status: VmRSS, RssFile, RssShmem
	Anon              uint64        // /proc/PID/smaps_rollup: Anonymous
	Threads           int
	GoLive, GoGoal    uint64 // go_gc_heap_live_bytes, go_gc_heap_goal_bytes
	GoHeap, GoRelease uint64 // go_memstats_heap_sys_bytes, go_memstats_heap_released_bytes
	GoSys             uint64 // go_memstats_sys_bytes: all the Go runtime mapped
}

// rssTrack is the samples of one incarnation of an engine.
type rssTrack struct {
	Engine  string
	Inc     int // 1 for the first incarnation
	Samples []rssSample
}

// readRSS reads the memory of process pid: VmRSS, RssFile, RssShmem and
// Threads from its status, Anonymous from its smaps_rollup (exact: the
// status counters are per-CPU approximations).
func readRSS(pid int) (rssSample, error) {
	var r rssSample
	var threads uint64
	if err := procFields(fmt.Sprintf("/proc/%d/status", pid), map[string]*uint64{
		"VmRSS": &r.RSS, "RssFile": &r.File, "RssShmem": &r.Shmem, "Threads": &threads}); err != nil {
		return r, err
	}
	if err := procFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid), map[string]*uint64{"Anonymous": &r.Anon}); err != nil {
		return r, err
	}
	r.Threads = int(threads)
	if r.RSS == 0 || r.Anon == 0 {
		return r, fmt.Errorf("no VmRSS or Anonymous for process %d", pid)
	}
	return r, nil
}

// procFields reads "Name: value [kB]" lines of a /proc file into fields
// (a value in kB as bytes).
func procFields(path string, fields map[string]*uint64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		name, v, _ := strings.Cut(s.Text(), ":")
		p, ok := fields[name]
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		kb := strings.HasSuffix(v, " kB")
		n, err := strconv.ParseUint(strings.TrimSuffix(v, " kB"), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %s %q: %w", path, name, v, err)
		}
		if kb {
			n <<= 10
		}
		*p = n
	}
	return nil
}

// goMetrics takes the Go runtime's figures of r from an engine's
// metrics page (the Prometheus text format; unlabelled gauges).
func (r *rssSample) goMetrics(page string) {
	fields := map[string]*uint64{
		"go_gc_heap_live_bytes": &r.GoLive, "go_gc_heap_goal_bytes": &r.GoGoal,
		"go_memstats_heap_sys_bytes": &r.GoHeap, "go_memstats_heap_released_bytes": &r.GoRelease,
		"go_memstats_sys_bytes": &r.GoSys,
	}
	for line := range strings.Lines(page) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if p := fields[name]; ok && p != nil {
			if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 {
				*p = uint64(f)
			}
		}
	}
}

// rssVerdict is what the memory check says of one incarnation.
type rssVerdict struct {
	Checked     bool // samples after the warm-up
	Warm        rssSample
	Last        rssSample
	MaxAnon     uint64
	CeilingOver int64 // the most anon exceeded Warm.Anon + memCeiling by (≤ 0: held)
	// The trend: the window (the second half after warm-up) and the
	// least-squares slopes (bytes per hour, NaN: not read) over it of
	// the anonymous memory (reported), the Go live heap and the rest
	// (judged, if the window spans trendSpan).
	From, To                    time.Duration
	Slope, LiveSlope, RestSlope float64
	TrendJudged, Held           bool
}

// rest is the anonymous memory beyond the Go heap's pages, and whether
// the sample has the Go figures.
func (s rssSample) rest() (float64, bool) {
	return float64(s.Anon) - float64(s.GoHeap) + float64(s.GoRelease), s.GoHeap > 0
}

// judge applies the memory check to the samples taken after warm.
func (t *rssTrack) judge(warm time.Duration) rssVerdict {
	var post []rssSample
	for _, s := range t.Samples {
		if s.At >= warm {
			post = append(post, s)
		}
	}
	v := rssVerdict{Held: true, Slope: math.NaN(), LiveSlope: math.NaN(), RestSlope: math.NaN()}
	if len(post) < 2 {
		return v
	}
	v.Checked = true
	v.Warm, v.Last = post[0], post[len(post)-1]
	for _, s := range post {
		v.MaxAnon = max(v.MaxAnon, s.Anon)
	}
	v.CeilingOver = int64(v.MaxAnon) - int64(v.Warm.Anon) - memCeiling
	v.From, v.To = max(v.Warm.At, v.Last.At/2), v.Last.At
	var win []rssSample
	for _, s := range post {
		if s.At >= v.From {
			win = append(win, s)
		}
	}
	v.Slope = slope(win, func(s rssSample) (float64, bool) { return float64(s.Anon), true })
	v.LiveSlope = slope(win, func(s rssSample) (float64, bool) { return float64(s.GoLive), s.GoLive > 0 })
	v.RestSlope = slope(win, rssSample.rest)
	v.TrendJudged = v.To-v.From >= trendSpan
	v.Held = v.CeilingOver <= 0 && (!v.TrendJudged || !v.trendOver())
	return v
}

// trendOver reports whether a slope broke the trend bound, or could not
// be taken (the engine's metrics page was never read).
func (v *rssVerdict) trendOver() bool {
	return !(v.LiveSlope <= trendBound) || !(v.RestSlope <= trendBound)
}

// slope is the least-squares slope, in units per hour, of the values f
// gives the samples it reads (NaN with fewer than 2 at distinct times).
func slope(s []rssSample, f func(rssSample) (float64, bool)) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, x := range s {
		y, ok := f(x)
		if !ok {
			continue
		}
		h := x.At.Hours()
		n++
		sx, sy, sxx, sxy = sx+h, sy+y, sxx+h*h, sxy+h*y
	}
	d := n*sxx - sx*sx
	if n < 2 || d <= 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

// writeRSS writes every sample of tracks to path as tab-separated
// columns: engine, incarnation, seconds since its start, then the
// sample's figures in KB and its threads.
func writeRSS(path string, tracks []*rssTrack) error {
	var b strings.Builder
	b.WriteString("engine\tinc\tt_s\trss_kb\tanon_kb\tfile_kb\tshmem_kb\tthreads\tgo_live_kb\tgo_goal_kb\tgo_heap_sys_kb\tgo_heap_released_kb\tgo_sys_kb\n")
	for _, t := range tracks {
		for _, s := range t.Samples {
			fmt.Fprintf(&b, "%s\t%d\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Engine, t.Inc, s.At.Seconds(),
				s.RSS>>10, s.Anon>>10, s.File>>10, s.Shmem>>10, s.Threads, s.GoLive>>10, s.GoGoal>>10, s.GoHeap>>10, s.GoRelease>>10, s.GoSys>>10)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
