package soak

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const mib = 1 << 20

// mem is an engine's memory at one time: the Go live heap, the heap's
// pages the runtime holds (it swings between the live heap and its goal)
// and the rest of its anonymous memory, in MB.
type mem struct{ live, held, rest float64 }

// track is an incarnation whose memory is f(t), sampled every step for d.
func track(step, d time.Duration, f func(t time.Duration) mem) *rssTrack {
	tr := &rssTrack{Engine: "e", Inc: 1}
	for at := time.Duration(0); at <= d; at += step {
		m := f(at)
		tr.Samples = append(tr.Samples, rssSample{At: at, Anon: uint64((m.held + m.rest) * mib),
			GoLive: uint64(m.live * mib), GoHeap: uint64((m.held + 4) * mib), GoRelease: 4 * mib})
	}
	return tr
}

// settled is a settled engine: a live heap of 6 MB, its held pages
// swinging between 6 and 13 MB with a period of 7 minutes, and 5 MB
// beyond the heap.
func settled(t time.Duration) mem {
	return mem{live: 6, held: 9.5 + 3.5*math.Sin(2*math.Pi*t.Minutes()/7), rest: 5}
}

func TestMemoryCheck(t *testing.T) {
	perHour := func(live, rest float64) func(time.Duration) mem {
		return func(t time.Duration) mem {
			m := settled(t)
			m.live += live * t.Hours()
			m.held += 2 * live * t.Hours() // the goal follows the live heap
			m.rest += rest * t.Hours()
			return m
		}
	}
	cases := []struct {
		name         string
		t            *rssTrack
		warm         time.Duration
		held, judged bool    // the verdict, and whether the trend was judged
		live, rest   float64 // their slopes per hour, if judged (NaN: not compared)
	}{
		{"settled", track(5*time.Second, 30*time.Minute, settled), 4 * time.Minute, true, true, 0, 0},
		// The swings of the held heap pages alone do not fail it.
		{"settled, 10 minutes", track(2*time.Second, 10*time.Minute, settled), 75 * time.Second, true, true, 0, 0},
		// Settling: +3 MB of heap and +1 MB beyond it in the first ten
		// minutes, then flat.
		{"settling in the first half", track(5*time.Second, 30*time.Minute, func(t time.Duration) mem {
			m := settled(t)
			m.held += 3 * min(1, t.Minutes()/10)
			m.rest += min(1, t.Minutes()/10)
			return m
		}), 4 * time.Minute, true, true, 0, 0},
		{"a Go heap leak of 6 MB/h", track(5*time.Second, 30*time.Minute, perHour(6, 0)), 4 * time.Minute, false, true, 6, 0},
		{"a leak of 6 MB/h beyond the heap", track(5*time.Second, 30*time.Minute, perHour(0, 6)), 4 * time.Minute, false, true, 0, 6},
		{"a Go heap growing 2 MB/h", track(5*time.Second, 30*time.Minute, perHour(2, 0)), 4 * time.Minute, true, true, 2, 0},
		{"a leak of 20 MB/h in a 10-minute run", track(2*time.Second, 10*time.Minute, perHour(0, 20)), 75 * time.Second, false, true, 0, 20},
		// A minute: the second half is 30 s, too short for a trend; the
		// ceiling holds.
		{"a minute of 60 MB/h", track(time.Second, time.Minute, perHour(0, 60)), 15 * time.Second, true, false, math.NaN(), math.NaN()},
		{"over the ceiling in a minute", track(time.Second, time.Minute, perHour(0, 20*60)), 15 * time.Second, false, false, math.NaN(), math.NaN()},
		// Growth in the warm-up is not counted.
		{"warm-up", track(time.Second, time.Minute, func(t time.Duration) mem {
			m := settled(t)
			m.rest += 20 * min(1, t.Seconds()/15)
			return m
		}), 15 * time.Second, true, false, math.NaN(), math.NaN()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.t.judge(c.warm)
			if !v.Checked || v.Held != c.held || v.TrendJudged != c.judged {
				t.Fatalf("%+v: want held %v, trend judged %v", v, c.held, c.judged)
			}
			for _, s := range []struct {
				name      string
				got, want float64
			}{{"live heap", v.LiveSlope, c.live}, {"rest", v.RestSlope, c.rest}} {
				if !math.IsNaN(s.want) && math.Abs(s.got/mib-s.want) > 0.01 {
					t.Errorf("%s slope %.3f MB/h, want %.3f", s.name, s.got/mib, s.want)
				}
			}
			if v.From != max(c.warm, v.To/2) {
				t.Errorf("window %v..%v: want the second half", v.From, v.To)
			}
		})
	}
	if v := track(time.Second, 0, settled).judge(0); v.Checked {
		t.Errorf("one sample judged: %+v", v)
	}
	// Without the Go figures (the metrics page never read) a judged
	// trend fails.
	tr := track(5*time.Second, 30*time.Minute, settled)
	for i := range tr.Samples {
		tr.Samples[i].GoLive, tr.Samples[i].GoHeap, tr.Samples[i].GoRelease = 0, 0, 0
	}
	if v := tr.judge(4 * time.Minute); v.Held || !v.TrendJudged {
		t.Errorf("no Go figures: %+v", v)
	}
}

