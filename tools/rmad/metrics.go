package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/metrics"
	"github.com/onerma/onerma/engine/telemetry"
)

// MetricsConfig is the Prometheus endpoint (engine/metrics).
type MetricsConfig struct {
	// Listen is HOST:PORT of the HTTP server that serves the metrics at
	// /metrics ("": none, the default). The page names portals, their
	// uids, identities and tenants: listen on loopback or a management
	// network.
	Listen string `json:"listen"`
	// Pprof also serves the Go runtime's profiles (net/http/pprof) at
	// /debug/pprof/ on the same listener (false by default): heap and
	// goroutine profiles for finding what holds memory, as the soak
	// does. A CPU profile or trace costs the engine while it runs, and
	// anyone who reaches the listener may ask for one: loopback only.
	Pprof bool `json:"pprof"`
	// Portals also exports a series per open portal, labelled with its
	// application's name, uid and identity (false by default): each
	// process a tenant starts is then a new series. For looking at one
	// engine, not for a long-lived time series database
	// (metrics.Config.PortalSeries).
	Portals bool `json:"portals"`
}

// validate checks the listen address's form (binding it is serve's).
func (m *MetricsConfig) validate() error {
	if m.Listen == "" {
		if m.Pprof {
			return fmt.Errorf("%w: metrics.pprof needs metrics.listen", errConfig)
		}
		if m.Portals {
			return fmt.Errorf("%w: metrics.portals needs metrics.listen", errConfig)
		}
		return nil
	}
	_, port, err := net.SplitHostPort(m.Listen)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		return fmt.Errorf("%w: metrics.listen %q: want HOST:PORT (\"\": off): %v", errConfig, m.Listen, err)
	}
	return nil
}

// metricsServer is rmad's HTTP server of /metrics.
type metricsServer struct {
	http   *http.Server
	served chan error
}

// startMetrics serves the metrics of the engine's cores (their control
// server is srv; core i's delay histograms are delays[i]) at
// http://listen/metrics, each core's series labelled with its core. A
// scrape reads each core with srv.CoreStats, one runner.Exec on its poll
// loop, in which it also copies the histograms: the loop takes no lock
// and does no work for the scrape but that copy and the stats reply's.
// The tenants' usage against their quotas comes from the server's books
// (srv.Tenants), off the loops, and their data-path counters from one
// more Exec on each loop (srv.Tenants sums the cores' counters). An engine-wide figure is the sum over
// the core label (sum without (core) (...)). With cfg.Pprof the Go
// runtime's profiles are served at /debug/pprof/ beside.
func startMetrics(cfg MetricsConfig, srv *ctl.Server, delays []*telemetry.Delays, limits metrics.Limits, log zerolog.Logger) (*metricsServer, error) {
	cores := make([]metrics.Core, len(delays))
	for i, d := range delays {
		cores[i] = metrics.Core{
			ID: i, Limits: limits,
			Snapshot: func(s *metrics.Snapshot) (err error) {
				s.Stats, err = srv.CoreStats(i, func(*engine.Core) { s.Delays = *d })
				return err
			},
		}
	}
	col, err := metrics.NewCollector(metrics.Config{
		Cores:        cores,
		Tenants:      func() []metrics.TenantUsage { return metrics.TenantsOf(srv.Tenants()) },
		Datapath:     func() []metrics.TenantDatapath { return metrics.DatapathOf(srv.Tenants()) },
		PortalSeries: cfg.Portals,
	})
	if err != nil {
		return nil, err
	}
	h, err := metrics.Handler(col)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	if cfg.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index) // and every named profile: heap, goroutine, allocs, …
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen: %w", err)
	}
	m := &metricsServer{
		http: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
		},
		served: make(chan error, 1),
	}
	go func() { m.served <- m.http.Serve(ln) }()
	ev := log.Info().Str("metrics", "http://"+ln.Addr().String()+"/metrics")
	if cfg.Pprof {
		ev = ev.Str("pprof", "http://"+ln.Addr().String()+"/debug/pprof/")
	}
	ev.Msg("serving Prometheus metrics")
	return m, nil
}

// close stops the server, waiting a little for scrapes in progress.
func (m *metricsServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := m.http.Shutdown(ctx)
	if serr := <-m.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}
