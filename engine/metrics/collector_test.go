package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/metrics"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// page is one scrape: its text and its parsed families.
type page struct {
	text string
	fams map[string]*dto.MetricFamily
}

// scrape GETs the handler's page as Prometheus would and parses it.
func scrape(t *testing.T, c *metrics.Collector) page {
	t.Helper()
	h, err := metrics.Handler(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: HTTP %d: %s", rec.Code, rec.Body)
	}
	text := rec.Body.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the page: %v\n%s", err, text)
	}
	return page{text: text, fams: fams}
}

// find is the series of family name whose labels include want; nil when
// there is none.
func (p page) find(name string, want map[string]string) *dto.Metric {
	f := p.fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is the value of a counter or gauge series (NaN: none).
func (p page) value(name string, want map[string]string) float64 {
	m := p.find(name, want)
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return math.NaN()
}

// promtoolCheck runs `promtool check metrics` on the page: outside CI,
// without promtool (Debian's prometheus package; scripts/setup.sh) it is
// skipped with a log line.
func promtoolCheck(t *testing.T, text string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool: %v (scripts/setup.sh installs it)", err)
		}
		t.Logf("promtool not found, page not checked: %v", err)
		return
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// coreOf is a collector source reading an in-process engine as rmad
// reads its core: the control server's stats reply and, in the same Exec,
// the core's delay histograms.
func coreOf(e *enginetest.Engine, d *telemetry.Delays, l metrics.Limits) metrics.Core {
	return metrics.Core{ID: 0, Limits: l, Snapshot: func(s *metrics.Snapshot) (err error) {
		s.Stats, err = e.Server.Stats(func(_ int, _ *engine.Core) { s.Delays = *d })
		return err
	}}
}

type opStatus struct{ op, status string }

// TestScrapeCountsCompletions: after reads and writes the application
// verified, a scrape of a running engine reports exactly the completions
// the application saw, by op and status, its delays in histograms equal
// to those of its completions' delays, the requests refused for a wrong
// key as authentication failures, and the portal's regions; and the page
// passes promtool.
func TestScrapeCountsCompletions(t *testing.T) {
	d := new(telemetry.Delays)
	// Frames to itself go out of the loopback port and come back on a later
	// iteration, so ops take measurable time.
	e := enginetest.Start(t, enginetest.Opts{Engine: func(c *engine.Config) { c.Delays, c.HairpinSelf = d, true }})
	limits := metrics.Limits{WindowBytes: 256 << 10, Slots: 64, Portals: 4, Regions: 32, MaxRegionsPerPortal: 256, MaxPortalBytes: 4 << 30}
	col, err := metrics.NewCollector(metrics.Config{
		Cores:        []metrics.Core{coreOf(e, d, limits)},
		Tenants:      func() []metrics.TenantUsage { return metrics.TenantsOf(e.Server.Tenants()) },
		PortalSeries: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := portal.Dial(e.Socket, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	slots, err := p.AllocSlots(8)
	if err != nil {
		t.Fatal(err)
	}
	src, err := p.RegisterRegion(64<<10, abi.PermRemoteRead|abi.PermRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := p.RegisterRegion(64<<10, abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*7 + 1)
	}
	id := p.Identity()
	kdRead, kdWrite := src.DeriveKey(id.Addr, id.PID, abi.OpRead), src.DeriveKey(id.Addr, id.PID, abi.OpWrite)
	const reads, bounds, writes, forged, size = 400, 16, 40, 8, 512

	saw := map[opStatus]uint64{}
	var want telemetry.Delays
	batch := make([]telemetry.Sample, 0, len(slots))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make([]abi.Completion, len(slots))
	for done := 0; done < reads+bounds+writes+forged; {
		n := min(len(slots), reads+bounds+writes+forged-done)
		for k := range n {
			i, off := done+k, uint64((done+k)*size%(60<<10))
			var err error
			switch {
			case i < reads:
				err = p.Submit(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(i),
					Remote: id.Addr, RemoteRegion: src.ID(), RemoteOffset: off, Key: kdRead,
					Local: sink, LocalOffset: off, Length: size,
				})
			case i < reads+bounds: // beyond the region: REMOTE_BOUNDS
				err = p.Submit(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(i),
					Remote: id.Addr, RemoteRegion: src.ID(), RemoteOffset: 64 << 10, Key: kdRead,
					Local: sink, Length: size,
				})
			case i < reads+bounds+writes:
				err = p.Submit(&portal.Op{
					Type: portal.OpWrite, Slot: slots[k], Cookie: uint64(i),
					Remote: id.Addr, RemoteRegion: src.ID(), RemoteOffset: off, Key: kdWrite,
					Local: sink, LocalOffset: off, Length: size,
				})
			default: // a READ under the WRITE key: REMOTE_AUTHENTICATION_FAILURE
				err = p.Submit(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(i),
					Remote: id.Addr, RemoteRegion: src.ID(), Key: kdWrite,
					Local: sink, Length: size,
				})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		batch = batch[:0]
		for got := 0; got < n; {
			m, err := p.Wait(ctx, out)
			if err != nil {
				t.Fatalf("after %d of %d completions: %v", done+got, reads+bounds+writes+forged, err)
			}
			for _, c := range out[:m] {
				i := int(c.Cookie)
				wantSt := abi.StatusOK
				switch {
				case i >= reads+bounds+writes:
					wantSt = abi.StatusRemoteAuthFailure
				case i >= reads && i < reads+bounds:
					wantSt = abi.StatusRemoteBounds
				}
				if c.Status != wantSt {
					t.Fatalf("op %d: %+v, want %v", i, c, wantSt)
				}
				if i < reads {
					off := uint64(i * size % (60 << 10))
					if !bytes.Equal(sink.Bytes()[off:off+size], src.Bytes()[off:off+size]) {
						t.Fatalf("read %d: data differs", i)
					}
				}
				saw[opStatus{c.Op.String(), c.Status.String()}]++
				batch = append(batch, telemetry.Sample{IssueNs: c.IssueDelayNs, TotalNs: c.TotalDelayNs, Op: uint8(c.Op)})
			}
			got += m
		}
		want.Add(batch)
		done += n
	}

	// The histograms trail the completions by at most a batch's 1 ms.
	var pg page
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		pg = scrape(t, col)
		if m := pg.find("onerma_op_total_delay_seconds", map[string]string{"op": "WRITE"}); m != nil && m.Histogram.GetSampleCount() == writes {
			if m := pg.find("onerma_op_total_delay_seconds", map[string]string{"op": "READ"}); m != nil && m.Histogram.GetSampleCount() == reads+bounds+forged {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("histograms never counted every completion:\n%s", pg.text)
		}
	}
	var total uint64
	for k, n := range saw {
		total += n
		if got := pg.value("onerma_completions_total", map[string]string{"core": "0", "op": k.op, "status": k.status}); got != float64(n) {
			t.Errorf("onerma_completions_total{op=%q,status=%q} = %v, the application saw %d", k.op, k.status, got, n)
		}
	}
	if n := len(pg.fams["onerma_completions_total"].GetMetric()); n != len(saw) {
		t.Errorf("%d completion series, the application saw %d kinds: %v", n, len(saw), saw)
	}
	if got := pg.value("onerma_commands_posted_total", nil); got != float64(total) {
		t.Errorf("onerma_commands_posted_total = %v, %d completions", got, total)
	}
	for _, op := range []int{int(abi.OpRead), int(abi.OpWrite)} {
		for k, name := range []string{"onerma_op_issue_delay_seconds", "onerma_op_total_delay_seconds", "onerma_op_remote_delay_seconds"} {
			checkHistogram(t, pg, name, op, &want, telemetry.DelayKind(k))
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"onerma_core_up", map[string]string{"core": "0"}, 1},
		{"onerma_auth_failures_total", map[string]string{"message": "request"}, forged},
		{"onerma_auth_failures_total", map[string]string{"message": "response"}, 0},
		{"onerma_writes_committed_total", nil, writes},
		{"onerma_requests_served_total", nil, reads},
		{"onerma_pulls_issued_total", nil, writes},
		{"onerma_request_errors_total", nil, bounds},
		{"onerma_nacks_sent_total", nil, 0},
		{"onerma_window_used_bytes", nil, 0},
		{"onerma_window_size_bytes", nil, 256 << 10},
		{"onerma_slots_in_use", nil, 8},
		{"onerma_slots", nil, 64},
		{"onerma_portals", nil, 1},
		{"onerma_regions", nil, 2},
		{"onerma_portal_regions", map[string]string{"name": "metrics", "uid": fmt.Sprint(os.Getuid()), "pid": fmt.Sprint(id.PID), "class": "low"}, 2},
		{"onerma_portal_region_bytes", map[string]string{"name": "metrics"}, 128 << 10},
		{"onerma_portal_region_bytes_limit", map[string]string{"name": "metrics"}, 4 << 30},
		{"onerma_portal_slots", map[string]string{"name": "metrics"}, 8},
		{"onerma_uid_region_bytes", map[string]string{"uid": fmt.Sprint(os.Getuid())}, 128 << 10},
		{"onerma_uid_portals", map[string]string{"uid": fmt.Sprint(os.Getuid())}, 1},
		{"onerma_delay_samples_total", nil, float64(total)},
	} {
		if got := pg.value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	tenants := e.Server.Tenants()
	if len(tenants) != 1 || tenants[0].Portals != 1 || tenants[0].Slots != 8 || tenants[0].MemoryBytes < 128<<10 {
		t.Fatalf("the server's tenants: %+v", tenants)
	}
	for _, u := range metrics.TenantsOf(tenants) {
		l := map[string]string{"tenant": tenants[0].Name, "resource": u.Resource}
		if got, q, g := pg.value("onerma_tenant_usage", l), pg.value("onerma_tenant_quota", l), pg.value("onerma_tenant_guarantee", l); got != u.Used || q != u.Quota || q == 0 || g != u.Guarantee {
			t.Errorf("tenant %s %s: %v of %v (guarantee %v) on the page, the server says %v of %v (%v)", tenants[0].Name, u.Resource, got, q, g, u.Used, u.Quota, u.Guarantee)
		}
	}
	if got := pg.value("onerma_portal_slots", map[string]string{"name": "metrics", "tenant": tenants[0].Name}); got != 8 {
		t.Errorf("the portal's slots, labelled with its tenant: %v", got)
	}
	for _, name := range []string{"process_resident_memory_bytes", "go_goroutines", "go_gc_heap_live_bytes", "go_gc_heap_goal_bytes"} {
		if pg.fams[name] == nil {
			t.Errorf("no %s: the process's or the Go runtime's metrics", name)
		}
	}
	promtoolCheck(t, pg.text)
}

// checkHistogram compares a delay histogram of the page with the one
// made of the application's completions: count, sum and every bucket.
func checkHistogram(t *testing.T, pg page, name string, op int, want *telemetry.Delays, k telemetry.DelayKind) {
	t.Helper()
	m := pg.find(name, map[string]string{"op": metrics.OpName(op)})
	if m == nil {
		t.Errorf("%s{op=%q}: none", name, metrics.OpName(op))
		return
	}
	h := m.Histogram
	var n uint64
	cum := map[float64]uint64{}
	for b, c := range want.Buckets[op][k] {
		n += c
		cum[float64(telemetry.DelayBucketLeNs(b))/1e9] = n
	}
	if sum := float64(want.SumNs[op][k]) / 1e9; h.GetSampleCount() != n || math.Abs(h.GetSampleSum()-sum) > 1e-9*math.Max(1, sum) {
		t.Errorf("%s{op=%q}: count %d sum %v, completions %d sum %v", name, metrics.OpName(op), h.GetSampleCount(), h.GetSampleSum(), n, sum)
	}
	cum[math.Inf(1)] = n
	if len(h.Bucket) != telemetry.DelayBuckets-metrics.FirstBucket+1 { // and +Inf
		t.Errorf("%s: %d buckets", name, len(h.Bucket))
	}
	for _, b := range h.Bucket {
		if w, ok := cum[b.GetUpperBound()]; !ok || w != b.GetCumulativeCount() {
			t.Errorf("%s{op=%q} bucket le=%g: %d, completions %d (%v)", name, metrics.OpName(op), b.GetUpperBound(), b.GetCumulativeCount(), w, ok)
		}
	}
}

// BenchmarkScrape is one scrape of an in-process engine with one open
// portal, through Handler (collection, text encoding): its CPU time off
// the poll loop. Snapshot, its part on the loop, is BenchmarkSnapshot.
func BenchmarkScrape(b *testing.B) {
	col, _ := benchEngine(b)
	h, err := metrics.Handler(col)
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip") // as Prometheus asks
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 200 {
			b.Fatalf("HTTP %d", rec.Code)
		}
	}
}

// BenchmarkSnapshot is a core's snapshot alone: the stats reply and the
// histograms' copy, one runner.Exec; an upper bound of what a scrape
// holds the poll loop (it includes handing the closure to the loop).
func BenchmarkSnapshot(b *testing.B) {
	_, core := benchEngine(b)
	var s metrics.Snapshot
	for b.Loop() {
		if err := core.Snapshot(&s); err != nil {
			b.Fatal(err)
		}
	}
}

// benchEngine is an in-process engine keeping delay histograms, one
// portal open on it, and a collector of it.
func benchEngine(b *testing.B) (*metrics.Collector, metrics.Core) {
	d := new(telemetry.Delays)
	e := enginetest.Start(b, enginetest.Opts{Engine: func(c *engine.Config) { c.Delays = d }})
	p, err := portal.Dial(e.Socket, "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	if _, err := p.AllocSlots(8); err != nil {
		b.Fatal(err)
	}
	core := coreOf(e, d, metrics.Limits{WindowBytes: 256 << 10, Slots: 64, Portals: 4, Regions: 32})
	col, err := metrics.NewCollector(metrics.Config{Cores: []metrics.Core{core}, PortalSeries: true})
	if err != nil {
		b.Fatal(err)
	}
	return col, core
}
