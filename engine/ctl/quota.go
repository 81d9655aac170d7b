package ctl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/onerma/onerma/ctlmsg"
)

// Amount is a quota's value: a count, or a percentage of what it limits
// (the host memory left to tenants, the engine's huge pages, its portals
// or slots; see Resources). In JSON a number is a count and a string
// "N%" a percentage.
type Amount struct {
	N       uint64
	Percent uint8 // 1..100; 0: N is the value
}

// Pct is the Amount p percent.
func Pct(p uint8) *Amount { return &Amount{Percent: p} }

// Count is the Amount n.
func Count(n uint64) *Amount { return &Amount{N: n} }

// Of resolves a against the total it is a share of.
func (a Amount) Of(total uint64) uint64 {
	if a.Percent == 0 {
		return a.N
	}
	p := uint64(a.Percent)
	return total/100*p + total%100*p/100 // total*p/100 without overflow
}

func (a Amount) String() string {
	if a.Percent != 0 {
		return fmt.Sprintf("%d%%", a.Percent)
	}
	return strconv.FormatUint(a.N, 10)
}

// MarshalJSON writes a count as a number, a percentage as "N%".
func (a Amount) MarshalJSON() ([]byte, error) {
	if a.Percent != 0 {
		return json.Marshal(a.String())
	}
	return []byte(strconv.FormatUint(a.N, 10)), nil
}

// UnmarshalJSON reads a number (a count) or a string "N%", N in 1..100.
func (a *Amount) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		n, err := strconv.ParseUint(string(b), 10, 64)
		if err != nil {
			return fmt.Errorf("quota %s: want a count or a percentage like \"25%%\"", b)
		}
		*a = Amount{N: n}
		return nil
	}
	v, ok := strings.CutSuffix(s, "%")
	p, err := strconv.ParseUint(v, 10, 8)
	if !ok || err != nil || p < 1 || p > 100 {
		return fmt.Errorf("quota %q: want a count or a percentage 1%%..100%%", s)
	}
	*a = Amount{Percent: uint8(p)}
	return nil
}

// Quota is what one tenant may hold at once. A nil field takes the value
// of the quota under it (Over): a socket's quota over the engine's default.
type Quota struct {
	// MemoryBytes bounds the tenant's shared memory: its regions
	// (registered or only created) and portal segments, each as mapped
	// (rounded up to its page). A percentage is of Resources.MemoryBytes.
	MemoryBytes *Amount `json:"memory_bytes,omitempty"`
	// HugepageBytes bounds the part of it on huge pages (of
	// Resources.HugepageBytes). Beyond it, memory comes from ordinary
	// pages (within MemoryBytes) rather than being refused.
	HugepageBytes *Amount `json:"hugepage_bytes,omitempty"`
	// Portals bounds the portals open at once (of Resources.Portals).
	Portals *Amount `json:"portals,omitempty"`
	// Slots bounds the command slots held at once, over all the tenant's
	// portals (of Resources.Slots).
	Slots *Amount `json:"slots,omitempty"`
}

// DefaultQuota protects the host and the other tenants: a quarter of the
// memory left to tenants, half of the engine's huge pages, half of its
// portals and slots. Root gets no exemption.
func DefaultQuota() Quota {
	return Quota{MemoryBytes: Pct(25), HugepageBytes: Pct(50), Portals: Pct(50), Slots: Pct(50)}
}

// Over returns q with every field it leaves nil taken from base.
func (q Quota) Over(base Quota) Quota {
	pick := func(a, b *Amount) *Amount {
		if a != nil {
			return a
		}
		return b
	}
	return Quota{MemoryBytes: pick(q.MemoryBytes, base.MemoryBytes), HugepageBytes: pick(q.HugepageBytes, base.HugepageBytes),
		Portals: pick(q.Portals, base.Portals), Slots: pick(q.Slots, base.Slots)}
}

// Validate checks the quota's counts fit what they count.
func (q Quota) Validate() error {
	for _, f := range []struct {
		name string
		a    *Amount
		max  uint64
	}{
		{ctlmsg.QuotaPortals, q.Portals, 1 << 16},
		{ctlmsg.QuotaSlots, q.Slots, 1 << 31},
	} {
		if f.a != nil && f.a.Percent == 0 && f.a.N > f.max {
			return fmt.Errorf("%s = %d, want at most %d", f.name, f.a.N, f.max)
		}
	}
	return nil
}

// Resources are the totals percentages of a quota are of. The server
// measures them when it starts, after the engine has taken what it needs
// itself (DPDK's memory and huge pages, the core's tables): tenants
// share what is left.
type Resources struct {
	// MemoryBytes: the host's memory (MemTotal) less the engine's own
	// resident memory at start.
	MemoryBytes uint64
	// HugepageBytes: free huge pages of the engine's huge page size at
	// start (0 without huge pages, or with Config.Hugetlb off).
	HugepageBytes uint64
	Portals       int // the engine core's portal table
	Slots         int // the engine core's command slots
}

// Resolve turns q (every field set) into limits for these resources.
func (q Quota) Resolve(r Resources) ctlmsg.TenantUsage {
	return ctlmsg.TenantUsage{
		MemoryBytes:   q.MemoryBytes.Of(r.MemoryBytes),
		HugepageBytes: q.HugepageBytes.Of(r.HugepageBytes),
		Portals:       int(min(q.Portals.Of(uint64(r.Portals)), 1<<16)),
		Slots:         int(min(q.Slots.Of(uint64(r.Slots)), 1<<31)),
	}
}

// measureResources reads /proc for the memory totals; hugePage is the
// huge page size the server uses (0: none).
func measureResources(hugePage uint64) (Resources, error) {
	var r Resources
	total, err := procKB("/proc/meminfo", "MemTotal:")
	if err != nil {
		return r, err
	}
	rss, err := procKB("/proc/self/status", "VmRSS:")
	if err != nil {
		return r, err
	}
	if total > rss {
		r.MemoryBytes = total - rss
	}
	if hugePage > 0 { // the default huge page size (hugePageSize), which HugePages_Free counts
		free, err := procCount("/proc/meminfo", "HugePages_Free:")
		if err != nil {
			return r, err
		}
		r.HugepageBytes = free * hugePage
	}
	return r, nil
}

// procKB reads a "Key: N kB" line of a /proc file, in bytes.
func procKB(path, key string) (uint64, error) {
	f, err := procField(path, key)
	if err != nil {
		return 0, err
	}
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("ctl: %s: %s %q is not in kB", path, key, f)
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ctl: %s: %s: %w", path, key, err)
	}
	return v << 10, nil
}

// procCount reads a "Key: N" line of a /proc file.
func procCount(path, key string) (uint64, error) {
	f, err := procField(path, key)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("ctl: %s: %s: %w", path, key, err)
	}
	return v, nil
}

func procField(path, key string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ctl: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			if fs := strings.Fields(v); len(fs) > 0 {
				return fs, nil
			}
		}
	}
	return nil, fmt.Errorf("ctl: %s has no %s line", path, key)
}

// fmtBytes renders a byte count for messages: exact, and in MiB or GiB.
func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
