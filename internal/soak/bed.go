package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/testbed"
)

// The engines' timers: TIMEOUT 1 s and DISPATCH_TIMEOUT 500 ms, relaxed
// for engines that idle in backoff mode on two shared CPUs (as the routed
// e2e tests' engines); ARP gives up after 250 ms. Regions are plain
// shared memory: the host's few huge pages are left to the EAL.
const (
	engineTimeout = time.Second
	resolveTime   = 250 * time.Millisecond
)

var engineFlags = []string{"-timeout", engineTimeout.String(), "-dispatch-timeout", "500ms",
	"-resolve-timeout", resolveTime.String(), "-arp-retry", "25ms", "-hugetlb", "off",
	"-metrics", metricsAddr}

// metricsAddr is where each engine serves its metrics (and, if the soak
// takes heap profiles, the Go runtime's profiles): loopback of its own
// network namespace (each engine has one to itself), reached through
// nsClient.
const metricsAddr = "127.0.0.1:9464"

// bed is the routed testbed with its four engines, restarted as the
// fault schedule says, and what each incarnation of each did: its RSS
// samples and its counters when it started.
type bed struct {
	*testbed.Routed
	rmactl string
	opts   []testbed.Options
	http   []*http.Client // to each engine's metrics listener
	// profDir is where heap profiles go ("": none are taken).
	profDir string

	mu       sync.Mutex
	eng      []*testbed.Engine
	inc      []int           // incarnation of each engine (1: the first)
	started  []time.Time     // when its current incarnation started
	tracks   []*rssTrack     // every incarnation's RSS samples
	baseline []*ctlmsg.Stats // each engine's counters when it first started
}

// newBed builds the topology and starts no engine.
// Heap profiles go to profDir ("": none are taken).
func newBed(prefix, bin, dir, profDir string) (*bed, error) {
	r, err := testbed.NewRouted(prefix)
	if err != nil {
		return nil, err
	}
	b := &bed{Routed: r, rmactl: filepath.Join(bin, "rmactl"), profDir: profDir}
	n := len(r.Hosts)
	b.eng, b.inc, b.started, b.baseline = make([]*testbed.Engine, n), make([]int, n), make([]time.Time, n), make([]*ctlmsg.Stats, n)
	for i := range r.Hosts {
		o := r.Options(i, filepath.Join(bin, "rmad"), dir)
		o.Extra = append(o.Extra, engineFlags...)
		if profDir != "" {
			o.Extra = append(o.Extra, "-metrics-pprof", "true")
		}
		b.opts = append(b.opts, o)
		b.http = append(b.http, nsClient(r.Hosts[i].NS))
	}
	return b, nil
}

