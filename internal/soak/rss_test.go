package soak

import (
	"os"
	"testing"
	"time"
)

func track(step time.Duration, rss ...uint64) *rssTrack {
	t := &rssTrack{Engine: "e", Inc: 1}
	for i, r := range rss {
		t.Samples = append(t.Samples, rssSample{At: time.Duration(i) * step, RSS: r})
	}
	return t
}

func TestRSSFloor(t *testing.T) {
	const mb = 1 << 20
	cases := []struct {
		name string
		t    *rssTrack
		warm time.Duration
		held bool
	}{
		{"flat", track(time.Minute, 100*mb, 100*mb, 100*mb), 0, true},
		{"warm-up growth is not counted", track(time.Minute, 50*mb, 100*mb, 100*mb+mb/2, 100*mb+mb/2), time.Minute, true},
		{"1 MB within 10 minutes", track(time.Minute, 100*mb, 100*mb+mb/2, 101*mb), 0, true},
		{"1.5 MB within 2 minutes", track(time.Minute, 100*mb, 101*mb, 101*mb+mb/2), 0, false},
		// 0.9 MB per 10 minutes for 30 minutes: 2.7 MB in all, within
		// the rate.
		{"a steady 0.9 MB per 10 minutes", track(10*time.Minute, 100*mb, 100*mb+9*mb/10, 101*mb+8*mb/10, 102*mb+7*mb/10), 0, true},
		{"a steady 1.2 MB per 10 minutes", track(10*time.Minute, 100*mb, 101*mb+mb/5, 102*mb+2*mb/5, 103*mb+3*mb/5), 0, false},
		// A peak that falls back still counts between the samples.
		{"a transient peak", track(time.Minute, 100*mb, 102*mb, 100*mb), 0, false},
	}
	for _, c := range cases {
		v := c.t.judge(c.warm)
		if !v.Checked || (v.Worst <= 0) != c.held {
			t.Errorf("%s: %+v, want held %v", c.name, v, c.held)
		}
	}
	if v := track(time.Second, mb).judge(0); v.Checked {
		t.Errorf("one sample judged: %+v", v)
	}
}

func TestReadRSS(t *testing.T) {
	r, err := readRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if r.RSS == 0 || r.Anon == 0 || r.Anon+r.File+r.Shmem != r.RSS {
		t.Fatalf("%+v: want VmRSS = RssAnon + RssFile + RssShmem, none zero", r)
	}
}
