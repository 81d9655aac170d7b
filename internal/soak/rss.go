package soak

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// The memory floor: after its warm-up, an engine's resident set grows at
// most rssGrowth per rssPeriod. Measured per incarnation (a restarted
// engine starts a new warm-up) from VmRSS samples: for any two samples
// after the warm-up, t1 < t2, RSS(t2) - RSS(t1) ≤ rssGrowth × max(1,
// (t2-t1)/rssPeriod). Within any span of at most rssPeriod that is the
// floor itself (at most 1 MB), over longer spans the same rate; a run
// shorter than rssPeriod is held to 1 MB over all of it.
const (
	rssGrowth = 1 << 20
	rssPeriod = 10 * time.Minute
)

// rssSample is one reading of an engine's VmRSS and its parts (bytes).
type rssSample struct {
	At                time.Duration // since the incarnation started
	RSS               uint64
	Anon, File, Shmem uint64
}

// rssTrack is the samples of one incarnation of an engine.
type rssTrack struct {
	Engine  string
	Inc     int // 1 for the first incarnation
	Samples []rssSample
}

// readRSS reads the resident set of process pid: VmRSS and its parts
// RssAnon, RssFile and RssShmem.
func readRSS(pid int) (rssSample, error) {
	var r rssSample
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return r, err
	}
	defer f.Close()
	fields := map[string]*uint64{"VmRSS:": &r.RSS, "RssAnon:": &r.Anon, "RssFile:": &r.File, "RssShmem:": &r.Shmem}
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, v, _ := strings.Cut(s.Text(), "\t")
		if p, ok := fields[name]; ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return r, fmt.Errorf("%s of %d: %q: %w", name, pid, v, err)
			}
			*p = kb << 10
		}
	}
	if r.RSS == 0 {
		return r, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return r, nil
}

// rssVerdict is what the floor says of one incarnation.
type rssVerdict struct {
	Checked     bool          // enough samples after the warm-up
	Span        time.Duration // from the end of the warm-up to the last sample
	First, Last rssSample     // at the end of the warm-up, and the last
	Max         uint64
	Worst       int64         // the largest growth beyond what the floor allows (≤ 0: held)
	WorstFrom   time.Duration // where it was
	WorstTo     time.Duration
}

// judge applies the floor to the samples taken after warm.
func (t *rssTrack) judge(warm time.Duration) rssVerdict {
	var post []rssSample
	for _, s := range t.Samples {
		if s.At >= warm {
			post = append(post, s)
		}
	}
	v := rssVerdict{Worst: -1 << 62}
	if len(post) < 2 {
		return v
	}
	v.Checked = true
	v.Span = post[len(post)-1].At - post[0].At
	v.First, v.Last = post[0], post[len(post)-1]
	for i, a := range post {
		v.Max = max(v.Max, a.RSS)
		for _, b := range post[i+1:] {
			allowed := float64(rssGrowth) * max(1, float64(b.At-a.At)/float64(rssPeriod))
			if over := int64(b.RSS) - int64(a.RSS) - int64(allowed); over > v.Worst {
				v.Worst, v.WorstFrom, v.WorstTo = over, a.At, b.At
			}
		}
	}
	return v
}

// writeRSS writes every sample of tracks to path as tab-separated
// columns: engine, incarnation, seconds since its start, then VmRSS,
// RssAnon, RssFile and RssShmem in KB.
func writeRSS(path string, tracks []*rssTrack) error {
	var b strings.Builder
	b.WriteString("engine\tinc\tt_s\trss_kb\tanon_kb\tfile_kb\tshmem_kb\n")
	for _, t := range tracks {
		for _, s := range t.Samples {
			fmt.Fprintf(&b, "%s\t%d\t%.1f\t%d\t%d\t%d\t%d\n", t.Engine, t.Inc, s.At.Seconds(), s.RSS>>10, s.Anon>>10, s.File>>10, s.Shmem>>10)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
