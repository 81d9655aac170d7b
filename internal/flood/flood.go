// Package flood is a test helper for services that must outlive a flood
// of connections (keyx.Server, kv.Server): a child process that opens
// many TCP connections to a service and holds them, never sending a
// byte, and a lowered descriptor limit for the test process, so that the
// service's accept fails with EMFILE while the child holds them.
//
// The child is the test binary itself, run again: a test binary that
// imports this package and finds ONERMA_FLOOD_ADDR in its environment
// floods that address (init, before any test) and exits.
package flood

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	envAddr = "ONERMA_FLOOD_ADDR"
	envN    = "ONERMA_FLOOD_CONNS"
)

func init() {
	if addr := os.Getenv(envAddr); addr != "" {
		n, _ := strconv.Atoi(os.Getenv(envN))
		os.Exit(child(addr, n))
	}
}

// child waits for a line on stdin, dials n connections to addr (the
// kernel completes them from the listener's queue whether or not the
// service accepts), prints "held K", and holds them until stdin ends.
func child(addr string, n int) int {
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 2
	}
	var conns []net.Conn
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Fprintln(os.Stderr, "flood:", err)
			break
		}
		conns = append(conns, c)
	}
	fmt.Printf("held %d\n", len(conns))
	io.Copy(io.Discard, in)
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// A Flood is a child process holding connections to a service.
type Flood struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	addr  string
	n     int
}

// Start starts the child that will open n connections to addr (Go).
// Start it before LowerFileLimit: the child inherits the limit in force
// when it starts.
func Start(t testing.TB, addr string, n int) *Flood {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAddr+"="+addr, envN+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &Flood{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), addr: addr, n: n}
	t.Cleanup(f.Stop)
	return f
}

// Go has the child open its connections and returns how many it holds.
func (f *Flood) Go(t testing.TB) int {
	t.Helper()
	if _, err := io.WriteString(f.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	l, err := f.out.ReadString('\n')
	var held int
	if _, serr := fmt.Sscanf(strings.TrimSpace(l), "held %d", &held); err != nil || serr != nil {
		t.Fatalf("flood of %s: %q %v %v", f.addr, l, err, serr)
	}
	return held
}

// Stop has the child close its connections and waits for it to exit.
func (f *Flood) Stop() {
	if f.stdin == nil {
		return
	}
	f.stdin.Close()
	f.stdin = nil
	f.cmd.Wait()
}

// OpenFiles is the number of descriptors this process has open.
func OpenFiles(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own, open while it was read
}

// LowerFileLimit sets this process's soft RLIMIT_NOFILE to the
// descriptors it has open plus headroom, and puts the limit back when
// the test ends.
func LowerFileLimit(t testing.TB, headroom int) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(OpenFiles(t) + headroom)
	if low.Cur > old.Cur {
		t.Fatalf("soft descriptor limit %d already below %d", old.Cur, low.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Errorf("restoring RLIMIT_NOFILE: %v", err)
		}
	})
}