func TestReadRSS(t *testing.T) {
	r, err := readRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if r.RSS == 0 || r.Anon == 0 || r.Anon > r.RSS || r.Threads == 0 {
		t.Fatalf("%+v: want VmRSS ≥ Anonymous > 0 and threads", r)
	}
}

func TestGoMetrics(t *testing.T) {
	var r rssSample
	r.goMetrics("# HELP go_gc_heap_live_bytes x\n# TYPE go_gc_heap_live_bytes gauge\ngo_gc_heap_live_bytes 4.194304e+06\n" +
		"go_gc_heap_goal_bytes 8.388608e+06\ngo_memstats_sys_bytes 1.6e+07\ngo_memstats_heap_sys_bytes 1.2e+07\n" +
		"go_memstats_heap_released_bytes 2e+06\ngo_info{version=\"go1.26\"} 1\n")
	want := rssSample{GoLive: 4 << 20, GoGoal: 8 << 20, GoSys: 16e6, GoHeap: 12e6, GoRelease: 2e6}
	if r != want {
		t.Errorf("%+v, want %+v", r, want)
	}
}

// TestEngineMemory: the soak reads the memory of an engine in a network
// namespace of its own and of the net_tap engine in the router's, with
// the Go runtime's figures from each one's metrics page, and takes their
// heap profiles.
func TestEngineMemory(t *testing.T) {
	bin := needBin(t)
	prof := t.TempDir()
	b, err := newBed(fmt.Sprintf("sm%d", os.Getpid()%100000), bin, t.TempDir(), prof)
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	for _, i := range []int{0, 3} {
		if err := b.start(i); err != nil {
			t.Fatal(err)
		}
	}
	b.sampleRSS()
	for _, tr := range b.tracks {
		if len(tr.Samples) != 1 {
			t.Fatalf("%s: %d samples", tr.Engine, len(tr.Samples))
		}
		if s := tr.Samples[0]; s.Anon == 0 || s.GoLive == 0 || s.GoGoal < s.GoLive || s.GoSys == 0 || s.Threads == 0 {
			t.Errorf("%s: %+v", tr.Engine, s)
		}
	}
	for _, i := range []int{0, 3} {
		if err := b.profile(i, "test"); err != nil {
			t.Fatal(err)
		}
		p, err := os.ReadFile(filepath.Join(prof, b.Hosts[i].Name+"-1-test.heap"))
		if err != nil || len(p) < 2 || p[0] != 0x1f || p[1] != 0x8b { // gzipped protobuf
			t.Errorf("%s: heap profile %v: % x", b.Hosts[i].Name, err, p[:min(len(p), 8)])
		}
	}
}
