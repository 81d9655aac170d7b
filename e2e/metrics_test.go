package e2e

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/engine/metrics"
	"github.com/onerma/onerma/engine/telemetry"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// metricsPage is one scrape of an engine's -metrics endpoint.
type metricsPage struct {
	text string
	fams map[string]*dto.MetricFamily
}

// scrapeEngine GETs the page at addr and parses it.
func scrapeEngine(t *testing.T, addr string) metricsPage {
	t.Helper()
	text, err := testbed.Scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the page of %s: %v\n%s", addr, err, text)
	}
	return metricsPage{text: text, fams: fams}
}

// series is the series of family name whose labels include want (nil:
// none).
func (p metricsPage) series(name string, want map[string]string) *dto.Metric {
	for _, m := range p.fams[name].GetMetric() {
		n := 0
		for _, l := range m.Label {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(want) {
			return m
		}
	}
	return nil
}

// value is a counter's or gauge's value (NaN: no such series).
func (p metricsPage) value(name string, want map[string]string) float64 {
	m := p.series(name, want)
	switch {
	case m == nil:
		return math.NaN()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return m.GetGauge().GetValue()
}

// promtool runs `promtool check metrics` on a page (Debian's prometheus
// package, installed by scripts/setup.sh).
func promtool(t *testing.T, text string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool: %v", err)
		}
		t.Skipf("promtool: %v (scripts/setup.sh installs the prometheus package)", err)
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsScrape: two engines over memif, both serving -metrics. After
// READs and WRITEs the application verified byte for byte, reads refused
// for their bounds and reads under a wrong key, a scrape of the reading
// engine counts exactly the completions the application saw, by op and
// status, with delay histograms equal to those of the delays its
// completions carried; a scrape of the serving engine counts the requests
// it served, the WRITEs it committed, the authentication failures and the
// owner's region; both pages pass promtool.
func TestMetricsScrape(t *testing.T) {
	needEngines(t)
	addrA, err := testbed.MetricsAddr()
	if err != nil {
		t.Fatal(err)
	}
	addrB, err := testbed.MetricsAddr()
	if err != nil {
		t.Fatal(err)
	}
	a, b := memifPair(t, []string{"-metrics", addrA, "-metrics-portals", "true"}, []string{"-metrics", addrB, "-metrics-portals", "true"})
	pa, pb := dial(t, a, "reader"), dial(t, b, "owner")
	const regionBytes, writeArea = 256 << 10, 128 << 10 // WRITEs land in [writeArea, regionBytes)
	src := ownerRegion(t, pb, regionBytes, abi.PermRemoteRead|abi.PermRemoteWrite)
	kr, kw := kdFor(src, pa), writeKey(src, pa)
	slots, err := pa.AllocSlots(16)
	if err != nil {
		t.Fatal(err)
	}
	local, err := pa.RegisterRegion(64<<10, abi.PermLocalWrite|abi.PermLocalRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range local.Bytes() {
		local.Bytes()[i] = byte(i*13 + 5)
	}
	const reads, bounds, writes, forged = 3000, 40, 400, 24
	type kind struct{ op, status string }
	saw := map[kind]uint64{}
	var want telemetry.Delays
	sizes := []uint32{1, 64, 512, 1408, 1409, 4096}
	for done := 0; done < reads+bounds+writes+forged; {
		n := min(len(slots), reads+bounds+writes+forged-done)
		type op struct {
			rem, loc uint64
			size     uint32
			st       abi.Status
		}
		ops := make([]op, n)
		for k := range n {
			i := done + k
			size := sizes[i%len(sizes)]
			o := op{rem: uint64(i*4099) % (writeArea - 4096), loc: uint64(k * 4096), size: size, st: abi.StatusOK}
			var err error
			switch {
			case i < reads:
				err = pa.Post(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
					Remote: ipB, RemoteRegion: src.ID(), RemoteOffset: o.rem, Key: kr,
					Local: local, LocalOffset: o.loc, Length: size,
				})
			case i < reads+bounds:
				o.st = abi.StatusRemoteBounds
				err = pa.Post(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
					Remote: ipB, RemoteRegion: src.ID(), RemoteOffset: regionBytes - uint64(size) + 1, Key: kr,
					Local: local, LocalOffset: o.loc, Length: size,
				})
			case i < reads+bounds+writes:
				o.rem = writeArea + uint64(i*4099)%(regionBytes-writeArea-4096)
				err = pa.Post(&portal.Op{
					Type: portal.OpWrite, Slot: slots[k], Cookie: uint64(k),
					Remote: ipB, RemoteRegion: src.ID(), RemoteOffset: o.rem, Key: kw,
					Local: local, LocalOffset: o.loc, Length: size,
				})
			default:
				o.st = abi.StatusRemoteAuthFailure
				err = pa.Post(&portal.Op{
					Type: portal.OpRead, Slot: slots[k], Cookie: uint64(k),
					Remote: ipB, RemoteRegion: src.ID(), Key: kw,
					Local: local, LocalOffset: o.loc, Length: size,
				})
			}
			if err != nil {
				t.Fatal(err)
			}
			ops[k] = o
		}
		pa.Flush()
		cs := waitN(t, pa, n, 10*time.Second)
		batch := make([]telemetry.Sample, 0, n)
		for _, c := range cs {
			o := ops[c.Cookie]
			if c.Status != o.st {
				t.Fatalf("op %d: %+v, want %v", done+int(c.Cookie), c, o.st)
			}
			if c.Status == abi.StatusOK {
				got, want := local.Bytes()[o.loc:o.loc+uint64(o.size)], src.Bytes()[o.rem:o.rem+uint64(o.size)]
				if !bytes.Equal(got, want) { // a READ's sink, or a WRITE's source and the owner's region
					t.Fatalf("%v of %d B at %d: data differs", c.Op, o.size, o.rem)
				}
			}
			saw[kind{c.Op.String(), c.Status.String()}]++
			batch = append(batch, telemetry.Sample{IssueNs: c.IssueDelayNs, TotalNs: c.TotalDelayNs, Op: uint8(c.Op)})
		}
		want.Add(batch)
		done += n
	}

	// The histograms trail the completions by at most a batch's 1 ms.
	var pg metricsPage
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		pg = scrapeEngine(t, addrA)
		r := pg.series("onerma_op_total_delay_seconds", map[string]string{"op": "READ"})
		w := pg.series("onerma_op_total_delay_seconds", map[string]string{"op": "WRITE"})
		if r != nil && w != nil && r.Histogram.GetSampleCount() == reads+bounds+forged && w.Histogram.GetSampleCount() == writes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delay histograms never counted every completion:\n%s", pg.text)
		}
	}
	t.Logf("the application saw %v", saw)
	if n := len(pg.fams["onerma_completions_total"].GetMetric()); n != len(saw) {
		t.Errorf("%d completion series; the application saw %v", n, saw)
	}
	for k, n := range saw {
		if got := pg.value("onerma_completions_total", map[string]string{"core": "0", "op": k.op, "status": k.status}); got != float64(n) {
			t.Errorf(`onerma_completions_total{op=%q,status=%q} = %v; the application saw %d`, k.op, k.status, got, n)
		}
	}
	for _, op := range []abi.Op{abi.OpRead, abi.OpWrite} {
		for k, name := range []string{"onerma_op_issue_delay_seconds", "onerma_op_total_delay_seconds", "onerma_op_remote_delay_seconds"} {
			h := pg.series(name, map[string]string{"op": op.String()}).GetHistogram()
			var n uint64
			for bkt, c := range want.Buckets[op][k] {
				n += c
				if bkt < metrics.FirstBucket {
					continue
				}
				le := float64(telemetry.DelayBucketLeNs(bkt)) / 1e9
				if b := h.Bucket[bkt-metrics.FirstBucket]; b.GetUpperBound() != le || b.GetCumulativeCount() != n {
					t.Errorf("%s{op=%q}: bucket le=%g holds %d, want le=%g %d", name, op, b.GetUpperBound(), b.GetCumulativeCount(), le, n)
				}
			}
			if sum := float64(want.SumNs[op][k]) / 1e9; math.Abs(h.GetSampleSum()-sum) > 1e-9*math.Max(1, sum) {
				t.Errorf("%s{op=%q}: sum %v s, completions %v s", name, op, h.GetSampleSum(), sum)
			}
		}
	}
	uid := fmt.Sprint(os.Getuid())
	for _, c := range []struct {
		what   string
		pg     metricsPage
		name   string
		labels map[string]string
		want   float64
	}{
		{"reader", pg, "onerma_core_up", map[string]string{"core": "0"}, 1},
		{"reader", pg, "onerma_commands_posted_total", nil, reads + bounds + writes + forged},
		{"reader", pg, "onerma_ops_in_flight", nil, 0},
		{"reader", pg, "onerma_window_used_bytes", nil, 0},
		{"reader", pg, "onerma_slots_in_use", nil, 16},
		{"reader", pg, "onerma_portal_slots", map[string]string{"name": "reader", "uid": uid, "class": "low"}, 16},
		{"reader", pg, "onerma_portal_regions", map[string]string{"name": "reader"}, 1},
		{"reader", pg, "onerma_auth_failures_total", map[string]string{"message": "response"}, 0},
		{"reader", pg, "onerma_port_dropped_total", map[string]string{"port": "net_memif0", "reason": "tx_refused"}, 0},
		{"reader", pg, "onerma_tenant_usage", map[string]string{"resource": "portals"}, 1},
		{"reader", pg, "onerma_tenant_usage", map[string]string{"resource": "slots"}, 16},
	} {
		if got := c.pg.value(c.name, c.labels); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", c.what, c.name, c.labels, got, c.want)
		}
	}
	pgB := scrapeEngine(t, addrB)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"onerma_requests_served_total", nil, reads},
		{"onerma_request_errors_total", nil, bounds},
		{"onerma_pulls_issued_total", nil, writes},
		{"onerma_writes_committed_total", nil, writes},
		{"onerma_pulls_expired_total", nil, 0},
		{"onerma_auth_failures_total", map[string]string{"message": "request"}, forged},
		{"onerma_nacks_sent_total", nil, 0},
		{"onerma_portal_region_bytes", map[string]string{"name": "owner", "uid": uid}, regionBytes},
		{"onerma_uid_region_bytes", map[string]string{"uid": uid}, regionBytes},
	} {
		if got := pgB.value(c.name, c.labels); got != c.want {
			t.Errorf("owner: %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if q := pg.value("onerma_tenant_quota", map[string]string{"resource": "memory_bytes"}); !(q > 0) {
		t.Errorf("reader: the tenant's memory quota on the page: %v", q)
	}
	if pgB.fams["onerma_completions_total"] != nil {
		t.Errorf("the owner's engine completed ops it was never given: %v", pgB.fams["onerma_completions_total"])
	}
	promtool(t, pg.text)
	promtool(t, pgB.text)
}
