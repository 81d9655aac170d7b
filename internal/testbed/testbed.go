// Package testbed starts real OneRMA engines (rmad processes over DPDK
// vdevs) for the demo, the integration tests and the benchmarks: memif
// wires, net_ring loopback ports, and af_packet and AF_XDP ports on veth
// pairs between network namespaces; a routed topology of namespaces
// (Routed: two subnets joined by a Linux router, engines on af_packet,
// AF_XDP and net_tap ports); engines on net_tap ports joined by one
// bridge (TapLAN); and rmatop processes watching them. It only
// orchestrates processes and the kernel's network configuration; it knows
// the engine through its command line and control socket.
package testbed

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options describe one engine process.
type Options struct {
	Rmad     string // path to the rmad binary
	Dir      string // directory for the control socket and log
	Name     string // short unique name: file prefix onerma-<Name>, log <Name>.log
	IP       string // engine IPv4 address
	PortName string // DPDK ethdev name, e.g. net_memif0
	Vdev     string // --vdev argument creating it
	NetNS    string // run inside this network namespace ("": the current one)
	Busy     bool   // pinned busy polling (benchmarks); default idle backoff
	// Mode, when set, is the poll mode in place of Busy's: "busy",
	// "backoff" or "yield" (spin, sched_yield when idle: CPUs shared with
	// other busy threads).
	Mode string
	CPU  int // CPU for the polling thread (-1: none)
	// IVState is the engine's IV counter state file ("": <Dir>/<Name>.iv,
	// so every engine of a test has its own, and a restarted engine of the
	// same Name and Dir resumes its counters).
	IVState string
	Extra   []string
	// Env holds more environment variables for rmad, KEY=VALUE (e.g.
	// GOMAXPROCS=4), beside this process's (not for a Container).
	Env []string

	// PIDNS runs the engine in a PID namespace of its own (as in a
	// container): it sees no process outside it, so SO_PEERCRED gives it
	// PID 0 for every application.
	PIDNS bool

	// Container runs the engine in a container of this image instead (its
	// rmad; Rmad is not used), in NetNS if set, with Dir mounted at the
	// same path and hugetlbfs when the EAL uses huge pages.
	Container *Container
}

// IVStatePath is the IV state file an engine started with o uses.
func (o *Options) IVStatePath() string {
	if o.IVState != "" {
		return o.IVState
	}
	return filepath.Join(o.Dir, o.Name+".iv")
}

// Engine is a running rmad process.
type Engine struct {
	Opt     Options
	Socket  string
	LogPath string
	cmd     *exec.Cmd
	pid     int        // rmad's host PID
	ctr     *Container // nil: rmad runs as a process of the host
	done    chan struct{}
	waitErr error
	killed  bool // ended by Kill: its exit status is expected
	mu      sync.Mutex
}

// HugepagesFree reports free 2 MB hugepages and whether hugetlbfs is mounted.
func HugepagesFree() (int, bool) {
	free := 0
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "HugePages_Free:") {
				free, _ = strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "HugePages_Free:")))
			}
		}
	}
	mounted := false
	if b, err := os.ReadFile("/proc/mounts"); err == nil {
		mounted = bytes.Contains(b, []byte(" hugetlbfs "))
	}
	return free, mounted
}

// EALArgs returns EAL arguments for an engine named name: hugepages when
// there are enough (64 MB), else --no-huge. A file prefix (not
// --in-memory) because memif needs the multi-process channel.
func EALArgs(name string) []string {
	args := []string{"--no-pci", "--file-prefix=onerma-" + name, "--lcores=0@(0-1)"}
	if free, mounted := HugepagesFree(); mounted && free >= 48 {
		return append(args, "-m", "64", "--huge-unlink")
	}
	return append(args, "--no-huge", "-m", "128")
}

// SocketPath is the control socket of an engine started with o.
func (o *Options) SocketPath() string { return filepath.Join(o.Dir, o.Name+".sock") }

// Args are rmad's arguments for an engine started with o (Start runs it
// with them; a caller that runs rmad itself, as for rmad -selftest, adds
// its own after them: later flags override earlier ones).
func (o *Options) Args() []string {
	mode := o.pollMode()
	args := []string{
		"-eal", strings.Join(EALArgs(o.Name), " "),
		"-port-name", o.PortName, "-vdev", o.Vdev,
		"-ip", o.IP, "-socket", o.SocketPath(), "-poll-mode", mode,
		"-cpu", strconv.Itoa(o.CPU),
		"-iv-state", o.IVStatePath(),
	}
	return append(args, o.Extra...)
}

