package testbed

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Rmatop is a running rmatop (tools/rmatop) process.
type Rmatop struct {
	// Lines are its stdout's lines; closed when its stdout ends. Read
	// them until closed before Wait: rmatop blocks once 1024 are unread.
	Lines <-chan string

	cmd     *exec.Cmd
	mu      sync.Mutex
	stderr  bytes.Buffer
	exited  chan struct{} // closed once stdout ended and the process was reaped
	waitErr error
}

// StartRmatop runs the rmatop binary with args and returns once it has
// attached its probe (it says "tracing engine" on stderr): an error, with
// its stderr, when it exits first or has not attached within 15 s.
func StartRmatop(bin string, args ...string) (*Rmatop, error) {
	r := &Rmatop{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	r.cmd.Stderr = (*lockedWriter)(r)
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1024)
	r.Lines = lines
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
		close(lines)
		r.waitErr = r.cmd.Wait() // after the last read of stdout, as exec requires
		close(r.exited)
	}()
	deadline := time.After(15 * time.Second)
	for !strings.Contains(r.Stderr(), "tracing engine") {
		select {
		case <-r.exited:
			return nil, fmt.Errorf("rmatop exited before it attached (%v): %s", r.waitErr, r.Stderr())
		case <-deadline:
			r.Kill()
			return nil, fmt.Errorf("rmatop did not attach within 15 s: %s", r.Stderr())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return r, nil
}

// lockedWriter is the Rmatop's stderr sink: exec copies into it from a
// goroutine of its own while Stderr reads it.
type lockedWriter Rmatop

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stderr.Write(b)
}

// Stderr is what rmatop wrote to stderr so far.
func (r *Rmatop) Stderr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// Interrupt asks rmatop to print its last interval and exit (SIGINT).
func (r *Rmatop) Interrupt() error { return r.cmd.Process.Signal(syscall.SIGINT) }

// Wait waits for rmatop to exit; Lines must be drained (or be drained
// by another goroutine) for it to.
func (r *Rmatop) Wait() error {
	<-r.exited
	return r.waitErr
}

// Kill ends rmatop at once, if it still runs, and waits for it, dropping
// its unread lines.
func (r *Rmatop) Kill() {
	select {
	case <-r.exited:
		return
	default:
	}
	r.cmd.Process.Kill()
	for range r.Lines {
	}
	<-r.exited
}
