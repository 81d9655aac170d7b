// Command rmasoak runs OneRMA's soak: four engines on the routed testbed
// (two subnets joined by a Linux router; af_packet, AF_XDP, af_packet
// and net_tap ports) under verified mixed load for a duration while
// engines are SIGKILLed and restarted, router links flap and region keys
// are replaced, then checks what must hold and prints what it counted.
// The last line is "soak: ok" only when every floor and check held; the
// exit status is 1 otherwise (2 when the run could not be made).
//
//	rmasoak [-d 30m] [-bin bin] [-dir DIR] [-rate OPS] [-exec-rate BYTES] [-q] [-cpuprofile FILE]
//
// What runs, what is checked and how the floors scale with -d: package
// internal/soak. It needs root (network namespaces, AF_PACKET) and the
// rmad and rmactl binaries in -bin (make build).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/onerma/onerma/internal/soak"
)

func main() {
	d := flag.Duration("d", 30*time.Minute, "duration of the load (at least 30s); floors scale with it")
	bin := flag.String("bin", "bin", "directory holding rmad and rmactl")
	dir := flag.String("dir", "", "directory for the engines' sockets, logs and IV state (default: a temporary one, removed after)")
	rate := flag.Float64("rate", 0, "raw ops a second over all engines (0: twice the floor's rate; negative: unpaced)")
	execRate := flag.Float64("exec-rate", 0, "executor bytes a second, written and read back, over all engines (0: the floor's rate in 4 KB chunks; negative: unpaced)")
	quietFlag := flag.Bool("q", false, "no progress lines, only the report")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of rmasoak itself to this file")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fatal(err)
	}
	var log io.Writer = os.Stderr
	if *quietFlag {
		log = nil
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
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
	rep, err := soak.Run(ctx, soak.Config{Duration: *d, Bin: abs, Dir: *dir, Log: log, Rate: *rate, ExecRate: *execRate})
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
