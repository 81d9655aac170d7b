package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/benchrow"
	"github.com/onerma/onerma/internal/kvload"
)

// The peers' own benchmark tools, run at their best as extra rows beside
// the load generator's: memcslap (libmemcached-tools) with 16 threads,
// GET by GET and by multi-get, and redis-benchmark with 16 connections
// each pipelining 16 GETs. Neither runs YCSB: memcslap reads its own
// keys (of random values up to 4 KB) in order, redis-benchmark reads
// uniformly random keys ("key:" and 12 digits: 16 bytes).

const (
	kvToolConns    = 16
	kvToolPipeline = 16
	// redisToolKeys is redis-benchmark's key space (-r), written first
	// by a pipelined SET run of 4x as many random keys (98 % of them).
	redisToolKeys = 100_000
)

// kvToolsRun runs the tools for size: redis-benchmark at size, and
// memcslap (whose values are its own) once, with the 32 B pass.
func kvToolsRun(size int, dir string, dur time.Duration, emit emitFunc) error {
	if size == kvSizes[0] {
		for _, test := range []string{"get", "mget"} {
			r, err := memcslapRun(test, dur)
			if err != nil {
				return err
			}
			emit(r)
		}
	}
	r, err := redisBenchmarkRun(size, dir, dur)
	if err != nil {
		return err
	}
	emit(r)
	return nil
}

var memcslapTime = regexp.MustCompile(`Time to (m?get)\s+(\d+) keys by\s+(\d+) threads:\s+([0-9.]+) seconds`)

// memcslapRun runs memcslap's test (get or mget) against a fresh
// memcached for about dur, sized by a short probe: it writes N keys,
// then each thread reads all N (mget: in one multi-get per thread).
func memcslapRun(test string, dur time.Duration) (Row, error) {
	if _, err := exec.LookPath("memcslap"); err != nil {
		return Row{}, fmt.Errorf("memcslap not found (make bench installs libmemcached-tools): %v", err)
	}
	n := 2000
	for attempt := 0; ; attempt++ {
		r, err := memcslapOnce(test, n)
		if err != nil || attempt == 1 {
			return r, err
		}
		want := int(r.OpsPerSec * dur.Seconds() / kvToolConns)
		if want <= 2*n {
			return r, nil
		}
		n = want
	}
}

