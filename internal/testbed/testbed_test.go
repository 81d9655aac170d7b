package testbed

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestStaleMemifSocket(t *testing.T) {
	a, b := MemifPair("rmad", "/d", "x", "y", "10.0.0.1", "10.0.0.2")
	for _, c := range []struct{ vdev, want string }{
		{a.Vdev, "/d/x-y.memif"},
		{b.Vdev, ""}, // the client's: the server's to remove
		{"net_memif0,role=server,id=0,socket=/s.memif", ""}, // abstract (DPDK's default): no file
		{"net_ring0", ""},
	} {
		if got := staleMemifSocket(c.vdev); got != c.want {
			t.Errorf("%q: %q, want %q", c.vdev, got, c.want)
		}
	}
}

// TestStartKeepOutlivesThreads: a child started with a Pdeathsig through
// StartKeep survives goroutines that end their locked threads (one of
// which could be the thread a plain cmd.Start forked it from).
func TestStartKeepOutlivesThreads(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := StartKeep(cmd); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for range 64 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			close(done)
		}()
		<-done
		runtime.Gosched()
	}
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child died with a thread: %v", err)
	}
	var ws syscall.WaitStatus
	if pid, _ := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid != 0 {
		t.Fatalf("the child exited: %v", ws)
	}
}
