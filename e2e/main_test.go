package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

var rmadBin, rmactlBin, rmatopBin, rmaperfBin, rmakvBin string

func TestMain(m *testing.M) {
	switch os.Getenv("ONERMA_E2E_CHILD") {
	case "":
	case "owner":
		os.Exit(childOwner())
	default:
		os.Exit(childApp())
	}
	if os.Getenv("ONERMA_E2E_IDENT") != "" {
		os.Exit(identityChild())
	}
	if os.Getenv("ONERMA_E2E_TENANT") != "" {
		os.Exit(tenantChild())
	}
	if os.Getenv("ONERMA_E2E_HOSTILE") != "" {
		os.Exit(hostileChild())
	}
	if os.Getenv("ONERMA_E2E_HDP") != "" {
		os.Exit(hdpChild())
	}
	code := func() int {
		if dir := os.Getenv("ONERMA_BIN"); dir != "" {
			rmadBin, rmactlBin, rmatopBin = filepath.Join(dir, "rmad"), filepath.Join(dir, "rmactl"), filepath.Join(dir, "rmatop")
			rmaperfBin, rmakvBin = filepath.Join(dir, "rmaperf"), filepath.Join(dir, "rmakv")
		} else if os.Geteuid() == 0 {
			tmp, err := os.MkdirTemp("", "onerma-e2e-bin-")
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer os.RemoveAll(tmp)
			rmadBin, rmactlBin, rmatopBin = filepath.Join(tmp, "rmad"), filepath.Join(tmp, "rmactl"), filepath.Join(tmp, "rmatop")
			rmaperfBin, rmakvBin = filepath.Join(tmp, "rmaperf"), filepath.Join(tmp, "rmakv")
			out, err := exec.Command("go", "build", "-o", tmp+"/", "github.com/onerma/onerma/tools/rmad", "github.com/onerma/onerma/tools/rmactl",
				"github.com/onerma/onerma/tools/rmatop", "github.com/onerma/onerma/tools/rmaperf", "github.com/onerma/onerma/tools/rmakv").CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "building rmad, rmactl, rmatop, rmaperf and rmakv: %v\n%s", err, out)
				return 1
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// needEngines skips outside CI when the prerequisites of real engines are
// missing, and fails in CI.
func needEngines(t *testing.T) {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "real DPDK engines need root"
	case rmadBin == "":
		why = "no rmad binary"
	}
	if _, err := os.Stat(rmadBin); why == "" && err != nil {
		why = "rmad binary: " + err.Error()
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("required integration test cannot run in CI: %s", why)
	}
	t.Skip(why)
}

func start(t *testing.T, o testbed.Options) *testbed.Engine {
	t.Helper()
	e, err := testbed.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping %s: %v", o.Name, err)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", o.Name, e.Tail(40))
		}
	})
	return e
}

// relaxed are the timeouts of engines in these tests unless a test sets
// its own: go test runs packages in parallel on CI's two cores, and an
// engine that idles in backoff mode can be off-CPU for milliseconds, so the
// production defaults (2 ms / 10 ms) would fail ops that are merely late.
var relaxed = []string{"-dispatch-timeout", "500ms", "-timeout", "1s"}

// memifPair starts two engines over a memif wire, with extra flags each
// (applied after relaxed, so they win).
func memifPair(t *testing.T, extraA, extraB []string) (a, b *testbed.Engine) {
	needEngines(t)
	dir := t.TempDir()
	oa, ob := testbed.MemifPair(rmadBin, dir, "e2e-a", "e2e-b", "10.98.0.1", "10.98.0.2")
	oa.Extra = append(append([]string(nil), relaxed...), extraA...)
	ob.Extra = append(append([]string(nil), relaxed...), extraB...)
	a = start(t, oa)
	b = start(t, ob)
	return a, b
}