// pollMode is rmad's -poll-mode for o.
func (o *Options) pollMode() string {
	switch {
	case o.Mode != "":
		return o.Mode
	case o.Busy:
		return "busy"
	}
	return "backoff"
}

// Start launches rmad and waits until its control socket accepts.
func Start(o Options) (*Engine, error) {
	if o.Rmad == "" && o.Container == nil {
		return nil, errors.New("testbed: no rmad binary")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	e := &Engine{Opt: o, Socket: o.SocketPath(), LogPath: filepath.Join(o.Dir, o.Name+".log"), done: make(chan struct{})}
	eal := EALArgs(o.Name)
	args := o.Args()
	switch {
	case o.Container != nil:
		e.ctr = o.Container.forEngine(o, !slices.Contains(eal, "--no-huge"))
		e.cmd = e.ctr.Command(args...)
	case o.NetNS != "":
		e.cmd = exec.Command("ip", append([]string{"netns", "exec", o.NetNS, o.Rmad}, args...)...)
	default:
		e.cmd = exec.Command(o.Rmad, args...)
	}
	if sock := staleMemifSocket(o.Vdev); sock != "" {
		// A memif server refuses a socket path that exists (EADDRINUSE);
		// the engine before it on this wire may have left it behind.
		os.Remove(sock)
	}
	if len(o.Env) > 0 {
		e.cmd.Env = append(os.Environ(), o.Env...)
	}
	logf, err := os.Create(e.LogPath)
	if err != nil {
		return nil, err
	}
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	// A session of its own: with the kernel's autogroup scheduling
	// (sched_autogroup_enabled), a session's processes share one group
	// whose weight is spread over the CPUs by their load, and a busy
	// engine's polling thread at nice -20 then leaves the session's other
	// processes (the applications, the test) a few percent of any CPU
	// that another session also wants.
	//
	// Not for an engine in poll mode yield: it shares its CPU with an
	// application by sched_yield, which on this kernel (EEVDF) moves the
	// yielding thread back only within its own group, the autogroup of
	// its session. In a session of its own the engine keeps the CPU from
	// the application for milliseconds at a time: kvload's open-loop GETs
	// over memif go out late and some fail with no replica answering,
	// where in the launcher's session none fail (bench/RESULTS.md, kv).
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: o.pollMode() != "yield"}
	if o.PIDNS {
		e.cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	if err := StartKeep(e.cmd); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		err := e.cmd.Wait()
		logf.Close()
		e.mu.Lock()
		e.waitErr = err
		e.mu.Unlock()
		close(e.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-e.done:
			return nil, fmt.Errorf("testbed: rmad %s exited during start-up: %v\n%s", o.Name, e.exitErr(), e.Tail(30))
		default:
		}
		if c, err := net.Dial("unixpacket", e.Socket); err == nil {
			c.Close()
			if e.ctr == nil {
				e.pid = e.cmd.Process.Pid
			} else if e.pid, err = e.ctr.Pid(5 * time.Second); err != nil {
				e.Kill()
				return nil, err
			}
			return e, nil
		}
		if time.Now().After(deadline) {
			e.Kill()
			return nil, fmt.Errorf("testbed: rmad %s not ready after 30 s\n%s", o.Name, e.Tail(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *Engine) exitErr() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.waitErr
}

// Pid is the rmad process id (or the `ip netns exec` wrapper's, which execs
// rmad in place, so it is the same process; in a container, rmad's PID on
// the host).
func (e *Engine) Pid() int { return e.pid }

// Signal sends sig to the engine.
func (e *Engine) Signal(sig os.Signal) error {
	if e.ctr == nil {
		return e.cmd.Process.Signal(sig)
	}
	// rmad in a container: podman run relays only some signals, so they
	// go to rmad itself, by name until its PID is known.
	if e.Exited() {
		return os.ErrProcessDone
	}
	if e.pid == 0 {
		return Podman("kill", "--signal", strconv.Itoa(int(sig.(syscall.Signal))), e.ctr.Name).Run()
	}
	return syscall.Kill(e.pid, sig.(syscall.Signal))
}

// Exited reports whether the process has ended.
func (e *Engine) Exited() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// Stop asks the engine to shut down (SIGTERM) and waits; an engine that
// does not exit cleanly within timeout is killed and reported.
func (e *Engine) Stop(timeout time.Duration) error {
	if e.Exited() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.killed {
			return nil
		}
		return e.waitErr
	}
	e.Signal(syscall.SIGCONT) // a stopped engine cannot handle SIGTERM
	e.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
		if err := e.exitErr(); err != nil {
			return fmt.Errorf("rmad %s: %v\n%s", e.Opt.Name, err, e.Tail(20))
		}
		return nil
	case <-time.After(timeout):
		e.Kill()
		return fmt.Errorf("rmad %s did not stop within %v\n%s", e.Opt.Name, timeout, e.Tail(20))
	}
}

// Kill ends the engine at once (SIGKILL) and waits for it.
func (e *Engine) Kill() {
	if e.Exited() {
		return
	}
	e.mu.Lock()
	e.killed = true
	e.mu.Unlock()
	e.Signal(syscall.SIGKILL)
	<-e.done
	// A killed engine cannot clean up after itself: do what its shutdown
	// would have done with its EAL runtime directory.
	os.RemoveAll(RuntimeDir(e.Opt.Name))
}

// RuntimeDir is the EAL runtime directory of the engine named name.
func RuntimeDir(name string) string { return "/var/run/dpdk/onerma-" + name }

// Tail returns the last n lines of the engine's log.
func (e *Engine) Tail(n int) string {
	f, err := os.Open(e.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// staleMemifSocket is the socket path of vdev when it is a memif server
// with a socket in the file system ("" otherwise): one that an engine
// started with vdev must find absent.
func staleMemifSocket(vdev string) string {
	if !strings.HasPrefix(vdev, "net_memif") {
		return ""
	}
	var sock string
	server, abstract := false, true
	for _, kv := range strings.Split(vdev, ",")[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "role":
			server = v == "server"
		case "socket":
			sock = v
		case "socket-abstract":
			abstract = v != "no"
		}
	}
	if !server || abstract {
		return ""
	}
	return sock
}

// MemifPair returns engine options for the two ends of a memif wire whose
// socket lives in dir: a is the memif server and must start first.
func MemifPair(rmad, dir, nameA, nameB, ipA, ipB string) (a, b Options) {
	sock := filepath.Join(dir, nameA+"-"+nameB+".memif")
	a = Options{Rmad: rmad, Dir: dir, Name: nameA, IP: ipA, PortName: "net_memif0", CPU: -1,
		Vdev: "net_memif0,role=server,id=0,socket=" + sock + ",socket-abstract=no"}
	b = Options{Rmad: rmad, Dir: dir, Name: nameB, IP: ipB, PortName: "net_memif0", CPU: -1,
		Vdev: "net_memif0,role=client,id=0,socket=" + sock + ",socket-abstract=no"}
	return a, b
}

// Loopback returns options for one engine on a net_ring port whose rx and
// tx are the same ring: every frame it sends comes back to it.
func Loopback(rmad, dir, name, ip string) Options {
	return Options{Rmad: rmad, Dir: dir, Name: name, IP: ip, PortName: "net_ring0", Vdev: "net_ring0", CPU: -1}
}

// HugepageFiles lists hugetlbfs files left by engines named onerma-<prefix>*.
func HugepageFiles(prefix string) []string {
	m, _ := filepath.Glob("/dev/hugepages/onerma-" + prefix + "*")
	return m
}

// Freeze stops the engine (SIGSTOP) and returns once the kernel reports it
// stopped, so nothing it does afterwards races the caller. Thaw resumes it.
func (e *Engine) Freeze() error {
	if err := e.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stat := fmt.Sprintf("/proc/%d/stat", e.Pid())
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return err
		}
		// The state follows the parenthesised command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
	}
	return fmt.Errorf("testbed: rmad %s did not stop", e.Opt.Name)
}

// Thaw resumes a frozen engine (SIGCONT).
func (e *Engine) Thaw() error { return e.Signal(syscall.SIGCONT) }
