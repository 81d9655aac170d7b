package ctl_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/runner"
)

// BenchmarkDriverHops breaks BenchmarkRegionControl's rekey down by hop
// (the driver path of the paper's Fig. 14), on engines of one and two
// cores, each its own runner in Backoff, and of one core in Busy mode
// (mode=busy: the closure always goes to the loop): the portal's request until the
// server has read it (send), decoding it (decode), until the core's
// Executor.Exec is called (handle), until the closure runs on the core
// (dispatch), the closure (closure), until Exec has returned to the
// connection's goroutine (return), the reply encoded (reply),
// and until portal.Rekey has returned: written, the portal woken, the
// reply read and decoded (receive). Each hop's median is
// reported, and the median and 99th percentile of the whole call
// (p50-ns, p99-ns).
//
//	go test ./engine/ctl -run '^$' -bench DriverHops -benchtime 2000x -cpu 4
func BenchmarkDriverHops(b *testing.B) {
	var at [len(ctl.HopNames)]atomic.Int64
	epoch := time.Now()
	ctl.SetHopTrace(func(h int) { at[h].Store(int64(time.Since(epoch))) })
	defer ctl.SetHopTrace(nil)
	names := []string{"send", "decode", "handle", "dispatch", "closure", "return", "reply", "receive"}
	for _, c := range []struct {
		cores int
		mode  runner.Mode
	}{{1, runner.Backoff}, {2, runner.Backoff}, {1, runner.Busy}} {
		e := setupCores(b, c.cores, nil, nil, zerolog.Nop(), c.mode)
		own := dial(b, e, "owner")
		name := fmt.Sprintf("cores=%d", c.cores)
		if c.mode != runner.Backoff {
			name += "/mode=" + c.mode.String()
		}
		b.Run(name, func(b *testing.B) {
			r, err := own.RegisterRegion(4096, abi.PermRemoteRead)
			if err != nil {
				b.Fatal(err)
			}
			k := aesni.Key{1}
			hops := make([][]int64, len(names))
			var total []int64
			for i := 0; b.Loop(); i++ {
				k[1] = byte(i)
				for j := range at {
					at[j].Store(0)
				}
				t0 := int64(time.Since(epoch))
				if err := own.Rekey(r, k); err != nil {
					b.Fatal(err)
				}
				t1 := int64(time.Since(epoch))
				ts := []int64{t0}
				for j := range at {
					ts = append(ts, at[j].Load())
				}
				ts = append(ts, t1)
				for j := range names {
					hops[j] = append(hops[j], ts[j+1]-ts[j])
				}
				total = append(total, t1-t0)
			}
			for j, n := range names {
				b.ReportMetric(float64(median(hops[j])), n+"-ns")
			}
			b.ReportMetric(float64(median(total)), "p50-ns")
			b.ReportMetric(float64(total[len(total)*99/100]), "p99-ns")
		})
	}
}

func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
