// Command rmaperf measures OneRMA ops the way perftest and ucx_perftest do.
//
//	rmaperf server    [-socket PATH] (-creds DIR | -creds-fd FD) [-listen 127.0.0.1:18515] [-grant NAME[=OPS][@ADDRS]]... [-region-bytes N] [-name NAME]
//	rmaperf read_bw   [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) -s SIZE -O OUTSTANDING -D DURATION [-json]
//	rmaperf read_lat  [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) -s SIZE -D DURATION [-json]
//	rmaperf write_bw  [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) -s SIZE -O OUTSTANDING -D DURATION [-json]
//	rmaperf write_lat [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) -s SIZE -D DURATION [-json]
//
// -socket is the engine's control socket (default ctlmsg.DefaultSocket;
// -ctl is its old spelling, still accepted).
//
// SIZE is 1..4096 for single ops; larger sizes (or -exec) go through the
// executor (below).
//
// Every client also takes [-name NAME] [-class low|high] (see below) and
// the waiting flags -event, -spins, -yield, -spin (rmaperf CMD -h).
//
// The server registers a region (with a random region key K_r, open to
// remote READ and WRITE) on its engine, prints its id and the key
// service's address, and serves, over mutually authenticated TLS 1.3
// (package keyx), each client's derived key K_d for the op it asks for
// (READ or WRITE) together with the region's id, size and engine address:
// perftest's out-of-band exchange, plus the key of paper §4.2. -listen is
// loopback by default; 0.0.0.0:18515 (or the host's address) serves
// clients on other hosts.
//
// The server grants K_d to the clients -grant names, by their
// certificates' names (keyx.ParsePermit): NAME=OPS (read, write, or
// read+write; read if not given) for the engine addresses NAME's
// certificate holds (`rmactl creds issue -name NAME -ip ADDR`), plus
// @ADDRS (addresses or prefixes joined by +, or any). Any other client
// of the CA is refused (keyx.ErrNotGranted), as is a K_d for an address
// the client was not granted (keyx.ErrAddress). Without -grant it
// grants the client of -creds DIR (DIR/client.pem, onerma-client as
// `rmactl creds DIR` issues it) READ and WRITE for any address, so that
// `rmactl creds DIR` and its client.pem carried to the client hosts work
// as they are. Its third line lists the permits.
//
// Both ends take their TLS credentials from a directory `rmactl creds DIR`
// wrote (-creds DIR: the server reads DIR/server.pem, a client
// DIR/client.pem; keyx.LoadServer, keyx.LoadClient), or from a launcher
// (rmabench) on an inherited descriptor (-creds-fd; keyx.Attach), never
// from the command line or the environment. A client verifies that the
// server's certificate names the host of -server (rmactl creds -host).
//
// A client opens a portal on its own engine and keeps OUTSTANDING ops in
// flight (the _lat tests: one): read_* READ SIZE bytes of the remote
// region into a local sink, write_* WRITE SIZE bytes from its own
// registered region (PermLocalRead) into the remote region (the four-hop
// WRITE of paper §5.1; K_d derived for abi.OpWrite). It reports ops/s,
// MB/s and latency percentiles measured by the application from post to
// completion, and counts every non-OK completion in errors (the first
// status goes in the note); the -json row of a raw test also has
// cpu_ns_per_op, this process's CPU time (getrusage, every thread) over
// the measured interval per op, as onerma-perf (libonerma/tools, its C
// twin) reports it. -self targets a region of the client's own
// engine (single-engine loopback) and derives its K_d in process.
//
// Transfers larger than one op (-s above 4096, up to gigabytes), or any
// size with -exec, go through portal.Executor (the CommandExecutor of
// paper §4.4): each transfer is split into ops of at most 4 KB, pipelined
// within the congestion window of package cc, paced and retried. Then -O
// is the number of transfers kept in flight (default 2, each by its own
// goroutine, sharing one executor), ops_per_sec counts transfers,
// mb_per_sec is their goodput and the latency percentiles are per
// transfer; eng_p50_us is not reported. -exec-slots sets the executor's command slots, -chunk
// its op size, the -cc-* flags its congestion control parameters (paper
// §6) and -timeout-retries its TIMEOUT retries. The executor waits for
// completions as portal.Wait does: it spins (-spins polls) and then
// sleeps on the engine's completion doorbell; -spin, -yield and -event
// do not apply to it. -rate R makes it open loop (paper Fig. 12):
// transfers arrive Poisson at R per second, up to -O (default 8) are
// served at once (latency from post; the note says how late arrivals were
// posted); -bg
// SIZE keeps one transfer of SIZE bytes going through the same executor
// meanwhile (head-of-line pressure).
//
// -name is the application name the client presents to its engine when
// it opens its portal (default "rmaperf"; the engine's slot and class
// policy rules match on it), -class the class of service it asks for
// (paper §4.3: low, the default, or high; an engine whose policy does not
// grant the class refuses the portal).
//
// -dst ADDR (raw tests) sends every op to ADDR instead of the target
// region's engine, with the same K_d: toward an address no engine
// answers (an engine's static neighbour entry with no host behind it),
// each op holds its share of the solicitation window until TIMEOUT
// (rmabench's noisy-neighbour setups).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/cc"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/internal/pattern"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

