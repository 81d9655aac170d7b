package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// The floor of a control call: a request and its reply between two
// processes over a unix SOCK_SEQPACKET socket (the control socket's
// kind), each side a Go program blocked in its read, the echoing child in
// a session of its own (as the testbed's rmad in backoff), no work
// between. A rekey through rmad's control socket (fig14-rekey-call) is
// this round trip plus the engine's and the portal's work.

// sockFloorMsg is the size of a rekey request (ctlmsg.EncodeRequest).
const sockFloorMsg = 86

// socketFloor times n round trips of a sockFloorMsg-byte datagram to a
// child process that echoes it, and returns the row (setup
// fig14-socket-floor).
func socketFloor(n int) (Row, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return Row{}, err
	}
	cf := os.NewFile(uintptr(fds[1]), "child-end")
	pf := os.NewFile(uintptr(fds[0]), "parent-end")
	defer pf.Close()
	self, err := os.Executable()
	if err != nil {
		cf.Close()
		return Row{}, err
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), childEnv+"=echo")
	child.ExtraFiles = []*os.File{cf} // fd 3
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	err = child.Start()
	cf.Close()
	if err != nil {
		return Row{}, err
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	c, err := net.FileConn(pf)
	if err != nil {
		return Row{}, err
	}
	defer c.Close()
	msg, buf := make([]byte, sockFloorMsg), make([]byte, 2*sockFloorMsg)
	const warmup = 200
	ns := make([]int64, 0, n)
	start := time.Now()
	for i := range n + warmup {
		t0 := time.Now()
		if i == warmup {
			start = t0
		}
		c.SetDeadline(t0.Add(5 * time.Second))
		if _, err := c.Write(msg); err != nil {
			return Row{}, fmt.Errorf("socket floor: %w", err)
		}
		if k, err := c.Read(buf); err != nil || k != len(msg) {
			return Row{}, fmt.Errorf("socket floor: the echo: %d bytes, %v", k, err)
		}
		if i >= warmup {
			ns = append(ns, int64(time.Since(t0)))
		}
	}
	elapsed := time.Since(start)
	r := fig14LatRow("fig14-socket-floor", "xproc_socket", ns, fmt.Sprintf("a %d-byte datagram to a Go process that echoes it, over a unix SOCK_SEQPACKET socket, back to back (the floor of a control call; fig14-rekey-call's is this plus the engine's and the portal's work)", sockFloorMsg))
	r.System, r.Size, r.Seconds, r.OpsPerSec = "host", sockFloorMsg, elapsed.Seconds(), float64(len(ns))/elapsed.Seconds()
	r.Command = "rmabench (parent: write, then read, on one end of a socketpair; child process in a session of its own: read, write back)"
	return r, nil
}

// echoChild is socketFloor's child: it echoes every datagram on fd 3
// until the socket closes.
func echoChild() error {
	c, err := net.FileConn(os.NewFile(3, "socket"))
	if err != nil {
		return fmt.Errorf("echo child: %w", err)
	}
	buf := make([]byte, 4096)
	for {
		c.SetDeadline(time.Now().Add(childLimit))
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return errors.New("echo child: idle for " + childLimit.String())
			}
			return nil
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return nil
		}
	}
}
