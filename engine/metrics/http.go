package metrics

import (
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// goHeap is the runtime/metrics served beside client_golang's default
// Go metrics: the heap marked live by the last GC and the heap size at
// which the next GC starts.
var goHeap = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/(live|goal):bytes$`)}

// MaxScrapes is how many scrapes Handler serves at once; more get 503 at
// once. Each reads every core on its poll loop, so a flood of scrapes
// cannot queue work there.
const MaxScrapes = 2

// ScrapeTimeout bounds one scrape: a core that does not answer (its loop
// stalled) gets 503, not a scraper hanging on.
const ScrapeTimeout = 5 * time.Second

// Handler serves c's metrics, with the process's (process_*: its memory,
// threads, descriptors) and the Go runtime's (go_*: client_golang's
// default set, and the live heap and the heap goal, go_gc_heap_live_bytes
// and go_gc_heap_goal_bytes, which tell a heap that holds more from one
// that only collects later), in the format the
// scraper asks for (the Prometheus text format by default). Errors of
// one metric leave the others served (promhttp.ContinueOnError).
func Handler(c *Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, x := range []prometheus.Collector{c, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(goHeap))} {
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