func main() {
	cli.Exit("rmaperf", rmaperf(os.Args[1:]))
}

var (
	synopsis = []string{
		"rmaperf server    [-socket PATH] (-creds DIR | -creds-fd FD) [-listen HOST:PORT] [-grant NAME[=OPS][@ADDRS]]... [-region-bytes N] [-name NAME]",
		"rmaperf read_bw   [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) [-s SIZE] [-O N] [-D DURATION] [-json]",
		"rmaperf read_lat  [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) [-s SIZE] [-D DURATION] [-json]",
		"rmaperf write_bw  [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) [-s SIZE] [-O N] [-D DURATION] [-json]",
		"rmaperf write_lat [-socket PATH] (-server HOST:PORT -region ID (-creds DIR | -creds-fd FD) | -self) [-s SIZE] [-D DURATION] [-json]",
	}
	serverExample = "rmaperf server -creds ~/onerma-creds -listen 0.0.0.0:18515"
	clientExample = "rmaperf read_bw -server hosta.example:18515 -region 0x10001 -creds ~/onerma-creds -s 4096 -O 16 -D 10s"
	selfExample   = "rmaperf read_lat -self -s 64 -D 5s -json"
)

// usage is rmaperf's own usage text; each command prints its flags.
func usage(w io.Writer) {
	cli.PrintHeader(w, synopsis, "rmaperf CMD -h lists a command's flags.", []string{serverExample, clientExample, selfExample})
}

// rmaperf runs the command args name.
func rmaperf(args []string) error {
	if len(args) < 1 {
		usage(os.Stderr)
		return cli.ErrUsage
	}
	switch args[0] {
	case "server":
		return server(args[1:])
	case "read_bw", "read_lat", "write_bw", "write_lat":
		return client(args[0], args[1:])
	case "-h", "-help", "--help", "help":
		usage(os.Stderr)
		return flag.ErrHelp
	}
	fmt.Fprintf(os.Stderr, "rmaperf: unknown command %q\n", args[0])
	usage(os.Stderr)
	return cli.ErrUsage
}

// serverOptions are rmaperf server's flags.
type serverOptions struct {
	socket, listen, credsDir, name string
	credsFD                        int
	regionBytes                    uint64
	verbose                        bool
	grants                         permitsFlag
}

func parseServer(args []string, stderr io.Writer) (*serverOptions, error) {
	o := &serverOptions{}
	fs := cli.New("rmaperf server", strings.Join(strings.Fields(synopsis[0]), " "))
	fs.Example(serverExample)
	fs.SetOutput(stderr)
	fs.StringVar(&o.socket, "socket", ctlmsg.DefaultSocket, "engine control socket")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:18515", "TCP address of the TLS key service (0.0.0.0:18515 or the host's address: clients on other hosts)")
	fs.StringVar(&o.credsDir, "creds", "", "directory of the server's TLS credentials (DIR/server.pem, from rmactl creds DIR)")
	fs.IntVar(&o.credsFD, "creds-fd", -1, "inherited descriptor carrying the server's TLS credentials (from a launcher)")
	fs.Uint64Var(&o.regionBytes, "region-bytes", 1<<20, "size of the served region")
	fs.BoolVar(&o.verbose, "v", false, "log every K_d granted (never the key)")
	fs.StringVar(&o.name, "name", "rmaperf-server", "application name presented to the engine")
	fs.Var(&o.grants, "grant", "a client granted K_d, NAME[=OPS][@ADDRS]: OPS read, write or both joined by +, default read; ADDRS addresses or prefixes joined by +, or any, granted beyond its certificate's; repeat for each client (default: the client of -creds DIR, read+write@any)")
	fs.Alias("ctl", "socket")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("server: unexpected arguments %q", fs.Args())
	}
	if o.regionBytes == 0 {
		return nil, errors.New("-region-bytes 0: want at least 1")
	}
	return o, nil
}