func memcslapOnce(test string, n int) (Row, error) {
	mc, err := kvload.StartMemcached(1024, 0)
	if err != nil {
		return Row{}, err
	}
	defer mc.Stop()
	args := []string{"--servers=" + mc.Addr, "--test=" + test, "--concurrency=" + strconv.Itoa(kvToolConns), "--execute-number=" + strconv.Itoa(n)}
	cpu := kvload.NewCPUMeter(mc.Pid())
	if err := cpu.Start(); err != nil {
		return Row{}, err
	}
	out, err := exec.Command("memcslap", args...).CombinedOutput()
	if err != nil {
		return Row{}, fmt.Errorf("memcslap %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	used, err := cpu.Stop()
	if err != nil {
		return Row{}, err
	}
	m := memcslapTime.FindSubmatch(out)
	if m == nil {
		return Row{}, fmt.Errorf("memcslap: no \"Time to %s\" line in\n%s", test, out)
	}
	keys, _ := strconv.ParseFloat(string(m[2]), 64)
	secs, _ := strconv.ParseFloat(string(m[4]), 64)
	if secs <= 0 {
		return Row{}, fmt.Errorf("memcslap: %s keys in %s s", m[2], m[4])
	}
	return Row{System: "memcached", Setup: "kv-memcslap", Test: test, Size: 4096, Outstanding: kvToolConns, Cores: runtime.NumCPU(),
		OpsPerSec: keys / secs, Ops: uint64(keys), Seconds: secs,
		CPUSecPerMOps: benchrow.F(used.Seconds() / (keys / 1e6)),
		Command:       "memcslap " + strings.Join(args, " ") + "; server: " + mc.Command(),
		Note:          fmt.Sprintf("memcslap's keys and values (random lengths up to 4096 B); reports no latency; cpu_s_per_mops includes its load of %d SETs", n)}, nil
}

// redisBenchmarkRun runs redis-benchmark's pipelined GETs of size-byte
// values against a fresh redis-server for about dur.
func redisBenchmarkRun(size int, dir string, dur time.Duration) (Row, error) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		return Row{}, fmt.Errorf("redis-benchmark not found (redis-tools, with redis-server): %v", err)
	}
	rdir, err := os.MkdirTemp(dir, "redis-bench-")
	if err != nil {
		return Row{}, err
	}
	rd, err := kvload.StartRedis(rdir, 0)
	if err != nil {
		return Row{}, err
	}
	defer rd.Stop()
	host, port, _ := strings.Cut(rd.Addr, ":")
	common := []string{"-h", host, "-p", port, "-c", strconv.Itoa(kvToolConns), "-P", strconv.Itoa(kvToolPipeline),
		"-d", strconv.Itoa(size), "-r", strconv.Itoa(redisToolKeys)}
	if out, err := exec.Command("redis-benchmark", append(common, "-t", "set", "-n", strconv.Itoa(4*redisToolKeys), "-q")...).CombinedOutput(); err != nil {
		return Row{}, fmt.Errorf("redis-benchmark -t set: %v\n%s", err, out)
	}
	n := 200_000
	var r Row
	for attempt := 0; attempt < 2; attempt++ {
		args := append(common, "-t", "get", "-n", strconv.Itoa(n), "--csv")
		cpu := kvload.NewCPUMeter(rd.Pid())
		if err := cpu.Start(); err != nil {
			return Row{}, err
		}
		out, err := exec.Command("redis-benchmark", args...).Output()
		if err != nil {
			return Row{}, fmt.Errorf("redis-benchmark %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		used, err := cpu.Stop()
		if err != nil {
			return Row{}, err
		}
		if r, err = parseRedisBenchmark(out); err != nil {
			return Row{}, err
		}
		r.Size, r.Ops = size, uint64(n)
		r.Seconds = float64(n) / r.OpsPerSec
		r.CPUSecPerMOps = benchrow.F(used.Seconds() / (float64(n) / 1e6))
		r.Command = "redis-benchmark " + strings.Join(args, " ") + "; server: " + rd.Command()
		if want := int(r.OpsPerSec * dur.Seconds()); want <= 2*n {
			break
		} else {
			n = want
		}
	}
	return r, nil
}

// parseRedisBenchmark reads the GET line of redis-benchmark --csv:
// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
func parseRedisBenchmark(out []byte) (Row, error) {
	for _, line := range bytes.Split(out, []byte("\n")) {
		f := strings.Split(strings.ReplaceAll(string(bytes.TrimSpace(line)), `"`, ""), ",")
		if len(f) != 8 || f[0] != "GET" {
			continue
		}
		v := make([]float64, len(f))
		for i := 1; i < len(f); i++ {
			x, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return Row{}, fmt.Errorf("redis-benchmark: %q: %v", line, err)
			}
			v[i] = x
		}
		return Row{System: "redis", Setup: "kv-redis-benchmark-P16", Test: "get", Outstanding: kvToolConns * kvToolPipeline, Cores: 1,
			OpsPerSec: v[1], P50us: v[4] * 1e3, P99us: benchrow.F(v[6] * 1e3),
			Note: fmt.Sprintf("redis-benchmark: %d connections pipelining %d GETs, uniform random keys over %d; its latency is a request's in its pipelined batch; reports no p99.9",
				kvToolConns, kvToolPipeline, redisToolKeys)}, nil
	}
	return Row{}, fmt.Errorf("redis-benchmark: no GET line in\n%s", out)
}
