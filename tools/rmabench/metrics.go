package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/onerma/onerma/internal/testbed"
)

// metricsRounds is how many interleaved rounds metricsRun runs
// (-metrics-rounds).
var metricsRounds = 7

// metricsSpecs are what a scrape and the EAL's telemetry socket could
// cost: the most completions per second (64 B read_bw, so the most
// delay batches folded into the core's histograms) and the tail of one
// op at a time (64 B read_lat p99.9: a scrape's pause of the poll loop,
// or the garbage collection its allocations cause, lands on a few ops).
var metricsSpecs = []spec{{"read_bw", 64, 64}, {"read_lat", 64, 1}}

// The setups of metricsRun, each a fresh loopback engine.
const (
	setupNoTelemetry = "metrics-eal-no-telemetry" // EAL started with --no-telemetry, no -metrics: the engine before either
	setupTelemetry   = "metrics-eal-telemetry"    // the EAL's telemetry socket kept (rmad's default), no -metrics
	setupUnscraped   = "metrics-unscraped"        // telemetry kept, -metrics (the core keeps its delay histograms), never scraped
	setupScrape      = "metrics-scrape"           // telemetry kept, -metrics, scraped every second
)

// scrapeEvery is how often the metrics-scrape setup scrapes, as a
// Prometheus would with scrape_interval: 1s.
const scrapeEvery = time.Second

// metricsRun measures what the EAL's telemetry socket and a Prometheus
// scrape every second cost: metricsRounds interleaved rounds (every
// other round backwards) of the loopback engine started four ways
// (setupNoTelemetry, setupTelemetry, setupUnscraped, setupScrape), each
// running
// metricsSpecs for max(2 s, dur) each. Each engine runs on CPU 1, rmaperf
// and the scraper on CPU 0. The scraped row's note says how many scrapes
// its run saw.
func metricsRun(rmad, rmaperf, dir string, dur time.Duration) ([]Row, error) {
	d := max(2*time.Second, dur)
	run := func(setup string) func() ([]Row, error) {
		return func() ([]Row, error) { return metricsEngine(rmad, rmaperf, dir, setup, d) }
	}
	return interleavedRows(metricsRounds, run(setupNoTelemetry), run(setupTelemetry), run(setupUnscraped), run(setupScrape))
}

// metricsEngine starts the loopback engine of setup, runs metricsSpecs
// on it for d each (scraping it every scrapeEvery meanwhile in
// setupScrape), and stops it.
func metricsEngine(rmad, rmaperf, dir, setup string, d time.Duration) ([]Row, error) {
	const name = "bench-met"
	var extra []string
	addr := ""
	switch setup {
	case setupNoTelemetry:
		extra = []string{"-eal", strings.Join(append(testbed.EALArgs(name), "--no-telemetry"), " ")}
	case setupUnscraped, setupScrape:
		a, err := testbed.MetricsAddr()
		if err != nil {
			return nil, err
		}
		extra = []string{"-metrics", a}
		if setup == setupScrape {
			addr = a
		}
	}
	e, err := testbed.Start(benchLoopback(rmad, dir, name, "10.99.0.1", "1500", extra...))
	if err != nil {
		return nil, err
	}
	defer e.Stop(10 * time.Second)
	var rows []Row
	for _, s := range metricsSpecs {
		var (
			stop    = make(chan struct{})
			wg      sync.WaitGroup
			scrapes int
			errs    []error
		)
		if addr != "" {
			wg.Add(1)
			go func() { // the scraper: CPU 0 with rmaperf, as rmabench runs there
				defer wg.Done()
				t := time.NewTicker(scrapeEvery)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
					}
					if _, err := testbed.Scrape(addr); err != nil {
						errs = append(errs, err)
					}
					scrapes++
				}
			}()
		}
		r, err := rmaperfRun(rmaperf, "0", s, d, setup, nil, "-ctl", e.Socket, "-self")
		close(stop)
		wg.Wait()
		if err != nil {
			return nil, err
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s: scraping %s: %v", setup, addr, errs[0])
		}
		if addr != "" {
			r.Note = addNote(r.Note, fmt.Sprintf("scraped %d times, every %v", scrapes, scrapeEvery))
		}
		rows = append(rows, r)
	}
	return rows, e.Stop(10 * time.Second)
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
			{setupUnscraped, setupTelemetry, "-metrics (delay histograms kept) / without"},
			{setupScrape, setupUnscraped, "-metrics scraped every 1 s / not scraped"},
			{setupScrape, setupTelemetry, "-metrics scraped every 1 s / without -metrics"},
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
