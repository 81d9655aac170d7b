package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
)

// memifNote says how two engines and an application share two cores: each
// engine busy-polls its own CPU, and the application, on CPU 0, sleeps on
// its portal's completion doorbell and is woken by the engine (three busy
// pollers on two cores would time-slice in milliseconds).
const memifNote = "engines busy on CPU 0 and 1; app on CPU 0 sleeps on the completion doorbell"

// memifRun starts two engines on a memif wire, an rmaperf server on the
// serving engine, and measures specs.
func memifRun(rmad, rmaperf, dir string, specs []spec, dur time.Duration, emit emitFunc) error {
	oa, ob := testbed.MemifPair(rmad, dir, "bench-ma", "bench-mb", "10.99.1.1", "10.99.1.2")
	return pinnedPair(rmaperf, oa, ob, "memif", specs, dur, memifNote, emit)
}

// pinnedPair starts engines oa and ob busy on CPU 0 and CPU 1, an
// rmaperf server on ob, and measures specs from oa for dur each, setup
// and note naming the rows.
func pinnedPair(rmaperf string, oa, ob testbed.Options, setup string, specs []spec, dur time.Duration, note string, emit emitFunc) error {
	p, err := startPinnedPair(rmaperf, oa, ob)
	if err != nil {
		return err
	}
	defer p.stop()
	for _, s := range specs {
		r, err := p.run(rmaperf, s, dur, setup)
		if err != nil {
			return err
		}
		r.Note = addNote(r.Note, note)
		emit(r)
	}
	return nil
}

// enginePair is two engines busy on CPU 0 (a, the client's) and CPU 1
// (b), and an rmaperf server owning a region on b.
type enginePair struct {
	a, b *testbed.Engine
	srv  *perfServer
}

// startPinnedPair starts engines oa and ob busy on CPU 0 and CPU 1 and an
// rmaperf server on ob.
func startPinnedPair(rmaperf string, oa, ob testbed.Options) (*enginePair, error) {
	oa.Busy, oa.CPU = true, 0
	ob.Busy, ob.CPU = true, 1
	// Neither CPU is an engine's alone: the app shares CPU 0 with engine
	// A, and each engine's other threads (Go runtime, control plane) run
	// on the other engine's CPU. At rmad's default nice for a pinned busy
	// loop (-20) they would get ~1 % of it.
	oa.Extra = []string{"-log-level", "warn", "-poll-nice", "0"}
	ob.Extra = oa.Extra
	a, err := testbed.Start(oa)
	if err != nil {
		return nil, err
	}
	b, err := testbed.Start(ob)
	if err != nil {
		a.Stop(10 * time.Second)
		return nil, err
	}
	srv, err := startPerfServer(rmaperf, b.Socket)
	if err != nil {
		b.Stop(10 * time.Second)
		a.Stop(10 * time.Second)
		return nil, err
	}
	return &enginePair{a: a, b: b, srv: srv}, nil
}

// run measures s from engine a against the server's region on b for dur.
func (p *enginePair) run(rmaperf string, s spec, dur time.Duration, setup string) (Row, error) {
	return rmaperfRun(rmaperf, "0", s, dur, setup, p.srv.cliCreds, "-socket", p.a.Socket, "-server", p.srv.kx, "-region", p.srv.region, "-event", "-spins=-1")
}

// stop stops the server and both engines.
func (p *enginePair) stop() {
	p.srv.stop()
	p.b.Stop(10 * time.Second)
	p.a.Stop(10 * time.Second)
}

// perfServer is an rmaperf server on an engine: it owns a region there
// and serves each client its K_d over TLS 1.3; both get their credentials
// from this process over an inherited pipe.
type perfServer struct {
	region, kx string            // the region's id and the key server's address, for the clients' -region and -server
	cliCreds   *keyx.Credentials // a client's credentials
	stop       func()
}

// startPerfServer starts an rmaperf server on the engine at socket and
// waits until it serves.
func startPerfServer(rmaperf, socket string) (*perfServer, error) {
	return startPerfServerAttr(rmaperf, socket, nil)
}

// startPerfServerAttr is startPerfServer with the server's process
// attributes (its uid, for one) attr; nil: this process's.
func startPerfServerAttr(rmaperf, socket string, attr *syscall.SysProcAttr, args ...string) (*perfServer, error) {
	srvCreds, cliCreds, err := keyx.NewPair("rmaperf", 0)
	if err != nil {
		return nil, err
	}
	// The client's certificate names no engine address: granted for any.
	srv := exec.Command(rmaperf, append([]string{"server", "-socket", socket, "-listen", "127.0.0.1:0", "-grant", cliCreds.Name() + "=read+write@any"}, args...)...)
	srv.SysProcAttr = attr
	fd, closeAfter, err := keyx.Attach(srv, srvCreds)
	if err != nil {
		return nil, err
	}
	srv.Args = append(srv.Args, "-creds-fd", strconv.Itoa(fd))
	srv.Stderr = os.Stderr
	srvOut, err := srv.StdoutPipe()
	if err != nil {
		return nil, err
	}
	err = srv.Start()
	closeAfter()
	if err != nil {
		return nil, err
	}
	copied := make(chan struct{})
	first := make(chan string, 1)
	go func() {
		defer close(copied)
		br := bufio.NewReader(srvOut)
		l, _ := br.ReadString('\n')
		fmt.Fprint(os.Stderr, l)
		first <- l
		io.Copy(os.Stderr, br)
	}()
	stop := func() { srv.Process.Signal(os.Interrupt); <-copied; srv.Wait() }
	// "rmaperf server: region 0x10001 (N bytes) on IP, K_d served over TLS 1.3 on ADDR"
	var region, kx string
	select {
	case l := <-first:
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "region" {
			stop()
			return nil, fmt.Errorf("rmaperf server said %q", l)
		}
		region, kx = f[3], f[len(f)-1]
	case <-time.After(60 * time.Second):
		stop()
		return nil, errors.New("rmaperf server not ready after 60 s")
	}
	return &perfServer{region: region, kx: kx, cliCreds: cliCreds, stop: stop}, nil
}