func server(args []string) error {
	o, err := parseServer(args, os.Stderr)
	if err != nil {
		return err
	}
	creds, err := loadCreds(o.credsDir, o.credsFD, true)
	if err != nil {
		return err
	}
	p, err := portal.Dial(o.socket, o.name)
	if err != nil {
		return err
	}
	defer p.Close()
	// Open to remote READ and WRITE: the key service grants a K_d for an
	// op only when the region allows it.
	r, err := p.RegisterRegion(o.regionBytes, abi.PermRemoteRead|abi.PermRemoteWrite|abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		return err
	}
	pattern.Fill(r.Bytes(), 0)
	permits := []keyx.Permit(o.grants)
	if len(permits) == 0 {
		permit, err := keyx.DirPermit(o.credsDir, keyx.Read|keyx.Write)
		if err != nil {
			return err
		}
		permits = []keyx.Permit{permit}
	}
	cfg := keyx.Config{Credentials: creds, Owner: p.Identity().Addr, Permits: permits,
		Logf: func(format string, args ...any) {
			if o.verbose {
				fmt.Fprintf(os.Stderr, "rmaperf server: "+format+"\n", args...)
			}
		}}
	srv, err := keyx.NewServer(cfg)
	if err != nil {
		return err
	}
	srv.Add(r)
	ap, err := srv.Start(o.listen)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("rmaperf server: region %#x (%d bytes) on %s, K_d served over TLS 1.3 on %s\n", uint32(r.ID()), o.regionBytes, p.Identity().Addr, ap)
	// Clients verify that the certificate names the host they dial.
	cert := creds.Certificate()
	hosts := slices.Clone(cert.DNSNames)
	for _, ip := range cert.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	fmt.Printf("rmaperf server: clients: -server HOST:%d -region %#x, HOST one of the certificate's names: %s\n", ap.Port(), uint32(r.ID()), strings.Join(hosts, ", "))
	fmt.Printf("rmaperf server: permits (-grant): %s\n", (*permitsFlag)(&permits).String())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return nil
}

// target is what a client reads or writes: where, which region, how
// large, with which K_d.
type target struct {
	peer   netip.Addr
	region abi.RegionID
	bytes  uint64
	key    aesni.Key
	mem    []byte // with -self: the target region's memory (to verify writes)
}

// clientOptions are the flags of rmaperf's tests, and what follows from
// them.
type clientOptions struct {
	socket, server, credsDir, regionFlag, setup, name, classFlag, dstFlag string
	credsFD, size, bg, outstanding, spins, moderate                       int
	self, useExec, verify, spin, yield, event, asJSON                     bool
	rate                                                                  float64
	dur, warm, moderatePeriod                                             time.Duration
	regionBytes, localBytes                                               uint64

	op       abi.Op
	class    abi.Class
	execMode bool // transfers through portal.Executor
	ecfg     portal.ExecutorConfig
	region   uint64     // -region, with -server
	dst      netip.Addr // -dst: where the ops go instead of the target's engine (invalid: there)
}

// execFlags names the flag that sets each executor config field (its
// errors name the field).
var execFlags = []cli.Field{
	{Name: "Slots", Flag: "-exec-slots"}, {Name: "ChunkBytes", Flag: "-chunk"}, {Name: "TimeoutRetries", Flag: "-timeout-retries"},
	{Name: "ShortFirst", Flag: "-short-first"}, {Name: "ShortHold", Flag: "-short-hold"}, {Name: "ShortHoldMax", Flag: "-short-hold-max"},
	{Name: "CwndInit", Flag: "-cc-init"}, {Name: "CwndMin", Flag: "-cc-min"}, {Name: "CwndMax", Flag: "-cc-max"}, {Name: "RTT", Flag: "-cc-rtt"},
	{Name: "LocalTarget", Flag: "-cc-local-target"}, {Name: "RemoteTarget", Flag: "-cc-remote-target"},
}

