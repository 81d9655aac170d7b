package kvload

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server is a peer's server process (memcached or redis-server) on a
// loopback TCP port, started for a benchmark or a test and stopped by it.
type Server struct {
	Name string   // "memcached", "redis"
	Addr string   // 127.0.0.1:port
	Args []string // its command line
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan error
}

// lockedBuffer is the server's output, written by exec's copier while
// Stop may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// MemcachedBin and RedisBin are the peers' programs (Debian's memcached
// and redis-server packages; scripts/setup.sh installs them).
const (
	MemcachedBin = "memcached"
	RedisBin     = "redis-server"
)

// StartMemcached starts memcached on a free loopback port with memoryMB of
// item memory and threads worker threads (0: one per CPU), TCP only.
func StartMemcached(memoryMB, threads int) (*Server, error) {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "0",
		"-m", strconv.Itoa(memoryMB), "-t", strconv.Itoa(threads), "-c", "4096"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root") // memcached refuses root without it
	}
	return start("memcached", MemcachedBin, port, args)
}

// StartRedis starts redis-server on a free loopback port, without
// persistence (no RDB snapshots, no AOF) and with maxMemoryMB of memory
// for data (0: no limit), its working directory dir.
func StartRedis(dir string, maxMemoryMB int) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--protected-mode", "no", "--daemonize", "no", "--dir", dir, "--logfile", ""}
	if maxMemoryMB > 0 {
		args = append(args, "--maxmemory", strconv.Itoa(maxMemoryMB)+"mb", "--maxmemory-policy", "allkeys-lru")
	}
	return start("redis", RedisBin, port, args)
}

func start(name, bin string, port int, args []string) (*Server, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (scripts/setup.sh installs it)", bin, err)
	}
	s := &Server{Name: name, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Args: append([]string{bin}, args...),
		cmd: exec.Command(path, args...), out: &lockedBuffer{}, done: make(chan error, 1)}
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// Its own process group: a signal to the benchmark's group (^C)
	// leaves it for Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case werr := <-s.done:
			return nil, fmt.Errorf("%s exited before listening on %s: %v\n%s", bin, s.Addr, werr, s.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s: not listening on %s after 10 s\n%s", bin, s.Addr, s.out.String())
		}
	}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Command is the server's command line, an empty argument as "".
func (s *Server) Command() string {
	a := make([]string, len(s.Args))
	for i, v := range s.Args {
		if v == "" {
			v = `""`
		}
		a[i] = v
	}
	return strings.Join(a, " ")
}

// Stop ends the server (SIGTERM, SIGKILL after 5 s) and waits for it.
func (s *Server) Stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	s.cmd.Process.Kill()
	<-s.done
	return errors.New(s.Name + ": did not end on SIGTERM within 5 s; killed")
}

// freePort returns a loopback TCP port free now (another process may
// take it before the server binds it; the server then fails to start,
// loudly).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
