package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuGroup is a cgroup of the cpu controller whose processes share one
// CPU bandwidth limit: cgroup v2's cpu.max, or on a host whose cpu
// controller is still on cgroup v1, the same limit as cpu.cfs_quota_us and
// cpu.cfs_period_us.
type cpuGroup struct {
	dir string // the group's directory
	v2  bool
}

// cpuCgroupRoot finds, under fsRoot (/sys/fs/cgroup), where a group of the
// cpu controller can be made: cgroup v2's root if its cgroup.controllers
// lists cpu, else cgroup v1's cpu hierarchy (fsRoot/cpu, or fsRoot/cpu,cpuacct
// where the two are mounted together).
func cpuCgroupRoot(fsRoot string) (dir string, v2 bool, err error) {
	if b, err := os.ReadFile(filepath.Join(fsRoot, "cgroup.controllers")); err == nil {
		for _, c := range strings.Fields(string(b)) {
			if c == "cpu" {
				return fsRoot, true, nil
			}
		}
	}
	for _, d := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		if _, err := os.Stat(filepath.Join(fsRoot, d, "cpu.cfs_quota_us")); err == nil {
			return filepath.Join(fsRoot, d), false, nil
		}
	}
	return "", false, fmt.Errorf("no cpu controller under %s: neither cgroup v2's (%s lists no cpu) nor cgroup v1's (%s)",
		fsRoot, filepath.Join(fsRoot, "cgroup.controllers"), filepath.Join(fsRoot, "cpu", "cpu.cfs_quota_us"))
}

// cpuLimitFiles returns the files of a group, in the order to write them,
// and their values that set limit, given in cpu.max's syntax: "QUOTA
// PERIOD" in µs (QUOTA "max": no limit).
func cpuLimitFiles(limit string, v2 bool) ([][2]string, error) {
	f := strings.Fields(limit)
	if len(f) != 2 {
		return nil, fmt.Errorf("cpu limit %q: want \"QUOTA PERIOD\" (µs, as cpu.max)", limit)
	}
	period, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil || period < 1000 || period > 1000000 {
		return nil, fmt.Errorf("cpu limit %q: the period wants 1000..1000000 µs", limit)
	}
	quota := int64(-1)
	if f[0] != "max" {
		q, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || q < 1000 {
			return nil, fmt.Errorf("cpu limit %q: the quota wants \"max\" or at least 1000 µs", limit)
		}
		quota = int64(q)
	}
	if v2 {
		return [][2]string{{"cpu.max", f[0] + " " + f[1]}}, nil
	}
	// The period first: cgroup v1 checks a quota against the period in
	// force.
	return [][2]string{{"cpu.cfs_period_us", f[1]}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}}, nil
}

// newCPUGroup makes group name under root (cpuCgroupRoot's) with limit
// (cpuLimitFiles). A group of that name left by a run that did not end
// cleanly is emptied and removed first.
func newCPUGroup(root string, v2 bool, name, limit string) (*cpuGroup, error) {
	files, err := cpuLimitFiles(limit, v2)
	if err != nil {
		return nil, err
	}
	if name == "" || strings.ContainsAny(name, "/") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup name %q: want one path element", name)
	}
	g := &cpuGroup{dir: filepath.Join(root, name), v2: v2}
	if _, err := os.Stat(g.dir); err == nil {
		if err := g.remove(); err != nil {
			return nil, fmt.Errorf("removing the stale group: %w", err)
		}
	}
	if v2 {
		// The controller must be enabled for root's children.
		sc := filepath.Join(root, "cgroup.subtree_control")
		b, err := os.ReadFile(sc)
		if err != nil {
			return nil, err
		}
		if !strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpu ") {
			if err := os.WriteFile(sc, []byte("+cpu"), 0); err != nil {
				return nil, fmt.Errorf("enabling the cpu controller in %s: %w", sc, err)
			}
		}
	}
	if err := os.Mkdir(g.dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(g.dir, f[0]), []byte(f[1]), 0o644); err != nil {
			g.remove()
			return nil, fmt.Errorf("%s = %q: %w", filepath.Join(g.dir, f[0]), f[1], err)
		}
	}
	return g, nil
}

// add moves process pid (every thread of it) into the group.
func (g *cpuGroup) add(pid int) error {
	return os.WriteFile(filepath.Join(g.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}

// pids are the processes in the group.
func (g *cpuGroup) pids() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// cpuStat is what a group's processes got of the CPU and how often the
// limit held them back.
type cpuStat struct {
	usage       time.Duration // CPU time of the processes in the group now (utime + stime, every thread)
	periods     uint64        // enforcement periods in which the group ran
	throttled   uint64        // of which it used its quota up and waited
	throttledNs uint64        // the time it waited
}

// stat reads the group's throttling counters (cpu.stat) and its
// processes' CPU time.
func (g *cpuGroup) stat() (cpuStat, error) {
	b, err := os.ReadFile(filepath.Join(g.dir, "cpu.stat"))
	if err != nil {
		return cpuStat{}, err
	}
	s := parseCPUStat(string(b), g.v2)
	pids, err := g.pids()
	if err != nil {
		return cpuStat{}, err
	}
	for _, pid := range pids {
		s.usage += procCPU(pid)
	}
	return s, nil
}

// parseCPUStat reads the throttling counters of a cpu.stat file: v2's
// nr_periods, nr_throttled and throttled_usec, v1's throttled_time (ns).
func parseCPUStat(text string, v2 bool) cpuStat {
	var s cpuStat
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch {
		case f[0] == "nr_periods":
			s.periods = v
		case f[0] == "nr_throttled":
			s.throttled = v
		case f[0] == "throttled_usec" && v2:
			s.throttledNs = v * 1000
		case f[0] == "throttled_time" && !v2:
			s.throttledNs = v
		}
	}
	return s
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100

// procCPU is process pid's CPU time, user and system, over all its
// threads (0 once it is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the parenthesised command name: state is the
	// third field, utime and stime the 14th and 15th.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / clockTicks
}

// since is what the group got between s0 and s over wall time d: the CPUs'
// worth its processes used and the periods it was throttled in.
func (s cpuStat) since(s0 cpuStat, d time.Duration) string {
	return fmt.Sprintf("%.2f CPU, throttled in %d of %d periods (%.0f ms)",
		float64(s.usage-s0.usage)/float64(d), s.throttled-s0.throttled, s.periods-s0.periods, float64(s.throttledNs-s0.throttledNs)/1e6)
}

// remove kills whatever is still in the group, waits until it is empty
// and removes it.
func (g *cpuGroup) remove() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := g.pids()
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err == nil && len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: processes %v still in it", g.dir, pids)
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Rmdir(g.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", g.dir, err)
	}
	return nil
}
