package main

import "testing"

// The peers' tools print their results as text: these are their outputs
// on this machine (memcslap of libmemcached-tools 1.1.4, redis-benchmark
// of Redis 7.0).
func TestParseKVTools(t *testing.T) {
	memcslap := `Time to generate      20000 test keys:                0.077 seconds.
Time to set           20000 keys:                     0.381 seconds.
Time to start            16 threads:                  0.000 seconds.
--------------------------------------------------------------------
Time to mget         320000 keys by   16 threads:     2.044 seconds.
--------------------------------------------------------------------
Time total:                                           2.574 seconds.`
	m := memcslapTime.FindStringSubmatch(memcslap)
	if m == nil || m[1] != "mget" || m[2] != "320000" || m[3] != "16" || m[4] != "2.044" {
		t.Errorf("memcslap: matched %q, want mget, 320000 keys, 16 threads, 2.044 s", m)
	}
	rb := `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"GET","479041.94","0.479","0.072","0.319","1.039","3.767","25.759"
`
	r, err := parseRedisBenchmark([]byte(rb))
	if err != nil {
		t.Fatal(err)
	}
	if r.OpsPerSec != 479041.94 || r.P50us != 319 || r.P99us == nil || *r.P99us != 3767 || r.Outstanding != 256 {
		t.Errorf("redis-benchmark: %.2f ops/s, p50 %v us, p99 %v us, O=%d; want 479041.94, 319, 3767, 256", r.OpsPerSec, r.P50us, r.P99us, r.Outstanding)
	}
	if _, err := parseRedisBenchmark([]byte(`"SET","1","1","1","1","1","1","1"`)); err == nil {
		t.Error("no GET line: no error")
	}
}
