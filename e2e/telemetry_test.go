package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/telemetry/probe"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// rmatopReport is the part of rmatop's -json record the test reads.
type rmatopReport struct {
	Samples    uint64            `json:"samples"`
	Batches    uint64            `json:"batches"`
	ReadErrors uint64            `json:"read_errors"`
	OutOfRange uint64            `json:"out_of_range"`
	Bytes      map[string]uint64 `json:"bytes"`
	Hist       []struct {
		Op, Status, Delay string
		Count             uint64
		Buckets           []uint64
	} `json:"hist"`
}

// startRmatop runs rmatop with args and waits until it has attached.
func startRmatop(t *testing.T, args ...string) *testbed.Rmatop {
	t.Helper()
	if _, err := os.Stat(rmatopBin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("rmatop binary: %v", err)
		}
		t.Skipf("rmatop binary: %v", err)
	}
	r, err := testbed.StartRmatop(rmatopBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	return r
}

// TestRmatop: rmatop's BPF program, attached to a real engine process,
// sees every completion the engine wrote, in the right histogram bucket:
// the histograms it prints equal those of the delays the application
// read from its completions, for reads that succeeded and reads the
// remote engine refused. The engine's own counters agree, and rmatop ends
// cleanly on SIGINT.
func TestRmatop(t *testing.T) {
	a, b := memifPair(t, nil, nil)
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	src := ownerRegion(t, pb, 64<<10, abi.PermRemoteRead)
	kd := kdFor(src, pa)
	slots, err := pa.AllocSlots(8)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := pa.RegisterRegion(64<<10, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	base := stats(t, pa)
	top := startRmatop(t, "-pid", strconv.Itoa(a.Pid()), "-json", "-cumulative", "-interval", "100ms", "-delays", "total,remote,issue")

	type key struct{ op, status, delay string }
	want := map[key]*probe.Histogram{}
	add := func(k key, ns uint32) {
		if want[k] == nil {
			want[k] = new(probe.Histogram)
		}
		want[k].Add(ns)
	}
	const reads, refused, size = 2000, 24, 512
	var readBytes uint64
	for done := 0; done < reads+refused; {
		n := min(len(slots), reads+refused-done)
		for k := range n {
			off := uint64((done+k)*4096%(60<<10) + k)
			if done+k >= reads {
				off = 64 << 10 // beyond the region: REMOTE_BOUNDS
			}
			if err := pa.Submit(&portal.Op{
				Type: portal.OpRead, Slot: slots[k], Cookie: uint64(done + k),
				Remote: ipB, RemoteRegion: src.ID(), RemoteOffset: off, Key: kd,
				Local: sink, LocalOffset: uint64(k) * size, Length: size,
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range waitN(t, pa, n, 5*time.Second) {
			if (c.Cookie < reads) != (c.Status == abi.StatusOK) || c.Status != abi.StatusOK && c.Status != abi.StatusRemoteBounds {
				t.Fatalf("completion %+v", c)
			}
			if c.Status == abi.StatusOK {
				readBytes += uint64(c.Length)
			}
			st := c.Status.String()
			add(key{"READ", st, "issue"}, c.IssueDelayNs)
			add(key{"READ", st, "total"}, c.TotalDelayNs)
			add(key{"READ", st, "remote"}, c.TotalDelayNs-c.IssueDelayNs)
		}
		done += n
	}

	// The engine hands a partial batch to the hook within a millisecond;
	// rmatop prints every 100 ms.
	var rep rmatopReport
	for deadline := time.After(10 * time.Second); rep.Samples < reads+refused; {
		select {
		case line, ok := <-top.Lines:
			if !ok {
				t.Fatalf("rmatop exited: %v\n%s", top.Wait(), top.Stderr())
			}
			rep = rmatopReport{}
			if err := json.Unmarshal([]byte(line), &rep); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		case <-deadline:
			t.Fatalf("rmatop saw %d of %d completions (%d batches)\n%s", rep.Samples, reads+refused, rep.Batches, top.Stderr())
		}
	}
	if rep.Samples != reads+refused || rep.ReadErrors != 0 || rep.OutOfRange != 0 || rep.Bytes["READ"] != readBytes || len(rep.Bytes) != 1 {
		t.Fatalf("rmatop: %d samples in %d batches, %d read errors, %d out of range, bytes %v (want %d samples, %d bytes)",
			rep.Samples, rep.Batches, rep.ReadErrors, rep.OutOfRange, rep.Bytes, reads+refused, readBytes)
	}
	if len(rep.Hist) != len(want) {
		t.Errorf("%d histograms, want %d", len(rep.Hist), len(want))
	}
	for _, h := range rep.Hist {
		w := want[key{h.Op, h.Status, h.Delay}]
		if w == nil || len(h.Buckets) != probe.NumBuckets {
			t.Errorf("unexpected histogram %s %s %s: %v", h.Op, h.Status, h.Delay, h.Buckets)
			continue
		}
		if !slices.Equal(h.Buckets, w[:]) || h.Count != w.Count() {
			t.Errorf("%s %s %s delay: rmatop %v (%d), completions %v", h.Op, h.Status, h.Delay, h.Buckets, h.Count, w[:])
		}
	}
	st := stats(t, pa)
	if got := st.DelaySamples - base.DelaySamples; got != reads+refused || st.DelayBatches-base.DelayBatches != rep.Batches {
		t.Errorf("engine: %d samples in %d batches; rmatop saw %d batches", got, st.DelayBatches-base.DelayBatches, rep.Batches)
	}

	if err := top.Interrupt(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		for range top.Lines {
		}
		exited <- top.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("rmatop on SIGINT: %v\n%s", err, top.Stderr())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rmatop still running 5 s after SIGINT")
	}

	// The text form: one interval with the reads' histogram in it.
	text := startRmatop(t, "-pid", strconv.Itoa(a.Pid()), "-interval", "1s", "-count", "1")
	for k := range 8 {
		if err := pa.Submit(&portal.Op{
			Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
			Remote: ipB, RemoteRegion: src.ID(), Key: kd,
			Local: sink, Length: 64,
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitN(t, pa, 8, 5*time.Second)
	var out strings.Builder
	for line := range text.Lines {
		out.WriteString(line + "\n")
	}
	if err := text.Wait(); err != nil {
		t.Fatalf("rmatop: %v\n%s%s", err, out.String(), text.Stderr())
	}
	for _, w := range []string{"Tracing engine " + strconv.Itoa(a.Pid()), " 8 completions", "op = READ, status = OK: total delay, 8 ops", "distribution", "|*"} {
		if !strings.Contains(out.String(), w) {
			t.Fatalf("rmatop output lacks %q:\n%s", w, out.String())
		}
	}
}
