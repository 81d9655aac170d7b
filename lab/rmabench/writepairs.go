package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/onerma/onerma/abi"
)

// nWritePairs is how many interleaved rounds writePairs runs.
const nWritePairs = 5

// writePairsSetups are the setups of one writePairs round, in the order
// of an even round (odd rounds run it backwards).
var writePairsSetups = []string{"write-pairs", "write-pairs-jumbo", "write-pairs-tcp", "write-pairs-cpu", "write-pairs-cpu-ipsec-mb"}

// writePairs measures the two WRITE targets (4 KB WRITE goodput against
// ucp_put_bw and against the AES-GCM ceiling) as interleaved rounds,
// each run max(1 s, dur/nWritePairs) long: 4 KB write_bw (O=64) on the
// loopback engine at MTU 1500 and at MTU 9000, ucx_perftest ucp_put_bw
// over TCP at the same size and depth, and the two aes-gcm-limit rows
// (crypto/cipher and ipsec-mb). The single rows of a make bench run are
// minutes apart, and the VM's speed drifts over minutes, in either
// direction for any of them; a round's runs are seconds apart.
// Every other round runs backwards, so no run is always first. The
// engine is started for its runs and stopped before ucx_perftest and the
// cipher loops run, so they have both CPUs as in their own rows.
// printWritePairs prints the median of each round's ratios.
func writePairs(rmad, rmaperf, dir, crypto string, dur time.Duration, emit emitFunc) error {
	d := max(time.Second, dur/nWritePairs)
	s := spec{"write_bw", abi.MaxOpBytes, 64}
	engine := func(setup, mtu string) (Row, error) {
		return loopbackOnce(rmad, rmaperf, dir, "bench-wp", mtu, crypto, s, d, setup)
	}
	run := map[string]func() (Row, error){
		"write-pairs":       func() (Row, error) { return engine("write-pairs", "1500") },
		"write-pairs-jumbo": func() (Row, error) { return engine("write-pairs-jumbo", "9000") },
		"write-pairs-tcp":   func() (Row, error) { return ucxRun(s, d) },
		"write-pairs-cpu":   func() (Row, error) { return gcmLimit(d) },
		"write-pairs-cpu-ipsec-mb": func() (Row, error) {
			return gcmLimitMB(d)
		},
	}
	runs := make([]func() (Row, error), len(writePairsSetups))
	for i, setup := range writePairsSetups {
		runs[i] = func() (Row, error) {
			r, err := run[setup]()
			if err != nil {
				return Row{}, fmt.Errorf("%s: %w", setup, err)
			}
			r.Setup = setup
			return r, nil
		}
	}
	return interleaved(nWritePairs, emit, runs...)
}

// writePairsGoalTCP is the 4 KB WRITE target against ucp_put_bw; against
// the seal+open rows it is writeGoodputGoal.
const writePairsGoalTCP = 5.0

// writePairsRounds returns writePairs' rounds, each its rows by setup.
func writePairsRounds(rows []Row) []map[string]Row {
	var rounds []map[string]Row
	cur := map[string]Row{}
	for _, r := range rows {
		if !strings.HasPrefix(r.Setup, "write-pairs") {
			continue
		}
		cur[r.Setup] = r
		if len(cur) == len(writePairsSetups) {
			rounds = append(rounds, cur)
			cur = map[string]Row{}
		}
	}
	return rounds
}

// writePairsRatios returns each round's MB/s of setup num over den's.
func writePairsRatios(rounds []map[string]Row, num, den string) []float64 {
	var v []float64
	for _, m := range rounds {
		if n, d := m[num], m[den]; d.MBPerSec > 0 {
			v = append(v, n.MBPerSec/d.MBPerSec)
		}
	}
	return v
}

// printWritePairs prints, from writePairs' rows, the median over rounds
// of 4 KB WRITE goodput against ucp_put_bw and against each
// aes-gcm-limit row, at both MTUs, with the targets.
func printWritePairs(rows []Row) {
	rounds := writePairsRounds(rows)
	if len(rounds) == 0 {
		return
	}
	ratio := func(num, den string, target float64, unit string) {
		v := writePairsRatios(rounds, num, den)
		fmt.Printf("%-17s write_bw 4096 B O=64 / %-24s %d interleaved rounds: median %.2f%s (ratios %s) (target >= %.2f%s)\n",
			num, den+",", len(v), median(v), unit, ratioList(v), target, unit)
	}
	for _, w := range writePairsSetups[:2] {
		ratio(w, "write-pairs-tcp", writePairsGoalTCP, "x")
		ratio(w, "write-pairs-cpu", writeGoodputGoal, "")
		ratio(w, "write-pairs-cpu-ipsec-mb", writeGoodputGoal, "")
	}
}