// parseClient parses and checks test's flags; nothing is asked of an
// engine or a key service yet.
func parseClient(test string, args []string, stderr io.Writer) (*clientOptions, error) {
	o := &clientOptions{}
	syn := synopsis[slices.IndexFunc(synopsis, func(s string) bool { return strings.HasPrefix(s, "rmaperf "+test+" ") })]
	fs := cli.New("rmaperf "+test, strings.Join(strings.Fields(syn), " ")) // without the alignment
	ex := strings.Replace(clientExample, "read_bw", test, 1)
	if strings.HasSuffix(test, "_lat") {
		ex = strings.Replace(ex, " -O 16", "", 1)
	}
	fs.Example(ex, "rmaperf "+test+" -self -s 64 -D 5s -json")
	fs.SetOutput(stderr)
	fs.StringVar(&o.socket, "socket", ctlmsg.DefaultSocket, "engine control socket")
	fs.StringVar(&o.server, "server", "", "rmaperf server's key service HOST:PORT")
	fs.StringVar(&o.credsDir, "creds", "", "with -server: directory of the client's TLS credentials (DIR/client.pem, from rmactl creds)")
	fs.IntVar(&o.credsFD, "creds-fd", -1, "with -server: inherited descriptor carrying the client's TLS credentials (from a launcher)")
	fs.StringVar(&o.regionFlag, "region", "", "with -server: the region id the server printed")
	fs.BoolVar(&o.self, "self", false, "target a region of this client's own engine (loopback)")
	fs.IntVar(&o.size, "s", 64, "op size in bytes (1..4096), or transfer size through the executor (above 4096, or with -exec)")
	fs.BoolVar(&o.useExec, "exec", false, "move each SIZE through portal.Executor even when it fits in one op")
	fs.IntVar(&o.bg, "bg", 0, "executor: meanwhile keep READs of this many bytes going through the same executor (head-of-line pressure, e.g. 4194304)")
	fs.Float64Var(&o.rate, "rate", 0, "executor: open loop, transfers arriving Poisson at this many per second (latency from post, the posts' lateness in the note; -O: how many are served at once, default 8)")
	ecfg := portal.DefaultExecutorConfig()
	fs.IntVar(&ecfg.Slots, "exec-slots", portal.DefaultExecutorSlots, "executor: command slots")
	fs.IntVar(&ecfg.ChunkBytes, "chunk", abi.MaxOpBytes, "executor: op size transfers are split into")
	fs.IntVar(&ecfg.TimeoutRetries, "timeout-retries", portal.DefaultTimeoutRetries, "executor: TIMEOUT retries per chunk (negative: none)")
	fs.IntVar(&ecfg.ShortFirst, "short-first", portal.DefaultShortFirst, "executor: ops long transfers keep in flight while a short one runs (negative: no precedence)")
	fs.DurationVar(&ecfg.ShortHold, "short-hold", portal.DefaultShortHold, "executor: how long long transfers stay capped after a short one")
	fs.DurationVar(&ecfg.ShortHoldMax, "short-hold-max", portal.DefaultShortHoldMax, "executor: the longest hold, which follows the gaps between short transfers (at most -short-hold: a fixed hold)")
	ccp := cc.DefaultParams()
	fs.Float64Var(&ecfg.CC.CwndInit, "cc-init", ccp.CwndInit, "executor: initial congestion window (ops)")
	fs.Float64Var(&ecfg.CC.CwndMin, "cc-min", ccp.CwndMin, "executor: smallest congestion window (ops)")
	fs.Float64Var(&ecfg.CC.CwndMax, "cc-max", ccp.CwndMax, "executor: largest congestion window (ops)")
	ccRTT := fs.Duration("cc-rtt", time.Duration(ccp.RTT), "executor: RTT estimate until completions measure it")
	ccLocal := fs.Duration("cc-local-target", time.Duration(ccp.LocalTarget), "executor: issue_delay target of the local window")
	ccRemote := fs.Duration("cc-remote-target", time.Duration(ccp.RemoteTarget), "executor: remote_delay target of the remote windows")
	fs.BoolVar(&ecfg.CC.Combined, "cc-combined", false, "executor: one window per remote, on total_delay (paper Fig. 15c ablation)")
	fs.IntVar(&o.outstanding, "O", 32, "ops kept in flight (read_lat, write_lat: 1); through the executor: transfers, 2 unless given")
	fs.DurationVar(&o.dur, "D", 5*time.Second, "measurement duration")
	fs.DurationVar(&o.warm, "warmup", 500*time.Millisecond, "warm-up before measuring")
	fs.StringVar(&o.setup, "setup", "", "setup label for -json (loopback, memif, ...)")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON line")
	fs.BoolVar(&o.verify, "verify", false, "check every byte read (write tests: every byte written, with -self only)")
	fs.Uint64Var(&o.regionBytes, "region-bytes", 0, "with -self: bytes of the region the ops read or write (0: 1 MB, or the smallest region executor transfers fit in)")
	fs.Uint64Var(&o.localBytes, "local-bytes", 0, "raw tests: bytes of local memory the ops' local ranges walk, 4 KB apart (0: a fixed 4 KB per op in flight; larger measures a larger memory footprint, as an executor transfer's)")
	fs.BoolVar(&o.spin, "spin", true, "busy-poll for completions (false: sleep now and then)")
	fs.BoolVar(&o.yield, "yield", false, "sched_yield after every empty poll (share a CPU with an engine)")
	fs.BoolVar(&o.event, "event", false, "wait with portal.Wait: spin briefly, then sleep on the engine's completion doorbell")
	fs.IntVar(&o.spins, "spins", 0, "with -event: polls before sleeping (0: portal default, -1: none)")
	fs.IntVar(&o.moderate, "moderate", 0, "with -event: moderate the doorbell, waking once this many completions are ready (portal.Moderate; 0: every completion)")
	fs.DurationVar(&o.moderatePeriod, "moderate-period", 50*time.Microsecond, "with -moderate: wake at the latest this long after the first completion")
	fs.StringVar(&o.name, "name", "rmaperf", "application name presented to the engine (its slot and class policy match on it)")
	fs.StringVar(&o.classFlag, "class", "low", "class of service to ask the engine for: low or high")
	fs.StringVar(&o.dstFlag, "dst", "", "raw tests: send the ops to this IPv4 address instead of the target region's engine, with the same K_d (toward an address no engine answers, each op holds its window until TIMEOUT)")
	fs.Alias("ctl", "socket")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%s: unexpected arguments %q", test, fs.Args())
	}
	o.op = abi.OpRead
	if test == "write_bw" || test == "write_lat" {
		o.op = abi.OpWrite
	}
	setO := fs.Given("O")
	if o.rate < 0 {
		return nil, fmt.Errorf("-rate %v: want 0 or more", o.rate)
	}
	if (test == "read_lat" || test == "write_lat") && o.rate == 0 {
		o.outstanding = 1
	}
	if o.rate > 0 && !setO {
		o.outstanding = 8
	}
	o.execMode = o.useExec || o.size > abi.MaxOpBytes || o.bg > 0 || o.rate > 0
	if o.execMode && test != "read_lat" && test != "write_lat" && o.rate == 0 {
		if !setO {
			o.outstanding = 2 // transfers, each pipelining many ops
		}
	}
	if o.size < 1 {
		return nil, fmt.Errorf("-s %d: want 1..%d (one op), or more (executor transfers)", o.size, abi.MaxOpBytes)
	}
	if o.outstanding < 1 {
		return nil, fmt.Errorf("-O %d: want at least 1", o.outstanding)
	}
	if o.bg < 0 {
		return nil, fmt.Errorf("-bg %d: want 0 or more", o.bg)
	}
	if o.moderate < 0 || o.moderate > 0 && !o.event {
		return nil, fmt.Errorf("-moderate %d: want 0, or a count with -event", o.moderate)
	}
	if ecfg.TimeoutRetries == 0 {
		ecfg.TimeoutRetries = -1 // 0 retries asked for; the config's 0 is the default
	}
	ecfg.CC.RTT, ecfg.CC.LocalTarget, ecfg.CC.RemoteTarget = int64(*ccRTT), int64(*ccLocal), int64(*ccRemote)
	if o.execMode {
		if err := ecfg.Validate(); err != nil {
			return nil, cli.NameFlag(err, execFlags)
		}
	}
	o.ecfg = ecfg
	switch o.classFlag {
	case "low":
		o.class = abi.ClassLow
	case "high":
		o.class = abi.ClassHigh
	default:
		return nil, fmt.Errorf("-class %q: want low or high", o.classFlag)
	}
	if o.verify && o.op == abi.OpWrite && !o.self {
		return nil, errors.New("-verify of a write test needs -self (the written region must be this process's)")
	}
	if !o.execMode && o.localBytes > 0 && (o.verify || o.localBytes < uint64(o.outstanding)*abi.MaxOpBytes || o.localBytes%abi.MaxOpBytes != 0) {
		return nil, fmt.Errorf("-local-bytes %d: want a multiple of %d, at least -O × %d, and no -verify (walking ranges may be reused while an op is in flight)", o.localBytes, abi.MaxOpBytes, abi.MaxOpBytes)
	}
	if o.self && o.regionBytes > 0 && o.regionBytes < uint64(o.size)+uint64(o.bg) {
		return nil, fmt.Errorf("-region-bytes %d: smaller than -s %d (+ -bg %d)", o.regionBytes, o.size, o.bg)
	}
	if o.dstFlag != "" {
		a, err := netip.ParseAddr(o.dstFlag)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("-dst %q: want an IPv4 address", o.dstFlag)
		}
		if o.execMode || o.verify {
			return nil, fmt.Errorf("-dst %s: only for the raw tests, without -verify (nothing answers there to check)", o.dstFlag)
		}
		o.dst = a
	}
	if !o.self {
		if o.server == "" {
			return nil, errors.New("need -server or -self")
		}
		var err error
		if o.region, err = strconv.ParseUint(o.regionFlag, 0, 32); err != nil {
			return nil, fmt.Errorf("-server needs -region (the id the server printed): %q: %v", o.regionFlag, err)
		}
	}
	return o, nil
}

