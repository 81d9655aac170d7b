package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// metricsRounds is how many interleaved rounds each part of metricsRun
// runs (-metrics-rounds).
var metricsRounds = 7

// metricsSpecs are what a scrape and the EAL's telemetry socket could
// cost: the most completions per second (64 B read_bw, so the most
// delay batches added to the core's histograms) and the tail of one op
// at a time (64 B read_lat p99.9: a scrape's pause of the poll loop, or
// the garbage collection its allocations cause, lands on a few ops).
var metricsSpecs = []spec{{"read_bw", 64, 64}, {"read_lat", 64, 1}}

// The setups of metricsRun. The first three start an engine each; the
// last two are runs on one engine.
const (
	setupNoTelemetry = "metrics-eal-no-telemetry" // EAL started with --no-telemetry, no -metrics: the engine before either
	setupTelemetry   = "metrics-eal-telemetry"    // the EAL's telemetry socket kept (rmad's default), no -metrics
	setupHistograms  = "metrics-histograms"       // telemetry kept, -metrics (the core keeps delay histograms), not scraped
	setupUnscraped   = "metrics-unscraped"        // one engine with -metrics: runs while nothing scrapes it
	setupScrape      = "metrics-scrape"           // the same engine: runs while it is scraped every second
)

// scrapeEvery is how often the metrics-scrape runs scrape, as a
// Prometheus would with scrape_interval: 1s.
const scrapeEvery = time.Second

// metricsRun measures, on the loopback engine (busy on CPU 1, rmaperf
// and the scraper on CPU 0), metricsSpecs for max(2 s, dur) each, in two
// parts of metricsRounds interleaved rounds (every other round
// backwards):
//
//   - what starting the engine differently costs: a fresh engine per run
//     with --no-telemetry, with the EAL's telemetry socket, and with
//     -metrics (setupNoTelemetry, setupTelemetry, setupHistograms);
//   - what a scrape every second costs: one engine with -metrics, runs
//     while nothing scrapes it and while a scraper does
//     (setupUnscraped, setupScrape), seconds apart and without the
//     differences between two starts of an engine (its memory).
//
// A scraped row's note says how many scrapes its run saw.
func metricsRun(rmad, rmaperf, dir string, dur time.Duration, emit emitFunc) error {
	d := max(2*time.Second, dur)
	start := func(setup string) func(emitFunc) error {
		return func(emit emitFunc) error {
			e, addr, err := metricsEngine(rmad, dir, setup)
			if err != nil {
				return err
			}
			defer e.Stop(10 * time.Second)
			if err := metricsSpecsOn(rmaperf, e.Socket, addr, setup, d, emit); err != nil {
				return err
			}
			return e.Stop(10 * time.Second)
		}
	}
	if err := interleavedRows(metricsRounds, emit, start(setupNoTelemetry), start(setupTelemetry), start(setupHistograms)); err != nil {
		return err
	}
	e, addr, err := metricsEngine(rmad, dir, setupHistograms)
	if err != nil {
		return err
	}
	defer e.Stop(10 * time.Second)
	on := func(setup, scrape string) func(emitFunc) error {
		return func(emit emitFunc) error { return metricsSpecsOn(rmaperf, e.Socket, scrape, setup, d, emit) }
	}
	if err := interleavedRows(metricsRounds, emit, on(setupUnscraped, ""), on(setupScrape, addr)); err != nil {
		return err
	}
	return e.Stop(10 * time.Second)
}

// metricsEngine starts the loopback engine of setup and returns it and
// its -metrics address ("": none).
func metricsEngine(rmad, dir, setup string) (*testbed.Engine, string, error) {
	const name = "bench-met"
	var extra []string
	addr := ""
	switch setup {
	case setupNoTelemetry:
		extra = []string{"-eal", strings.Join(append(testbed.EALArgs(name), "--no-telemetry"), " ")}
	case setupHistograms:
		a, err := testbed.MetricsAddr()
		if err != nil {
			return nil, "", err
		}
		addr, extra = a, []string{"-metrics", a}
	}
	e, err := testbed.Start(benchLoopback(rmad, dir, name, "10.99.0.1", "1500", extra...))
	return e, addr, err
}

// metricsSpecsOn runs metricsSpecs on the engine at socket for d each,
// scraping scrape ("": nothing) every scrapeEvery meanwhile.
func metricsSpecsOn(rmaperf, socket, scrape, setup string, d time.Duration, emit emitFunc) error {
	for _, s := range metricsSpecs {
		var (
			stop    = make(chan struct{})
			wg      sync.WaitGroup
			scrapes int
			errs    []error
		)
		if scrape != "" {
			wg.Add(1)
			go func() { // the scraper, on rmabench's CPU (not the engine's)
				defer wg.Done()
				t := time.NewTicker(scrapeEvery)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
					}
					if _, err := testbed.Scrape(scrape); err != nil {
						errs = append(errs, err)
					}
					scrapes++
				}
			}()
		}
		r, err := rmaperfRun(rmaperf, "0", s, d, setup, nil, "-socket", socket, "-self")
		close(stop)
		wg.Wait()
		if err != nil {
			return err
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s: scraping %s: %v", setup, scrape, errs[0])
		}
		if scrape != "" {
			r.Note = addNote(r.Note, fmt.Sprintf("scraped %d times, every %v", scrapes, scrapeEvery))
		}
		emit(r)
	}
	return nil
}

// printMetrics prints, per test, the median over rounds of each round's
// ratios between the setups: ops/s for read_bw (below 1: slower), p99.9
// latency for read_lat (above 1: slower).
func printMetrics(rows []Row) {
	for _, s := range metricsSpecs {
		what, value := "ops/s", func(r *Row) (float64, bool) { return r.OpsPerSec, r.OpsPerSec > 0 }
		if s.depth == 1 {
			what = "p99.9"
			value = func(r *Row) (float64, bool) { return ptrVal(r.P999us), r.P999us != nil && *r.P999us > 0 }
		}
		by := map[string][]float64{}
		for i, r := range rows {
			if v, ok := value(&rows[i]); ok && r.Test == s.test && r.Size == s.size && r.Outstanding == s.depth {
				by[r.Setup] = append(by[r.Setup], v)
			}
		}
		for _, c := range []struct{ num, den, label string }{
			{setupTelemetry, setupNoTelemetry, "EAL telemetry socket kept / --no-telemetry"},
			{setupHistograms, setupTelemetry, "-metrics (delay histograms kept), not scraped / without -metrics"},
			{setupScrape, setupUnscraped, "scraped every 1 s / not scraped, one engine"},
		} {
			num, den := by[c.num], by[c.den]
			n := min(len(num), len(den))
			if n == 0 {
				continue
			}
			v := make([]float64, n)
			rs := make([]string, n)
			for i := range n {
				v[i] = num[i] / den[i]
				rs[i] = fmt.Sprintf("%.3f", v[i])
			}
			fmt.Printf("loopback %s %d B O=%d %s, %s, %d interleaved rounds: median %.3f (ratios %s)\n",
				s.test, s.size, s.depth, what, c.label, n, median(v), strings.Join(rs, " "))
		}
	}
}

func ptrVal(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
