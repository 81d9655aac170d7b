package probe_test

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/engine/telemetry/probe"
)

// attachSelf loads the program into this kernel and attaches it to the
// telemetry hook of this test binary, for pid (0: any process).
func attachSelf(t *testing.T, pid int) *probe.Probe {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("BPF tests need root in CI")
		}
		t.Skip("loading BPF programs needs root (CAP_BPF, CAP_PERFMON)")
	}
	exe, off := hookOffset(t)
	p, err := probe.AttachAt(exe, pid, off)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// hookOffset finds telemetry.Hook in this process's executable mapping:
// `go test` runs binaries without a symbol table, so Attach's lookup by
// name would not find it.
func hookOffset(t *testing.T) (exe string, off uint64) {
	t.Helper()
	pc := uint64(reflect.ValueOf(telemetry.Hook).Pointer())
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		// start-end perms offset dev inode path
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[1], "x") {
			continue
		}
		var start, end, fileOff uint64
		if _, err := fmt.Sscanf(f[0]+" "+f[2], "%x-%x %x", &start, &end, &fileOff); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if start <= pc && pc < end {
			return f[5], pc - start + fileOff
		}
	}
	t.Fatalf("telemetry.Hook at %#x is in no executable mapping", pc)
	return "", 0
}

func snapshot(t *testing.T, p *probe.Probe) *probe.Snapshot {
	t.Helper()
	s, err := p.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHistograms hands the hook batches whose every sample's bucket is
// known and checks the kernel's histograms bucket by bucket.
func TestHistograms(t *testing.T) {
	p := attachSelf(t, os.Getpid())
	before := snapshot(t, p)

	want := map[probe.Key]*probe.Histogram{}
	wantBytes := [4]uint64{}
	add := func(k probe.Key, ns uint32) {
		if want[k] == nil {
			want[k] = new(probe.Histogram)
		}
		want[k].Add(ns)
	}
	var b telemetry.Batch
	b.SetCore(3)
	const n = 3*telemetry.BatchLen + 17 // three full batches, one partial
	for i := range n {
		s := telemetry.Sample{
			IssueNs: uint32(i * 37),          // 0 first: bucket 0
			TotalNs: uint32(i*i*1013 + i*37), // ≥ issue: remote = i*i*1013
			Op:      uint8(abi.OpRead),
			Status:  uint8(abi.StatusOK),
			Length:  64,
		}
		switch i % 5 {
		case 1:
			s.Op = uint8(abi.OpWrite)
			s.Length = 4096
		case 2:
			s.Status, s.Length = uint8(abi.StatusTimeout), 0
		case 3:
			s.TotalNs = s.IssueNs / 2 // total below issue: remote 0
		}
		if i == n-1 {
			s.TotalNs = 1<<32 - 1 // the top bucket
		}
		b.Add(int64(i), s)
		k := probe.Key{Op: s.Op, Status: s.Status}
		k.Kind = probe.Issue
		add(k, s.IssueNs)
		k.Kind = probe.Total
		add(k, s.TotalNs)
		k.Kind = probe.Remote
		remote := uint32(0)
		if s.TotalNs >= s.IssueNs {
			remote = s.TotalNs - s.IssueNs
		}
		add(k, remote)
		if s.Status == uint8(abi.StatusOK) {
			wantBytes[s.Op&3] += uint64(s.Length)
		}
	}
	if b.Flushes != 3 || b.Len() != 17 {
		t.Fatalf("batch: %d flushes, %d left; want 3 and 17", b.Flushes, b.Len())
	}
	b.Flush()

	got := snapshot(t, p).Sub(before)
	if got.Calls != 4 || got.Samples != n || got.ReadErrors != 0 || got.Clamped != 0 || got.OutOfRange != 0 {
		t.Fatalf("counters: %+v", got)
	}
	if got.Bytes != wantBytes {
		t.Errorf("bytes %v, want %v", got.Bytes, wantBytes)
	}
	if len(got.Hist) != len(want) {
		t.Errorf("%d histograms, want %d", len(got.Hist), len(want))
	}
	for k, w := range want {
		if g := got.Hist[k]; g == nil || *g != *w {
			t.Errorf("%+v: got %v, want %v", k, g, w)
		}
	}
	if w := want[probe.Key{Op: uint8(abi.OpRead), Status: uint8(abi.StatusOK), Kind: probe.Total}]; w[0] == 0 || w[probe.NumBuckets-1] == 0 {
		t.Errorf("the samples miss an edge bucket: %v", w)
	}
	// Core 3's share is all of it: its total delay by op, every status.
	var wantCore probe.Core
	wantCore.Calls, wantCore.Samples, wantCore.Bytes = 4, n, wantBytes
	for k, w := range want {
		if k.Kind == probe.Total {
			for b, c := range w {
				wantCore.Total[k.Op][b] += c
			}
		}
	}
	if c := got.Cores[3]; len(got.Cores) != 1 || c == nil || *c != wantCore {
		t.Errorf("cores %v: core 3 %+v, want %+v", got.Cores, c, wantCore)
	}
	// A second core's batch is its own.
	var b2 telemetry.Batch
	b2.SetCore(1)
	b2.Add(0, telemetry.Sample{TotalNs: 1000, Op: uint8(abi.OpWrite), Length: 4096})
	b2.Flush()
	got = snapshot(t, p).Sub(before)
	if c := got.Cores[1]; c == nil || c.Calls != 1 || c.Samples != 1 || c.Bytes[abi.OpWrite] != 4096 || c.Total[abi.OpWrite][10] != 1 || got.Cores[3].Samples != n {
		t.Errorf("after core 1's batch: core 1 %+v, core 3's samples %d", c, got.Cores[3].Samples)
	}
}

// TestBadCalls: a count over BatchLen is clamped, a count of 0 or below
// reads nothing, a pointer the process does not map is a read error,
// samples beyond the histograms' range are counted apart, and so is a
// batch of a core beyond the per-core arrays (in the histograms only).
func TestBadCalls(t *testing.T) {
	p := attachSelf(t, os.Getpid())
	before := snapshot(t, p)
	var s [telemetry.BatchLen]telemetry.Sample
	for i := range s {
		s[i] = telemetry.Sample{IssueNs: 1, TotalNs: 2, Op: uint8(abi.OpRead)}
	}
	s[7].Op, s[9].Status = probe.NumOps, probe.NumStatus
	telemetry.Hook(&s, telemetry.BatchLen+100, 0)
	telemetry.Hook(&s, 0, 0)
	telemetry.Hook(&s, -5, 0)
	telemetry.Hook(nil, 10, 0)
	telemetry.Hook(&s, 1, probe.NumCores) // a core beyond the per-core arrays
	got := snapshot(t, p).Sub(before)
	if got.Calls != 5 || got.Samples != telemetry.BatchLen+1 || got.Clamped != 1 || got.ReadErrors != 1 || got.OutOfRange != 2 || got.BadCore != 1 {
		t.Fatalf("counters: %+v", got)
	}
	h := got.Hist[probe.Key{Op: uint8(abi.OpRead), Status: uint8(abi.StatusOK), Kind: probe.Total}]
	if len(got.Hist) != 3 || h == nil || h.Count() != telemetry.BatchLen-1 || h[2] != telemetry.BatchLen-1 {
		t.Fatalf("histograms: %v", got.Hist)
	}
	if c := got.Cores[0]; len(got.Cores) != 1 || c == nil || c.Calls != 4 || c.Samples != telemetry.BatchLen || c.Total[abi.OpRead][2] != telemetry.BatchLen-2 {
		t.Fatalf("cores: %v (core 0: %+v)", got.Cores, c)
	}
}

// TestUntouchedPages: the program reads only the samples the engine
// wrote. The rest of a fresh batch lies in pages never touched, which a
// BPF program cannot fault in (found with rmad: every read failed).
func TestUntouchedPages(t *testing.T) {
	p := attachSelf(t, os.Getpid())
	mem, err := unix.Mmap(-1, 0, telemetry.BatchLen*telemetry.SampleSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	s := (*[telemetry.BatchLen]telemetry.Sample)(unsafe.Pointer(&mem[0]))
	s[0] = telemetry.Sample{TotalNs: 100, Op: uint8(abi.OpWrite)} // faults in the first page only
	before := snapshot(t, p)
	telemetry.Hook(s, 1, 0)
	if got := snapshot(t, p).Sub(before); got.Samples != 1 || got.ReadErrors != 0 {
		t.Fatalf("counters: %+v", got)
	}
}

// TestOtherProcess: a probe for another pid sees none of this one's calls.
func TestOtherProcess(t *testing.T) {
	p := attachSelf(t, os.Getppid())
	before := snapshot(t, p)
	var b telemetry.Batch
	b.Add(0, telemetry.Sample{TotalNs: 5})
	b.Flush()
	if got := snapshot(t, p).Sub(before); got.Calls != 0 || len(got.Hist) != 0 {
		t.Fatalf("saw another process's hook: %+v", got)
	}
}

func TestAdd(t *testing.T) {
	for _, ns := range []uint32{0, 1, 2, 3, 4, 1000, 1023, 1024, 1<<31 - 1, 1 << 31, math.MaxUint32} {
		var h probe.Histogram
		h.Add(ns)
		for b, c := range h {
			lo, hi := probe.BucketRange(b)
			if in := lo <= uint64(ns) && uint64(ns) < hi; (c == 1) != in || c > 1 {
				t.Errorf("%d: bucket %d [%d, %d) has %d", ns, b, lo, hi, c)
			}
		}
	}
}

func TestQuantile(t *testing.T) {
	var h probe.Histogram
	if h.Quantile(0.5) != 0 {
		t.Fatal("empty")
	}
	h[0], h[3], h[10] = 1, 2, 1 // 0; [4,8) twice; [512,1024)
	for _, c := range []struct {
		q    float64
		want uint64
	}{{0.25, 1}, {0.5, 8}, {0.75, 8}, {0.99, 1024}, {1, 1024}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("q %v: %d, want %d", c.q, got, c.want)
		}
	}
}
