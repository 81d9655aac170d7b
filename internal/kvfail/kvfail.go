// Package kvfail runs the 1RMA paper's Figure 9 on real engines: a
// client engine and three server engines on one Linux bridge
// (testbed.TapLAN), three `rmakv server` processes holding every key
// (R = 3), and a client (package kv) in this process under steady GET
// load, while one replica fails:
//
//   - CaseProcess: the replica's server process is SIGKILLed; its engine
//     reclaims its regions, and READs of them fail at once with
//     REMOTE_REGION (the engine keeps the regions' tombstones, so it can
//     tell the holders of their keys).
//   - CaseEngine: the replica's engine is SIGKILLed; READs to it end at
//     the client engine's TIMEOUT.
//   - CaseRekey: the replica rekeys its regions (SIGUSR1); READs with the
//     old K_d fail REMOTE_AUTHENTICATION_FAILURE until the client has
//     fetched the new ones.
//
// Every GET's completion time and latency is recorded (Sample); Analyze
// cuts them into windows, counts failed GETs and finds when latency
// settled. The e2e test and `rmakv fig9` (the PNGs) both run it. It needs
// root (taps, a bridge, DPDK).
package kvfail

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

// Case is a kind of failure.
type Case string

const (
	CaseProcess Case = "process" // (a) the server process SIGKILLed
	CaseEngine  Case = "engine"  // (b) the server's engine SIGKILLed
	CaseRekey   Case = "rekey"   // (c) the server's regions rekeyed
	CaseNone    Case = "none"    // nothing fails (a warm-up)
)

// Config describes a bed.
type Config struct {
	Rmad, Rmakv string     // binaries
	Dir         string     // engines' sockets and logs, credentials
	Prefix      string     // names of the bridge, taps and engines (≤ 8 characters, unique)
	Base        netip.Addr // the engines' addresses: Base (the client's), Base+1, ...
	EngineArgs  []string   // extra rmad flags for every engine (timeouts)
	Hedge       bool       // the client hedges past a replica's p99
	InFlight    int        // GETs outstanding (default 8)
	Keys        int        // keys of 16 B (default 2000)
	ValueBytes  int        // (default 32)
	Logf        func(format string, args ...any)
}

// Bed is the running topology: engines, servers and the client.
type Bed struct {
	cfg     Config
	lan     *testbed.TapLAN
	engines []*testbed.Engine // [0] the client's, [1..3] the servers'
	servers []*exec.Cmd       // [i] on engines[i+1]
	addrs   []kv.ServerAddr
	Client  *kv.Client
	keys    [][]byte
	t0      time.Time
}

// Servers is the number of replicas.
const Servers = 3

// Start builds the LAN, starts the four engines and the three servers,
// dials the client and loads the keys.
func Start(cfg Config) (b *Bed, err error) {
	if cfg.InFlight == 0 {
		cfg.InFlight = 8
	}
	if cfg.Keys == 0 {
		cfg.Keys = 2000
	}
	if cfg.ValueBytes == 0 {
		cfg.ValueBytes = 32
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	b = &Bed{cfg: cfg, t0: time.Now()}
	defer func() {
		if err != nil {
			b.Close()
			b = nil
		}
	}()
	if b.lan, err = testbed.NewTapLAN(cfg.Prefix, 1+Servers, cfg.Base); err != nil {
		return nil, err
	}
	for i := range 1 + Servers {
		o := b.lan.Options(i, cfg.Rmad, cfg.Dir)
		o.Extra = append(o.Extra, cfg.EngineArgs...)
		e, err := testbed.Start(o)
		if err != nil {
			return nil, err
		}
		b.engines = append(b.engines, e)
		if err := b.lan.Attach(i); err != nil {
			return nil, err
		}
	}
	screds, ccreds, err := keyx.NewPair("kvfail", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	credsDir := filepath.Join(cfg.Dir, "creds")
	if err := keyx.WriteDir(credsDir, screds, ccreds, true); err != nil {
		return nil, err
	}
	for i := range Servers {
		addr, err := b.startServer(i, credsDir)
		if err != nil {
			return nil, err
		}
		b.addrs = append(b.addrs, kv.ServerAddr{RPC: addr})
	}
	if b.Client, err = kv.Dial(kv.ClientConfig{Socket: b.engines[0].Socket, Name: "kvfail", Servers: b.addrs,
		Replicas: Servers, Credentials: ccreds, MaxInFlight: cfg.InFlight, Hedge: cfg.Hedge, MaxValue: max(cfg.ValueBytes, 1024)}); err != nil {
		return nil, err
	}
	val := make([]byte, cfg.ValueBytes)
	for i := range cfg.Keys {
		k := fmt.Appendf(nil, "kvfail-%09d", i)
		b.keys = append(b.keys, k)
		for j := range val {
			val[j] = byte(i + j)
		}
		if err := b.Client.Set(k, val); err != nil {
			return nil, fmt.Errorf("loading %s: %w", k, err)
		}
	}
	cfg.Logf("bed up in %v: engines %v, servers %v", time.Since(b.t0).Round(time.Millisecond), b.engineAddrs(), b.addrs)
	return b, nil
}

func (b *Bed) engineAddrs() []string {
	var s []string
	for _, h := range b.lan.Hosts {
		s = append(s, h.Addr.String())
	}
	return s
}

// startServer runs `rmakv server` on engine i+1 and returns its RPC
// address, read from the line it prints when it serves.
func (b *Bed) startServer(i int, credsDir string) (string, error) {
	e := b.engines[i+1]
	log, err := os.Create(filepath.Join(b.cfg.Dir, fmt.Sprintf("server%d.log", i)))
	if err != nil {
		return "", err
	}
	cmd := exec.Command(b.cfg.Rmakv, "server", "-socket", e.Socket, "-creds", credsDir, "-listen", "127.0.0.1:0",
		"-buckets", "4096", "-slab", "4194304", "-q")
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := testbed.StartKeep(cmd); err != nil {
		return "", err
	}
	b.servers = append(b.servers, cmd)
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "rmakv: serving rpc ") {
				line <- s.Text()
			}
		}
	}()
	select {
	case l := <-line:
		f := strings.Fields(l)
		return f[3], nil
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("server %d did not start: see %s", i, log.Name())
	}
}

