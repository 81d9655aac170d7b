// Command rmasoak runs OneRMA's soak: four engines on the routed testbed
// (two subnets joined by a Linux router; af_packet, AF_XDP, af_packet
// and net_tap ports) under verified mixed load for a duration while
// engines are SIGKILLed and restarted, router links flap and region keys
// are replaced, then checks what must hold and prints what it counted.
// The last line is "soak: ok" only when every floor and check held; the
// exit status is 1 otherwise (2 when the run could not be made).
//
//	rmasoak [-D 30m] [-bin bin] [-dir DIR] [-rate OPS] [-exec-rate BYTES] [-q] [-cpuprofile FILE] [-profiles]
//
// (-d is the old spelling of -D, still accepted.) What runs, what is
// checked and how the floors scale with -D: package
// internal/soak. It needs root (network namespaces, AF_PACKET) and the
// rmad and rmactl binaries in -bin (make build).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/internal/soak"
)

// options are rmasoak's flags.
type options struct {
	d                 time.Duration
	bin, dir, profile string
	rate, execRate    float64
	quiet, profiles   bool
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := cli.New("rmasoak", "rmasoak [-D 30m] [-bin bin] [-dir DIR] [-rate OPS] [-exec-rate BYTES] [-q] [-cpuprofile FILE] [-profiles]")
	fs.Notes("Needs root (network namespaces, AF_PACKET) and rmad and rmactl in -bin (make build).\nThe last line is \"soak: ok\" only when every floor and check held.")
	fs.Example("rmasoak -bin bin -D 1m", "rmasoak -bin bin -D 2h -q -dir /var/tmp/soak")
	fs.SetOutput(stderr)
	fs.DurationVar(&o.d, "D", 30*time.Minute, "duration of the load (at least 30s); floors scale with it")
	fs.StringVar(&o.bin, "bin", "bin", "directory holding rmad and rmactl")
	fs.StringVar(&o.dir, "dir", "", "directory for the engines' sockets, logs and IV state (default: a temporary one, removed after)")
	fs.Float64Var(&o.rate, "rate", 0, "raw ops a second over all engines (0: twice the floor's rate; negative: unpaced)")
	fs.Float64Var(&o.execRate, "exec-rate", 0, "executor bytes a second, written and read back, over all engines (0: the floor's rate in 4 KB chunks; negative: unpaced)")
	fs.BoolVar(&o.quiet, "q", false, "no progress lines, only the report")
	fs.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of rmasoak itself to this file")
	fs.BoolVar(&o.profiles, "profiles", false, "write heap profiles and memory maps of the engines to -dir (start, warm, half, end, closed; the engines then sample their allocations)")
	fs.Alias("d", "D")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.PrintUsage()
		return nil, fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	if o.d < 30*time.Second {
		return nil, fmt.Errorf("-D %v: want at least 30s", o.d)
	}
	if o.profiles && o.dir == "" {
		return nil, errors.New("-profiles needs -dir")
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if err != nil {
		if code := cli.ExitCode(err); code != 1 {
			os.Exit(code)
		}
		fatal(err)
	}
	abs, err := filepath.Abs(o.bin)
	if err != nil {
		fatal(err)
	}
	var log io.Writer = os.Stderr
	if o.quiet {
		log = nil
	}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, soak.Config{Duration: o.d, Bin: abs, Dir: o.dir, Log: log, Rate: o.rate, ExecRate: o.execRate, Profiles: o.profiles})
	if err != nil {
		fatal(err)
	}
	rep.Print(os.Stdout)
	if !rep.OK {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "rmasoak:", err)
	os.Exit(2)
}