func client(test string, args []string) error {
	o, err := parseClient(test, args, os.Stderr)
	if err != nil {
		return err
	}
	op, execMode := o.op, o.execMode
	// The key exchange's inputs are checked before the engine is asked
	// for anything.
	var creds *keyx.Credentials
	if !o.self {
		if creds, err = loadCreds(o.credsDir, o.credsFD, false); err != nil {
			return err
		}
	}
	p, err := portal.DialOptions(o.socket, o.name, portal.Options{WaitSpins: o.spins, Class: o.class})
	if errors.Is(err, portal.ErrClass) {
		return fmt.Errorf("the engine's policy does not grant class %s to an application named %q: %w", o.classFlag, o.name, err)
	}
	if err != nil {
		return fmt.Errorf("opening a portal named %q with class %s: %w", o.name, o.classFlag, err)
	}
	defer p.Close()
	if o.moderate > 0 {
		if err := p.Moderate(o.moderate, o.moderatePeriod); err != nil {
			return fmt.Errorf("-moderate %d -moderate-period %v: %w", o.moderate, o.moderatePeriod, err)
		}
	}
	var tg target
	if o.self {
		regionBytes := uint64(1 << 20)
		if execMode {
			// The smallest region the transfers fit in, as the raw tests
			// read from 1 MB: transfers then read the same bytes again
			// and again, as ucx_perftest and perftest reuse one buffer
			// (a 4 MB transfer walking a 16 MB region measures DRAM
			// more than the executor: bench/RESULTS.md, "executor and
			// loopback-pairs").
			// Verified writes need a part of their own per transfer.
			need := uint64(o.size)
			if o.verify && op == abi.OpWrite {
				need *= uint64(o.outstanding)
			}
			regionBytes = max(regionBytes, need) + uint64(o.bg)
		}
		if o.regionBytes > 0 {
			regionBytes = o.regionBytes
		}
		r, err := p.RegisterRegion(regionBytes, abi.PermAll)
		if err != nil {
			return err
		}
		b := r.Bytes()
		pattern.Fill(b, 0)
		// The owner is this process: derive K_d in process.
		id := p.Identity()
		tg = target{peer: id.Addr, region: r.ID(), bytes: r.Size(), key: r.DeriveKey(id.Addr, id.PID, op), mem: b}
	} else {
		// The server may still be starting: Fetch retries a refused
		// connection for 10 s.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		g, err := keyx.Fetch(ctx, o.server, creds, keyx.RequestFor(p.Identity(), abi.RegionID(o.region), op))
		cancel()
		if err != nil {
			return fmt.Errorf("key exchange with %s: %w", o.server, err)
		}
		tg = target{peer: g.Owner, region: g.Region, bytes: g.Bytes, key: g.Key}
	}
	if o.dst.IsValid() {
		tg.peer, tg.mem = o.dst, nil
	}
	var res benchrow.Row
	if execMode {
		res, err = runExec(p, tg, test, op, o.size, o.outstanding, o.warm, o.dur, o.verify, o.ecfg, o.bg, o.rate)
	} else {
		res, err = run(p, tg, test, op, o.size, o.outstanding, o.warm, o.dur, o.verify, o.spin, o.yield, o.event, o.localBytes)
	}
	clear(tg.key[:])
	if err != nil {
		return err
	}
	res.Setup = o.setup
	if o.asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	opt := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f", *v)
	}
	fmt.Printf("%-9s %8s %4s %12s %10s %9s %9s %9s %11s %8s\n", "test", "size", "O", "ops/s", "MB/s", "p50_us", "p99_us", "p99.9_us", "eng_p50_us", "errors")
	fmt.Printf("%-9s %8d %4d %12.0f %10.1f %9.2f %9s %9s %11s %8d\n", res.Test, res.Size, res.Outstanding,
		res.OpsPerSec, res.MBPerSec, res.P50us, opt(res.P99us), opt(res.P999us), opt(res.EngP50us), res.Errors)
	if res.Note != "" {
		fmt.Println("note:", res.Note)
	}
	return nil
}

