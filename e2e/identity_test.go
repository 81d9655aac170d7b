package e2e

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// nsApp is an application process in a PID namespace of its own
// (identityChild), driven line by line.
type nsApp struct {
	in       io.WriteCloser
	id1, id2 uint32 // the identities of its two portals
	getpid   int    // its PID in its own namespace
	addr     netip.Addr
	lines    chan string
	t        *testing.T
}

// startNSApp starts identityChild on socket sock in a new PID namespace.
func startNSApp(t *testing.T, sock string) *nsApp {
	t.Helper()
	self, _ := os.Executable()
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "ONERMA_E2E_IDENT="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &nsApp{in: in, lines: make(chan string, 4), t: t}
	go func() {
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				close(a.lines)
				return
			}
			a.lines <- strings.TrimSpace(l)
		}
	}()
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	var addr string
	l := a.line()
	if _, err := fmt.Sscanf(l, "identity %s %d %d %d", &addr, &a.id1, &a.id2, &a.getpid); err != nil {
		t.Fatalf("child in its PID namespace: %q: %v", l, err)
	}
	a.addr = netip.MustParseAddr(addr)
	return a
}

func (a *nsApp) line() string {
	a.t.Helper()
	select {
	case l, ok := <-a.lines:
		if !ok {
			a.t.Fatal("the child exited")
		}
		return l
	case <-time.After(30 * time.Second):
		a.t.Fatal("the child said nothing for 30 s")
	}
	return ""
}

// read has the child read 64 bytes of region on peer with key kd and
// returns the status it got.
func (a *nsApp) read(peer netip.Addr, region abi.RegionID, kd aesni.Key) string {
	a.t.Helper()
	fmt.Fprintf(a.in, "read %s %d %x\n", peer, uint32(region), kd[:])
	return a.line()
}

// identityChild is an application in a PID namespace of its own: it
// opens two portals on ONERMA_E2E_IDENT, prints their identities and its
// own PID ("identity ADDR ID1 ID2 PID"), then reads what it is told
// ("read PEER REGION KD" -> "status NAME [byte]") until stdin closes.
func identityChild() int {
	sock := os.Getenv("ONERMA_E2E_IDENT")
	p1, err := portal.Dial(sock, "ns-app")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p2, err := portal.Dial(sock, "ns-app-2")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p2.Close()
	fmt.Printf("identity %s %d %d %d\n", p1.Identity().Addr, p1.Identity().PID, p2.Identity().PID, os.Getpid())
	slots, err := p1.AllocSlots(1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sink, err := p1.RegisterRegion(4096, abi.PermLocalWrite)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "read" {
			fmt.Println("status BAD_LINE")
			continue
		}
		region, _ := strconv.ParseUint(f[2], 10, 32)
		var kd aesni.Key
		hex.Decode(kd[:], []byte(f[3]))
		sink.Bytes()[0] = 0
		if err := p1.Submit(&portal.Op{
			Type: portal.OpRead, Slot: slots[0], Cookie: 1,
			Remote: netip.MustParseAddr(f[1]), RemoteRegion: abi.RegionID(region), Key: kd,
			Local: sink, Length: 64,
		}); err != nil {
			fmt.Println("status", err)
			continue
		}
		cpl := make([]abi.Completion, 1)
		for {
			n, err := p1.Poll(cpl)
			if err != nil {
				fmt.Println("poll", err)
				return 1
			}
			if n > 0 {
				break
			}
		}
		fmt.Printf("status %s %d\n", cpl[0].Status, sink.Bytes()[0])
	}
	return 0
}

// TestIdentityAcrossPIDNamespaces: an engine in a PID namespace of its
// own (a container) sees every application in another namespace as PID 0
// (SO_PEERCRED). Its identities come from the applications' pidfds
// instead: three applications, each in a PID namespace of its own (each
// is PID 1 there), get three distinct identities, each the same for both
// of its portals; the K_d an owner derives for one does not authenticate
// another's reads (REMOTE_AUTHENTICATION_FAILURE); rmactl, a process of
// its own, gets an identity of its own.
func TestIdentityAcrossPIDNamespaces(t *testing.T) {
	needEngines(t)
	dir := t.TempDir()
	oa, ob := testbed.MemifPair(rmadBin, dir, "e2e-ida", "e2e-idb", ipA.String(), ipB.String())
	oa.Extra, ob.Extra = relaxed, relaxed
	oa.PIDNS = true
	a := start(t, oa)
	b := start(t, ob)
	owner := dial(t, b, "owner")
	src := ownerRegion(t, owner, 4096, abi.PermRemoteRead)

	apps := []*nsApp{startNSApp(t, a.Socket), startNSApp(t, a.Socket), startNSApp(t, a.Socket)}
	seen := map[uint32]int{}
	for i, app := range apps {
		if app.getpid != 1 {
			t.Fatalf("app %d has PID %d: not in a PID namespace of its own", i, app.getpid)
		}
		if app.id1 < ctl.FirstIdentity || app.id2 != app.id1 {
			t.Fatalf("app %d: identities %d and %d of its two portals (want one, >= %d)", i, app.id1, app.id2, ctl.FirstIdentity)
		}
		if j, dup := seen[app.id1]; dup {
			t.Fatalf("apps %d and %d share identity %d", j, i, app.id1)
		}
		seen[app.id1] = i
	}
	kd := func(app *nsApp) aesni.Key { return src.DeriveKey(app.addr, app.id1, abi.OpRead) }
	ok := fmt.Sprintf("status %s %d", abi.StatusOK, pattern(0))
	auth := fmt.Sprintf("status %s 0", abi.StatusRemoteAuthFailure)
	for i, app := range apps {
		if got := app.read(ipB, src.ID(), kd(app)); got != ok {
			t.Fatalf("app %d with its own K_d: %q, want %q", i, got, ok)
		}
		other := apps[(i+1)%len(apps)]
		if got := app.read(ipB, src.ID(), kd(other)); got != auth {
			t.Fatalf("app %d with app %d's K_d: %q, want %q", i, (i+1)%len(apps), got, auth)
		}
	}

	// rmactl in a PID namespace of its own, twice: two processes, two
	// identities, never one of the apps'.
	var last uint32
	for range 2 {
		cmd := exec.Command(rmactlBin, "-socket", a.Socket, "identity")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rmactl identity: %v\n%s", err, out)
		}
		var n uint32
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "pid "); ok {
				if _, err := fmt.Sscan(v, &n); err != nil {
					t.Fatalf("line %q", l)
				}
			}
		}
		if _, dup := seen[n]; dup || n <= last || n < ctl.FirstIdentity {
			t.Fatalf("rmactl identity: pid %d (apps %v, previous rmactl %d)\n%s", n, seen, last, out)
		}
		last = n
	}
}
