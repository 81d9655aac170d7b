package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/internal/testbed"
)

// ethdevStats is the part of DPDK telemetry's /ethdev/stats reply the
// tests read.
type ethdevStats struct {
	IPackets uint64 `json:"ipackets"`
	OPackets uint64 `json:"opackets"`
	IBytes   uint64 `json:"ibytes"`
	OBytes   uint64 `json:"obytes"`
}

// telemetryQuery runs DPDK's dpdk-telemetry.py with args (how it finds
// the engine's socket) on the command /ethdev/stats,0 and returns the
// reply.
func telemetryQuery(t *testing.T, args ...string) ethdevStats {
	t.Helper()
	bin, err := exec.LookPath("dpdk-telemetry.py")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("dpdk-telemetry.py: %v", err)
		}
		t.Skipf("dpdk-telemetry.py: %v (Debian's dpdk package)", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader("/ethdev/stats,0\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dpdk-telemetry.py %v: %v\n%s", args, err, out)
	}
	// Non-interactive, it prints the reply alone, as one line of JSON.
	var reply struct {
		Stats *ethdevStats `json:"/ethdev/stats"`
	}
	if err := json.Unmarshal(out, &reply); err != nil || reply.Stats == nil {
		t.Fatalf("dpdk-telemetry.py %v: %v\n%s", args, err, out)
	}
	return *reply.Stats
}

// telemetryInstance finds the telemetry socket of process pid among the
// v2 sockets of runtime directory dir (several processes sharing a file
// prefix, as every --in-memory process shares "rte", get dpdk_telemetry.v2,
// dpdk_telemetry.v2:1, ...) by the pid each socket's greeting names, and
// returns the instance number dpdk-telemetry.py's -i takes.
func telemetryInstance(t *testing.T, dir string, pid int) int {
	t.Helper()
	socks, _ := filepath.Glob(filepath.Join(dir, "dpdk_telemetry.v2*"))
	for _, s := range socks {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET, 0)
		if err != nil {
			t.Fatal(err)
		}
		var hello struct {
			PID int `json:"pid"`
		}
		buf := make([]byte, 1024)
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: s})
		n := 0
		if err == nil {
			n, err = unix.Read(fd, buf)
		}
		unix.Close(fd)
		if err != nil || json.Unmarshal(buf[:n], &hello) != nil || hello.PID != pid {
			continue // another process's, or one a process left behind
		}
		if _, inst, ok := strings.Cut(filepath.Base(s), ":"); ok {
			i, err := strconv.Atoi(inst)
			if err != nil {
				t.Fatalf("socket %s", s)
			}
			return i
		}
		return 0
	}
	t.Fatalf("no telemetry socket of pid %d among %v", pid, socks)
	return 0
}

// TestEALTelemetry: rmad keeps the EAL's telemetry socket, so DPDK's own
// dpdk-telemetry.py reads a running engine's port counters
// (/ethdev/stats,0): for an engine with a file prefix (the testbed's
// onerma-NAME) by -f, and for an engine on rmad's default EAL arguments
// (--in-memory: the shared runtime directory "rte") by -i, the instance
// whose socket greets with the engine's pid. The frames the engine sent
// and received are in the reply.
func TestEALTelemetry(t *testing.T) {
	t.Run("file-prefix", func(t *testing.T) {
		a, b := memifPair(t, nil, nil)
		pa, pb := dial(t, a, "app-a"), dial(t, b, "app-b")
		verifiedReads(t, pa, ipB, ownerRegion(t, pb, 64<<10, abi.PermRemoteRead))
		st := telemetryQuery(t, "-f", "onerma-"+a.Opt.Name)
		// memif in DPDK 22.11 counts only some of its packets (ctlmsg
		// PortDevStats): some, not all, must show.
		t.Logf("dpdk-telemetry.py -f onerma-%s: /ethdev/stats,0 %+v", a.Opt.Name, st)
		if st.IPackets == 0 || st.OPackets == 0 || st.OBytes == 0 {
			t.Fatalf("/ethdev/stats,0 of %s: %+v after 22 reads", a.Opt.Name, st)
		}
	})
	t.Run("in-memory", func(t *testing.T) {
		needEngines(t)
		out, err := exec.Command(rmadBin, "-print-config").Output()
		if err != nil {
			t.Fatalf("rmad -print-config: %v", err)
		}
		var def struct {
			EALArgs []string `json:"eal_args"`
		}
		if err := json.Unmarshal(out, &def); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(def.EALArgs, " "), "--in-memory") {
			t.Fatalf("rmad's default eal_args %v: no --in-memory", def.EALArgs)
		}
		// rmad's default EAL arguments; frames to itself leave by the
		// net_ring port and come back, so the port counts them.
		o := testbed.Loopback(rmadBin, t.TempDir(), "e2e-telmem", "10.98.5.1")
		o.Extra = append(append([]string{}, relaxed...), "-eal", strings.Join(def.EALArgs, " "), "-hairpin-self=true")
		e := start(t, o)
		p := dial(t, e, "app")
		src := ownerRegion(t, p, 64<<10, abi.PermRemoteRead)
		verifiedReads(t, p, netip.MustParseAddr(o.IP), src)
		base := "/var/run/dpdk" // root's runtime directory (needEngines: root)
		if d := os.Getenv("RUNTIME_DIRECTORY"); d != "" {
			base = d + "/dpdk"
		}
		inst := telemetryInstance(t, base+"/rte", e.Pid())
		st := telemetryQuery(t, "-i", strconv.Itoa(inst))
		// 22 reads to itself: each request and each answer chunk went
		// out of the ring and came back in.
		t.Logf("dpdk-telemetry.py -i %d: /ethdev/stats,0 %+v", inst, st)
		if st.OPackets < 44 || st.IPackets != st.OPackets || st.IBytes != st.OBytes {
			t.Fatalf("/ethdev/stats,0 of instance %d: %+v", inst, st)
		}
	})
}