// run keeps outstanding ops (op: READ or WRITE) in flight for warm+dur
// and measures the last dur. Each slot has its own 4 KB buffer in one local
// region: a READ's sink, a WRITE's source. Remote offsets walk the remote
// region.
// localRegion registers the client's local region of bytes: a READ's sink
// (PermLocalWrite) and a WRITE's source (PermLocalRead), filled with a
// pattern for writes.
func localRegion(p *portal.Portal, bytes uint64, write bool) (*portal.Region, error) {
	local, err := p.RegisterRegion(bytes, abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		return nil, err
	}
	if write {
		lb := local.Bytes()
		for i := range lb {
			lb[i] = byte(i*17 + 3)
		}
	}
	return local, nil
}

func run(p *portal.Portal, tg target, test string, op abi.Op, size, outstanding int,
	warm, dur time.Duration, verify, spin, yield, event bool, localBytes uint64) (benchrow.Row, error) {
	peer, region, regionBytes, key := tg.peer, tg.region, tg.bytes, tg.key
	write := op == abi.OpWrite
	slots, err := p.AllocSlots(outstanding)
	if err != nil {
		return benchrow.Row{}, err
	}
	// Each op in flight has its own 4 KB of local memory (locOff[k] =
	// k·4 KB), or, with localBytes, ops take 4 KB ranges walking
	// localBytes of it.
	walk := localBytes > 0
	if !walk {
		localBytes = uint64(outstanding) * abi.MaxOpBytes
	}
	local, err := localRegion(p, localBytes, write)
	if err != nil {
		return benchrow.Row{}, err
	}
	span := regionBytes - uint64(size)
	postAt := make([]int64, outstanding)
	remOff := make([]uint64, outstanding)
	locOff := make([]uint64, outstanding)
	for k := range locOff {
		locOff[k] = uint64(k) * abi.MaxOpBytes
	}
	var next, lnext uint64
	clock := time.Now()
	nowNs := func() int64 { return int64(time.Since(clock)) }
	post := func(k int) error {
		remOff[k] = next % (span + 1)
		next += 4096 + 64
		if walk {
			locOff[k] = lnext % localBytes
			lnext += abi.MaxOpBytes
		}
		postAt[k] = nowNs()
		if !write {
			return p.Post(&portal.Op{
				Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
				Remote: peer, RemoteRegion: region, RemoteOffset: remOff[k], Key: key,
				Local: local, LocalOffset: locOff[k], Length: uint32(size),
			})
		}
		if verify {
			// New bytes for every write, so a write that did not land
			// shows.
			src := local.Bytes()[k*abi.MaxOpBytes : k*abi.MaxOpBytes+size]
			for i := range src {
				src[i] = byte(next>>6) + byte(i)
			}
		}
		return p.Post(&portal.Op{
			Type: portal.OpWrite, Slot: slots[k], Cookie: uint64(k),
			Remote: peer, RemoteRegion: region, RemoteOffset: remOff[k], Key: key,
			Local: local, LocalOffset: locOff[k], Length: uint32(size),
		})
	}
	for k := range slots {
		if err := post(k); err != nil {
			return benchrow.Row{}, err
		}
	}
	p.Flush()
	var h, eng telemetry.Hist
	var ops, errs uint64
	var cpu0 int64 // the process's CPU time when the measured interval began
	var firstErr abi.Status
	cpl := make([]abi.Completion, 64)
	start := nowNs() + int64(warm)
	end := start + int64(dur)
	measuring := false
	ctx, cancel := context.WithTimeout(context.Background(), warm+dur+30*time.Second)
	defer cancel()
	inflight := outstanding
	spins := 0
	for inflight > 0 {
		var (
			n   int
			err error
		)
		if event {
			n, err = p.Wait(ctx, cpl)
		} else {
			n, err = p.Poll(cpl)
		}
		if err != nil {
			return benchrow.Row{}, fmt.Errorf("waiting for completions (%d in flight): %w", inflight, err)
		}
		if n == 0 {
			// Spin (lowest latency); check the deadline now and then.
			if spins++; spins&0xfff == 0 {
				if err := ctx.Err(); err != nil {
					return benchrow.Row{}, fmt.Errorf("waiting for completions (%d in flight): %w", inflight, err)
				}
				if !spin {
					time.Sleep(time.Microsecond)
				}
			}
			if yield {
				// Let an engine sharing this CPU run at once (EEVDF
				// moves a yielding task behind the others).
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
			continue
		}
		now := nowNs()
		if !measuring && now >= start {
			measuring, h, eng, ops, errs = true, telemetry.Hist{}, telemetry.Hist{}, 0, 0
			start = now
			end = now + int64(dur)
			cpu0 = cpuNs()
		}
		for _, c := range cpl[:n] {
			k := int(c.Cookie)
			inflight--
			if c.Status != abi.StatusOK {
				errs++
				if firstErr == 0 {
					firstErr = c.Status
				}
			} else if verify && write {
				want := local.Bytes()[k*abi.MaxOpBytes : k*abi.MaxOpBytes+size]
				got := tg.mem[remOff[k] : remOff[k]+uint64(size)]
				for i, v := range got {
					if v != want[i] {
						return benchrow.Row{}, fmt.Errorf("written data mismatch at remote offset %d", remOff[k]+uint64(i))
					}
				}
			} else if verify {
				got := local.Bytes()[k*abi.MaxOpBytes : k*abi.MaxOpBytes+size]
				for i, v := range got {
					if v != pattern.At(remOff[k]+uint64(i)) {
						return benchrow.Row{}, fmt.Errorf("data mismatch at remote offset %d", remOff[k]+uint64(i))
					}
				}
			}
			if measuring && c.Status == abi.StatusOK {
				ops++
				h.Add(uint64(now - postAt[k]))
				eng.Add(uint64(c.TotalDelayNs))
			}
			if now < end {
				if err := post(k); err != nil {
					return benchrow.Row{}, err
				}
				inflight++
			}
		}
		p.Flush()
	}
	cpu := cpuNs() - cpu0
	secs := float64(end-start) / 1e9
	r := benchrow.Row{
		System: "onerma", Test: test, Size: size, Outstanding: outstanding, Cores: 1, // a portal is served by one engine core
		OpsPerSec: float64(ops) / secs, MBPerSec: float64(ops) * float64(size) / secs / 1e6,
		P50us: us(h.Quantile(0.5)), P99us: benchrow.F(us(h.Quantile(0.99))), P999us: benchrow.F(us(h.Quantile(0.999))),
		EngP50us: benchrow.F(us(eng.Quantile(0.5))), EngP99us: benchrow.F(us(eng.Quantile(0.99))),
		EngP999us: benchrow.F(us(eng.Quantile(0.999))), EngMaxUs: benchrow.F(us(eng.Max())),
		Ops: ops, Errors: errs, Seconds: secs,
	}
	if errs > 0 {
		r.Note = fmt.Sprintf("first non-OK status %v", firstErr)
	}
	if ops > 0 {
		r.CPUNsPerOp = benchrow.F(float64(cpu) / float64(ops))
	}
	return r, nil
}

// cpuNs is this process's CPU time, user and system, over all its threads
// (the Go runtime's included): getrusage(RUSAGE_SELF).
func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func us(ns uint64) float64 { return float64(ns) / 1e3 }
