package metrics

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxScrapes is how many scrapes Handler serves at once; more get 503 at
// once. Each reads every core on its poll loop, so a flood of scrapes
// cannot queue work there.
const MaxScrapes = 2

// ScrapeTimeout bounds one scrape: a core that does not answer (its loop
// stalled) gets 503, not a scraper hanging on.
const ScrapeTimeout = 5 * time.Second

// Handler serves c's metrics, with the process's (process_*: its memory,
// threads, descriptors) and the Go runtime's (go_*), in the format the
// scraper asks for (the Prometheus text format by default). Errors of
// one metric leave the others served (promhttp.ContinueOnError).
func Handler(c *Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, x := range []prometheus.Collector{c, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector()} {
		if err := reg.Register(x); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: MaxScrapes,
		Timeout:             ScrapeTimeout,
	}), nil
}