func dial(t *testing.T, e *testbed.Engine, name string) *portal.Portal {
	t.Helper()
	p, err := portal.Dial(e.Socket, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func pattern(i uint64) byte { return byte(i*167 + i>>9 + 3) }

// ownerRegion registers a region on p filled with pattern.
func ownerRegion(t *testing.T, p *portal.Portal, size uint64, perm abi.Perm) *portal.Region {
	t.Helper()
	r, err := p.RegisterRegion(size, perm)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := 0, r.Bytes(); i < len(b); i++ {
		b[i] = pattern(uint64(i))
	}
	return r
}

func waitOne(t *testing.T, p *portal.Portal, within time.Duration) abi.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cpl := make([]abi.Completion, 1)
	if _, err := p.Wait(ctx, cpl); err != nil {
		t.Fatalf("no completion within %v: %v", within, err)
	}
	return cpl[0]
}

// waitN collects n completions.
func waitN(t *testing.T, p *portal.Portal, n int, within time.Duration) []abi.Completion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	out := make([]abi.Completion, 0, n)
	buf := make([]abi.Completion, 64)
	for len(out) < n {
		k, err := p.Wait(ctx, buf)
		if err != nil {
			t.Fatalf("%d of %d completions within %v: %v", len(out), n, within, err)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// kdFor is the derived key the owner of r hands reader for READs (paper
// Fig. 5 step 2; the test process plays both applications).
func kdFor(r *portal.Region, reader *portal.Portal) aesni.Key {
	id := reader.Identity()
	return r.DeriveKey(id.Addr, id.PID, abi.OpRead)
}

// verifiedReads reads sizes 1 B .. 4 KB at odd offsets from the remote
// region src on peer into a sink of p and checks every byte.
func verifiedReads(t *testing.T, p *portal.Portal, peer netip.Addr, src *portal.Region) {
	t.Helper()
	rid, regionBytes, kd := src.ID(), src.Size(), kdFor(src, p)
	slots, err := p.AllocSlots(8)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := p.RegisterRegion(64<<10, abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []uint32{1, 63, 64, 65, 127, 1000, 1407, 1408, 1409, 2047, 2817, 4000, 4095, 4096}
	for k, size := range sizes {
		remOff := (uint64(k)*7919 + 13) % (regionBytes - uint64(size))
		lOff := uint64(k*4096 + k + 1)
		if lOff+uint64(size) > 64<<10 {
			lOff = 64<<10 - uint64(size)
		}
		if err := p.Submit(&portal.Op{
			Type: portal.OpRead, Slot: slots[k%len(slots)], Cookie: uint64(k),
			Remote: peer, RemoteRegion: rid, RemoteOffset: remOff, Key: kd,
			Local: sink, LocalOffset: lOff, Length: size,
		}); err != nil {
			t.Fatal(err)
		}
		c := waitOne(t, p, 5*time.Second)
		if c.Status != abi.StatusOK || c.Cookie != uint64(k) || c.Length != size {
			t.Fatalf("read %d B at %d: %+v", size, remOff, c)
		}
		if c.TotalDelayNs == 0 || c.IssueDelayNs > c.TotalDelayNs {
			t.Fatalf("delays: %+v", c)
		}
		got := sink.Bytes()[lOff : lOff+uint64(size)]
		for i, b := range got {
			if b != pattern(remOff+uint64(i)) {
				t.Fatalf("read %d B at remote %d: byte %d is %#x, want %#x", size, remOff, i, b, pattern(remOff+uint64(i)))
			}
		}
	}
	// A pipelined burst: all slots at once, out-of-order completion welcome.
	for k, s := range slots {
		if err := p.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(100 + k),
			Remote: peer, RemoteRegion: rid, RemoteOffset: uint64(k) * 4096, Key: kd,
			Local: sink, LocalOffset: uint64(k) * 4096, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
	}
	p.Flush()
	for _, c := range waitN(t, p, len(slots), 5*time.Second) {
		k := int(c.Cookie) - 100
		if c.Status != abi.StatusOK || k < 0 || k >= len(slots) {
			t.Fatalf("burst: %+v", c)
		}
		got := sink.Bytes()[k*4096 : (k+1)*4096]
		for i, b := range got {
			if b != pattern(uint64(k*4096+i)) {
				t.Fatalf("burst read %d: byte %d differs", k, i)
			}
		}
	}
}
