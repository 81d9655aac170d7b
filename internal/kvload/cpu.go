package kvload

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHz is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture the kernel exports to user space).
const userHz = 100

// ProcessCPU returns the CPU time (user and system, every thread,
// including threads that have exited) process pid has used so far, from
// /proc/pid/stat, to 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces
	// or parentheses itself: the fields that follow start after the
	// last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name in %q", pid, s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 13", pid, len(f))
	}
	var ticks uint64
	for _, v := range f[11:13] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHz, nil
}

// CPUMeter measures the CPU time a set of processes use between Start
// and Stop.
type CPUMeter struct {
	pids  []int
	start time.Duration
}

// NewCPUMeter returns a meter of pids' CPU time.
func NewCPUMeter(pids ...int) *CPUMeter { return &CPUMeter{pids: pids} }

func (m *CPUMeter) total() (time.Duration, error) {
	var t time.Duration
	for _, pid := range m.pids {
		d, err := ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		t += d
	}
	return t, nil
}

// Start takes the processes' CPU time now.
func (m *CPUMeter) Start() error {
	t, err := m.total()
	m.start = t
	return err
}

// Stop returns the CPU time the processes used since Start.
func (m *CPUMeter) Stop() (time.Duration, error) {
	t, err := m.total()
	return t - m.start, err
}