// start starts engine i's next incarnation, attaches it to its subnet and
// reads its counters before any application has opened a portal.
func (b *bed) start(i int) error {
	e, err := testbed.Start(b.opts[i])
	if err != nil {
		return err
	}
	if err := b.Attach(i); err != nil {
		e.Kill()
		return err
	}
	st, err := b.stats(e.Socket)
	if err != nil {
		e.Kill()
		return fmt.Errorf("%s: counters at start: %w", b.Hosts[i].Name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.eng[i] = e
	b.inc[i]++
	b.started[i] = time.Now()
	if b.baseline[i] == nil {
		// The first incarnation's, before any application: later ones
		// may already have an application redialling.
		b.baseline[i] = st
	}
	b.tracks = append(b.tracks, &rssTrack{Engine: b.Hosts[i].Name, Inc: b.inc[i]})
	return nil
}

// kill ends engine i with SIGKILL and returns when it is dead (the
// kernel has closed its sockets and descriptors).
func (b *bed) kill(i int) time.Time {
	b.mu.Lock()
	e := b.eng[i]
	b.mu.Unlock()
	e.Kill()
	return time.Now()
}

// socket is engine i's control socket (the same for every incarnation).
func (b *bed) socket(i int) string {
	return filepath.Join(b.opts[i].Dir, b.opts[i].Name+".sock")
}

// sampleRSS reads every running engine's memory, and the Go runtime's
// figures from its metrics page, into its incarnation's track. A dead
// engine (being restarted) is skipped.
func (b *bed) sampleRSS() {
	type live struct {
		i, pid int
		t      *rssTrack
		start  time.Time
	}
	var engs []live
	b.mu.Lock()
	for i, e := range b.eng {
		if e != nil && !e.Exited() {
			engs = append(engs, live{i, e.Pid(), b.track(i), b.started[i]})
		}
	}
	b.mu.Unlock()
	// Outside the lock: a scrape takes a while, and restarts wait for it.
	for _, l := range engs {
		r, err := readRSS(l.pid)
		if err != nil {
			continue
		}
		r.At = time.Since(l.start)
		if page, err := b.get(l.i, "/metrics"); err == nil {
			r.goMetrics(string(page))
		}
		b.mu.Lock()
		l.t.Samples = append(l.t.Samples, r)
		b.mu.Unlock()
	}
}

// track is engine i's current incarnation's track (b.mu held).
func (b *bed) track(i int) *rssTrack {
	for _, t := range b.tracks {
		if t.Engine == b.Hosts[i].Name && t.Inc == b.inc[i] {
			return t
		}
	}
	panic("soak: no track for " + b.Hosts[i].Name)
}

// get GETs path of engine i's metrics listener.
func (b *bed) get(i int, path string) ([]byte, error) {
	resp, err := b.http[i].Get("http://" + metricsAddr + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s of %s: %s", path, b.Hosts[i].Name, resp.Status)
	}
	return body, err
}

// profile writes a heap profile of engine i, taken after a collection
// (so that it shows what is live), to the profile directory as
// <engine>-<incarnation>-<tag>.heap (go tool pprof -base A B shows what
// grew from A to B), and its memory map with each mapping's resident
// and anonymous memory (/proc/PID/smaps) as <...>.smaps: what grew
// outside the Go heap. Without a profile directory it does nothing.
func (b *bed) profile(i int, tag string) error {
	if b.profDir == "" {
		return nil
	}
	b.mu.Lock()
	name := fmt.Sprintf("%s-%d-%s", b.Hosts[i].Name, b.inc[i], tag)
	e := b.eng[i]
	b.mu.Unlock()
	p, err := b.get(i, "/debug/pprof/heap?gc=1")
	if err != nil {
		return fmt.Errorf("heap profile %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.profDir, name+".heap"), p, 0o644); err != nil {
		return err
	}
	if e == nil || e.Exited() {
		return nil
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", e.Pid()))
	if err != nil {
		return fmt.Errorf("memory map %s: %w", name, err)
	}
	return os.WriteFile(filepath.Join(b.profDir, name+".smaps"), m, 0o644)
}

// nsClient is an HTTP client whose connections are made in network
// namespace ns ("": this process's).
func nsClient(ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		type res struct {
			c   net.Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			// Never unlocked: the thread, in another namespace, ends
			// with the goroutine. The socket stays in the namespace it
			// was made in.
			runtime.LockOSThread()
			if ns != "" {
				fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					ch <- res{nil, err}
					return
				}
				defer unix.Close(fd)
				if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
					ch <- res{nil, fmt.Errorf("setns %s: %w", ns, err)}
					return
				}
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- res{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: dial, MaxIdleConnsPerHost: 1,
		// Plain text: a gzipped page costs the engine a compressor (a
		// few MB of heap its pool keeps) for a page read on loopback.
		DisableCompression: true,
	}}
}

// stats asks the engine at sock for its counters with `rmactl stats
// -json`, as an operator would.
func (b *bed) stats(sock string) (*ctlmsg.Stats, error) {
	out, err := exec.Command(b.rmactl, "-socket", sock, "stats", "-json").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("rmactl stats: %w", err)
	}
	var st ctlmsg.Stats
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("rmactl stats: %w", err)
	}
	return &st, nil
}

// stop stops every engine (SIGTERM; a clean exit is required) and
// removes the topology.
func (b *bed) stop() error {
	var errs []error
	for i, e := range b.eng {
		if e == nil {
			continue
		}
		if err := e.Stop(10 * time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.Hosts[i].Name, err))
		}
	}
	b.Close()
	if len(errs) > 0 {
		return fmt.Errorf("stopping the engines: %v", errs)
	}
	return nil
}
