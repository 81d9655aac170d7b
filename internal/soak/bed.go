package soak

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

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
	"-resolve-timeout", resolveTime.String(), "-arp-retry", "25ms", "-hugetlb", "off"}

// bed is the routed testbed with its four engines, restarted as the
// fault schedule says, and what each incarnation of each did: its RSS
// samples and its counters when it started.
type bed struct {
	*testbed.Routed
	rmactl string
	opts   []testbed.Options

	mu       sync.Mutex
	eng      []*testbed.Engine
	inc      []int           // incarnation of each engine (1: the first)
	started  []time.Time     // when its current incarnation started
	tracks   []*rssTrack     // every incarnation's RSS samples
	baseline []*ctlmsg.Stats // each engine's counters when it first started
}

// newBed builds the topology and starts no engine.
func newBed(prefix, bin, dir string) (*bed, error) {
	r, err := testbed.NewRouted(prefix)
	if err != nil {
		return nil, err
	}
	b := &bed{Routed: r, rmactl: filepath.Join(bin, "rmactl")}
	n := len(r.Hosts)
	b.eng, b.inc, b.started, b.baseline = make([]*testbed.Engine, n), make([]int, n), make([]time.Time, n), make([]*ctlmsg.Stats, n)
	for i := range r.Hosts {
		o := r.Options(i, filepath.Join(bin, "rmad"), dir)
		o.Extra = append(o.Extra, engineFlags...)
		b.opts = append(b.opts, o)
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

// sampleRSS reads every running engine's VmRSS into its incarnation's
// track. A dead engine (being restarted) is skipped.
func (b *bed) sampleRSS() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range b.eng {
		if e == nil || e.Exited() {
			continue
		}
		r, err := readRSS(e.Pid())
		if err != nil {
			continue
		}
		r.At = time.Since(b.started[i])
		for _, t := range b.tracks {
			if t.Engine == b.Hosts[i].Name && t.Inc == b.inc[i] {
				t.Samples = append(t.Samples, r)
			}
		}
	}
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