// Sample is one GET.
type Sample struct {
	DoneNs int64 // when it was reported, ns from the failure (negative before)
	LatNs  int64 // from its start to its report
	Err    bool  // it failed (no replica answered)
	Server int8  // the server that answered (-1: none)
	Moved  uint8 // replicas it left after a failed READ (kv.Client.Reported)
}

// Result is one measurement.
type Result struct {
	Case    Case
	Hedge   bool
	Victim  int // the server that failed
	Samples []Sample
	// Stats are the client's counters over the measurement (Replicas:
	// as they were at its end).
	Stats kv.ClientStats
}

// Measure runs GETs of random keys, InFlight outstanding, for before,
// fails server victim as c says, and goes on for after.
func (b *Bed) Measure(c Case, victim int, before, after time.Duration) (*Result, error) {
	cl := b.Client
	n := b.cfg.InFlight
	bufs := make([][]byte, n)
	starts := make([]time.Time, n)
	free := make([]int, 0, n)
	for i := range bufs {
		bufs[i] = make([]byte, 0, max(b.cfg.ValueBytes, 64))
		free = append(free, i)
	}
	res := &Result{Case: c, Hedge: b.cfg.Hedge, Victim: victim, Samples: make([]Sample, 0, 1<<20)}
	start := time.Now()
	fn := func(tag uint64, _ []byte, err error) {
		now := time.Now()
		server, moved := cl.Reported()
		res.Samples = append(res.Samples, Sample{DoneNs: int64(now.Sub(start)), LatNs: int64(now.Sub(starts[tag])),
			Err: err != nil, Server: int8(server), Moved: uint8(moved)})
		free = append(free, int(tag))
	}
	prev := cl.Stats()
	rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), 7))
	failed := make(chan time.Time, 1)
	injected := false
	var failErr error
	for time.Since(start) < before+after {
		if !injected && time.Since(start) >= before {
			injected = true
			go func() {
				at := time.Now()
				failErr = b.fail(c, victim)
				failed <- at
			}()
		}
		for len(free) > 0 {
			k := free[len(free)-1]
			starts[k] = time.Now()
			if err := cl.StartGet(b.keys[rng.IntN(len(b.keys))], bufs[k], uint64(k)); err != nil {
				return nil, err
			}
			free = free[:len(free)-1]
		}
		if _, err := cl.WaitGets(fn); err != nil {
			return nil, err
		}
	}
	for cl.Outstanding() > 0 {
		cl.WaitGets(fn)
	}
	if !injected { // after == 0
		failed <- time.Now()
	}
	at := <-failed
	if failErr != nil {
		return nil, failErr
	}
	off := int64(at.Sub(start))
	for i := range res.Samples {
		res.Samples[i].DoneNs -= off
	}
	res.Stats = since(cl.Stats(), &prev)
	return res, nil
}

// fail makes server victim fail as c says.
func (b *Bed) fail(c Case, victim int) error {
	switch c {
	case CaseProcess:
		return b.servers[victim].Process.Signal(syscall.SIGKILL)
	case CaseEngine:
		b.engines[victim+1].Kill()
		return nil
	case CaseRekey:
		return b.servers[victim].Process.Signal(syscall.SIGUSR1)
	case CaseNone:
		return nil
	}
	return fmt.Errorf("kvfail: case %q unknown", c)
}

// Close stops the client, the servers and the engines and removes the
// bridge.
func (b *Bed) Close() {
	if b.Client != nil {
		b.Client.Close()
	}
	for _, s := range b.servers {
		s.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.Process.Kill()
			<-done
		}
	}
	for _, e := range b.engines {
		if err := e.Stop(10 * time.Second); err != nil {
			b.cfg.Logf("stopping %s: %v", e.Opt.Name, err)
		}
	}
	if b.lan != nil {
		b.lan.Close()
	}
}

// since is s less the counters of prev (the replicas' as in s).
func since(s kv.ClientStats, prev *kv.ClientStats) kv.ClientStats {
	s.Gets -= prev.Gets
	s.Hits -= prev.Hits
	s.Misses -= prev.Misses
	s.Errors -= prev.Errors
	s.Retries -= prev.Retries
	s.Corrupt -= prev.Corrupt
	s.Hedges -= prev.Hedges
	s.HedgeWins -= prev.HedgeWins
	s.Sets -= prev.Sets
	s.Deletes -= prev.Deletes
	for i := range s.Failovers {
		s.Failovers[i] -= prev.Failovers[i]
	}
	return s
}
