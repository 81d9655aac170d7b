package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCPULimitFiles: cpu.max's syntax, as cgroup v2 takes it and as cgroup
// v1's two files.
func TestCPULimitFiles(t *testing.T) {
	f, err := cpuLimitFiles("20000 100000", true)
	if err != nil || len(f) != 1 || f[0] != [2]string{"cpu.max", "20000 100000"} {
		t.Errorf("v2: %q, %v", f, err)
	}
	f, err = cpuLimitFiles("20000 100000", false)
	if err != nil || len(f) != 2 || f[0] != [2]string{"cpu.cfs_period_us", "100000"} || f[1] != [2]string{"cpu.cfs_quota_us", "20000"} {
		t.Errorf("v1: %q, %v", f, err)
	}
	if f, err := cpuLimitFiles("max 100000", false); err != nil || f[1][1] != "-1" {
		t.Errorf("v1, no limit: %q, %v", f, err)
	}
	for _, bad := range []string{"", "20000", "20000 100000 1", "x 100000", "20000 y", "20000 10", "10 100000", "-1 100000"} {
		if _, err := cpuLimitFiles(bad, true); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestCPUCgroupRoot: cgroup v2's root when it has the cpu controller,
// else cgroup v1's cpu hierarchy, else an error naming both.
func TestCPUCgroupRoot(t *testing.T) {
	fs := t.TempDir()
	if _, _, err := cpuCgroupRoot(fs); err == nil || !strings.Contains(err.Error(), "cgroup.controllers") {
		t.Errorf("no controller: %v", err)
	}
	os.WriteFile(filepath.Join(fs, "cgroup.controllers"), []byte("memory pids\n"), 0o644)
	os.MkdirAll(filepath.Join(fs, "cpu,cpuacct"), 0o755)
	os.WriteFile(filepath.Join(fs, "cpu,cpuacct", "cpu.cfs_quota_us"), []byte("-1\n"), 0o644)
	if d, v2, err := cpuCgroupRoot(fs); err != nil || v2 || d != filepath.Join(fs, "cpu,cpuacct") {
		t.Errorf("v1: %s %v %v", d, v2, err)
	}
	os.WriteFile(filepath.Join(fs, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	if d, v2, err := cpuCgroupRoot(fs); err != nil || !v2 || d != fs {
		t.Errorf("v2: %s %v %v", d, v2, err)
	}
}

// TestNewCPUGroup makes groups in directories laid out as cgroup
// hierarchies: the limit's files written, the cpu controller enabled for
// v2's children, a process added by its pid.
func TestNewCPUGroup(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("memory\n"), 0o644)
	g, err := newCPUGroup(root, true, "onerma-bench-noisy-neighbour", "20000 100000")
	if err != nil {
		t.Fatal(err)
	}
	if g.dir != filepath.Join(root, "onerma-bench-noisy-neighbour") || !g.v2 {
		t.Errorf("group %+v", g)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); string(b) != "+cpu" {
		t.Errorf("subtree_control %q, want +cpu written", b)
	}
	if b, _ := os.ReadFile(filepath.Join(g.dir, "cpu.max")); string(b) != "20000 100000" {
		t.Errorf("cpu.max %q", b)
	}
	if err := g.add(4242); err != nil {
		t.Fatal(err)
	}
	if pids, err := g.pids(); err != nil || !slices.Equal(pids, []int{4242}) {
		t.Errorf("pids %v, %v", pids, err)
	}

	root = t.TempDir()
	g, err = newCPUGroup(root, false, "g", "30000 50000")
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"cpu.cfs_period_us": "50000", "cpu.cfs_quota_us": "30000"} {
		if b, _ := os.ReadFile(filepath.Join(g.dir, f)); string(b) != want {
			t.Errorf("%s %q, want %q", f, b, want)
		}
	}
	for _, bad := range []string{"", "a/b", "..", "."} {
		if _, err := newCPUGroup(root, false, bad, "20000 100000"); err == nil {
			t.Errorf("group name %q: no error", bad)
		}
	}
	// A group already gone is removed without error.
	gone := &cpuGroup{dir: filepath.Join(root, "gone")}
	if err := gone.remove(); err != nil {
		t.Errorf("removing a group that is not there: %v", err)
	}
}

func TestParseCPUStat(t *testing.T) {
	v2 := parseCPUStat("usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\nnr_throttled 12\nthrottled_usec 7000\nnr_bursts 0\n", true)
	if v2 != (cpuStat{periods: 40, throttled: 12, throttledNs: 7e6}) {
		t.Errorf("v2 %+v", v2)
	}
	v1 := parseCPUStat("nr_periods 40\nnr_throttled 12\nthrottled_time 7000000\nnr_bursts 0\nburst_time 0\n", false)
	if v1 != v2 {
		t.Errorf("v1 %+v, want %+v", v1, v2)
	}
	s := cpuStat{usage: 300 * time.Millisecond, periods: 50, throttled: 20, throttledNs: 9e6}
	if got := s.since(v1, time.Second); got != "0.30 CPU, throttled in 8 of 10 periods (2 ms)" {
		t.Errorf("since: %q", got)
	}
	if procCPU(os.Getpid()) < 0 || procCPU(-1) != 0 {
		t.Error("procCPU")
	}
}
