package main

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/port/dpdkport/xdp"
	"github.com/onerma/onerma/engine/port/faultport"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/wire"
)

// defaultJSON is the configuration every run starts from; the -config file
// overrides it key by key, flags override both.
//
//go:embed default.json
var defaultJSON []byte

// Config is rmad's configuration file (JSON, unknown keys rejected).
type Config struct {
	EALArgs  []string      `json:"eal_args"`
	Port     PortConfig    `json:"port"`
	Engine   EngineConfig  `json:"engine"`
	Ctl      CtlConfig     `json:"ctl"`
	Poll     PollConfig    `json:"poll"`
	Fault    FaultConfig   `json:"fault"`
	Metrics  MetricsConfig `json:"metrics"`
	LogLevel string        `json:"log_level"`
	// OOMScoreAdj is written to /proc/self/oom_score_adj at start (see
	// setOOMScoreAdj).
	OOMScoreAdj int `json:"oom_score_adj"`
}

// PortConfig is the DPDK port.
type PortConfig struct {
	Name      string `json:"name"` // ethdev name (for a vdev, its name before the first comma)
	Vdev      string `json:"vdev"` // --vdev argument creating it; "" for a device the EAL finds itself
	RxDesc    uint16 `json:"rx_desc"`
	TxDesc    uint16 `json:"tx_desc"`
	Mbufs     uint32 `json:"mbufs"`      // mbuf pool size (2^n-1 is optimal)
	MbufCache uint32 `json:"mbuf_cache"` // per-lcore mempool cache
	Burst     int    `json:"burst"`      // rx/tx burst size
	// HandOverRing is the size of each ring that hands frames from one
	// polling core to another (dpdkport.Queues: cores × (cores-1) rings).
	HandOverRing int `json:"handover_ring"`
}

// NeighborConfig is a static IPv4 -> MAC entry.
type NeighborConfig struct {
	IP  string `json:"ip"`
	MAC string `json:"mac"`
}

// EngineConfig maps onto engine.Config.
type EngineConfig struct {
	// IP is the engine's address, "A.B.C.D", or its address and on-link
	// subnet, "A.B.C.D/N": engine.Config.LocalIP and Subnet. A bare
	// address puts every destination on-link (ARP asks for each).
	IP string `json:"ip"`
	// Gateway is the next hop of destinations off the subnet and off
	// every route ("": none, they are unreachable); it needs IP as a
	// prefix, and must be on-link.
	Gateway string `json:"gateway"`
	// Routes are static routes; the subnet, the gateway's default route
	// and these take part in one longest-prefix match:
	//
	//	"routes": [{"dst": "10.9.0.0/16", "via": "10.1.0.254", "mtu": 1400}]
	Routes      []RouteConfig `json:"routes"`
	MAC         string        `json:"mac"` // "": the port's MAC
	UDPPort     uint16        `json:"udp_port"`
	MTU         int           `json:"mtu"`
	Slots       int           `json:"slots"`
	Regions     int           `json:"regions"`
	Portals     int           `json:"portals"`
	Tenants     int           `json:"tenants"`
	WindowBytes int           `json:"window_bytes"`
	// Responsive: a tenant may borrow window beyond its share for ops to
	// a destination that answered one of the core's ops within this long
	// (0: timeout/4); Destinations bounds the destinations each core
	// remembers the last answer of (engine.Config.Responsive,
	// Destinations; docs/tenants.md).
	Responsive   Duration `json:"responsive"`
	Destinations int      `json:"destinations"`
	HighBurst    int      `json:"high_burst"`
	InboundQueue int      `json:"inbound_queue"`
	// NackThreshold is the inbound queue depth that NACKs; 0: derived
	// as the paper's §6.1 derives it, from TIMEOUT, the port type's RTT
	// and ServeRate (timeout.go: nackDerivation; rmad logs it at start,
	// rmactl stats shows it).
	NackThreshold int `json:"nack_threshold"`
	// ServeRate is the requests a serving core serves per second, for
	// the NACK threshold's derivation; 0: the port type's measured rate.
	ServeRate    float64 `json:"serve_rate"`
	ServeBudget  int     `json:"serve_budget"`
	LowAfterHigh int     `json:"low_after_high"`
	// PollBytes bounds the bulk work each stage of a poll starts while
	// priority work (high class, or at most 256 bytes) is in progress
	// (engine.Config.PollBytes; 0: no bound; the default 4096: one 4 KB
	// op). The bound trades bulk goodput for short ops' latency:
	// docs/tenants.md.
	PollBytes int `json:"poll_bytes"`
	// PriorityHold keeps the bound for this long after the latest
	// priority op or request (engine.Config.PriorityHold; 0: 50 µs).
	PriorityHold Duration `json:"priority_hold"`
	// HighHold keeps it for this long after the latest of the high class
	// (engine.Config.HighHold; 0: 1 ms).
	HighHold        Duration `json:"high_hold"`
	DispatchTimeout Duration `json:"dispatch_timeout"`
	Timeout         Duration `json:"timeout"` // 0: the port type's default (timeout.go), set when loaded
	PullIdleTimeout Duration `json:"pull_idle_timeout"`
	ResolveTimeout  Duration `json:"resolve_timeout"`
	// DoorbellGap is the least time between two rings of one portal's
	// completion doorbell (engine.Config.DoorbellGap; 0: none).
	DoorbellGap Duration `json:"doorbell_gap"`
	ARPRetry    Duration `json:"arp_retry"`
	ICMPRate    int      `json:"icmp_rate"`  // ICMP echo requests answered per second at most (0: none)
	ICMPBurst   int      `json:"icmp_burst"` // of which at once after a quiet spell
	// NeighborReachable is how long a neighbor's MAC is good for after
	// it answered our ARP request; ops re-ask past 3/4 of it.
	NeighborReachable Duration `json:"neighbor_reachable"`
	NeighborTable     int      `json:"neighbor_table"`
	// NeighborsPerTenant bounds the incomplete neighbor entries (new
	// on-link addresses still being resolved) one tenant's ops hold at
	// once on a core; beyond it an op to yet another new address ends
	// UNREACHABLE at once. ARPRate and ARPBurst bound the engine's ARP
	// requests (all cores): per second, and at once.
	NeighborsPerTenant int `json:"neighbors_per_tenant"`
	ARPRate            int `json:"arp_rate"`
	ARPBurst           int `json:"arp_burst"`
	// DSCP is the DSCP of each class's frames (engine.Config.DSCP), so
	// that a fabric can honour the two classes: {"low": 0, "high": 46}.
	DSCP        DSCPConfig `json:"dscp"`
	ReplayPeers int        `json:"replay_peers"` // senders' anti-replay windows kept (0: off)
	// The serving side's bounds per region owner (the tenant whose region
	// a request names) and per sender (its source address, counted apart
	// for each owner whose regions it names), per core
	// (engine.Config; 0: derived, as rmad logs them at start): requests
	// queued at once beyond which one is NACKed (default nack_threshold/2
	// each), pulls (WRITEs and REKEYs being served) at once beyond which
	// a write waits while others' are pulled (default half of the
	// pulls a core runs at once), and a sender address's replay lanes of
	// one owner's windows (default 64, every lane an engine can use: set
	// it to the most cores any engine that reads from this one runs).
	InboundPerOwner      int              `json:"inbound_per_owner"`
	InboundPerSender     int              `json:"inbound_per_sender"`
	PullsPerOwner        int              `json:"pulls_per_owner"`
	PullsPerSender       int              `json:"pulls_per_sender"`
	ReplayLanesPerSender int              `json:"replay_lanes_per_sender"`
	HairpinSelf          bool             `json:"hairpin_self"`
	Neighbors            []NeighborConfig `json:"neighbors"`
	// IVState is the IV counter state file (aesni.OpenIVSource): it must
	// survive restarts and reboots, and belongs to one engine at a time
	// (it is locked). "": DefaultIVDir/iv-<ip>.state, <ip> the address
	// of engine.ip (without a prefix length), resolved when the config
	// is loaded (so -print-config shows it).
	IVState  string `json:"iv_state"`
	KeyCache int    `json:"key_cache"` // prepared AEADs cached per core and side
	// Crypto is who computes the seals (engine.Config.Crypto): "ipsec-mb"
	// (a burst's seals in one cgo call, intel-ipsec-mb) or "go"
	// (crypto/cipher, one message at a time). Opens use crypto/cipher.
	Crypto string `json:"crypto"`
}

// DefaultIVDir holds the IV state files of engines whose iv_state is not
// set. Persistent storage: a lost state file repeats IVs.
const DefaultIVDir = "/var/lib/onerma"

// defaultIVState is the IV state path of an engine at address ip. Nonces
// are the sender's address and its counter, so the counter space belongs
// to the address: an engine keeps its counters as long as it keeps its
// address, whatever else changes, and two engines claiming one address on
// one host cannot both start (the file is locked), which would otherwise
// repeat nonces.
func defaultIVState(ip string) string {
	return filepath.Join(DefaultIVDir, "iv-"+ip+".state")
}

// ivStatePath is engine.iv_state, or its default when empty.
func (c *Config) ivStatePath() string {
	if c.Engine.IVState == "" {
		ip := c.Engine.IP
		if a, _, err := engineAddr(ip); err == nil {
			ip = a.String() // the address, without the subnet's length
		}
		return defaultIVState(ip)
	}
	return c.Engine.IVState
}

// PollConfig is the polling cores: one, or one per CPU of CPUs (cores.go).
type PollConfig struct {
	Mode string `json:"mode"` // "busy": spin; "backoff": sleep when idle; "yield": spin, sched_yield when idle
	// CPUs pins one polling core to each CPU listed, each with its own
	// queue pair of the port ("cpus": [1, 2]; -cpu 1,2). CPU, the single
	// CPU of an engine of one core (-1: no pinning), is the same as a
	// list of one; set one of the two.
	CPUs []int `json:"cpus"`
	CPU  int   `json:"cpu"`
	// Cores is the number of polling cores, each with its own queue
	// pair; 0: one per listed CPU, or one without a list. Without a
	// list, cores > 1 run unpinned (tests, shared hosts).
	Cores    int      `json:"cores"`
	MaxSleep Duration `json:"max_sleep"` // backoff: longest idle sleep (wake-up latency bound)

	// Nice is the polling thread's nice value in busy mode with a CPU
	// (the CPU is the engine's; other modes, or no CPU, leave the thread
	// at the process's): at -20 a task the kernel puts on the engine's
	// CPU gets short slices rarely and is soon balanced away, where at 0
	// it would take half the CPU in slices of milliseconds and the
	// engine's ops in flight would time out. An application that shares
	// the engine's CPU gets ~1 % of it at -20: set 0 for that.
	Nice int `json:"nice"`
}

// FaultConfig maps onto faultport.Config: a fault-injecting wrapper in
// front of the DPDK port, for tests of loss recovery where no network
// emulator is at hand. Off unless a probability is set (the default: every
// probability 0, and rmad does not wrap the port at all):
//
//	"fault": {"direction": "rx", "drop": 0.05, "duplicate": 0.01,
//	  "reorder": 0.01, "reorder_depth": 4,
//	  "delay": 0.02, "delay_by": "100us", "jitter": "50us",
//	  "pool": 256, "seed": 1}
//
// Each frame of the faulted direction ("rx": received, "tx": sent, or
// "both") is dropped with probability drop; else delayed by delay_by plus
// a uniform jitter in [0, jitter] with probability delay; else held until
// reorder_depth later frames have overtaken it with probability reorder;
// independently, a frame not dropped is duplicated with probability
// duplicate. Held frames are copied into a pool of pool frame buffers
// (9014 bytes each); when it is empty frames pass unfaulted. seed fixes
// the random streams: the same seed and frames give the same faults. In
// backoff mode a delayed frame may be released up to poll.max_sleep late.
// The counters are in the stats reply's "fault" key (rmactl stats -json)
// and logged at shutdown.
type FaultConfig struct {
	Direction    string   `json:"direction"`
	Drop         float64  `json:"drop"`
	Duplicate    float64  `json:"duplicate"`
	Reorder      float64  `json:"reorder"`
	ReorderDepth int      `json:"reorder_depth"`
	Delay        float64  `json:"delay"`
	DelayBy      Duration `json:"delay_by"`
	Jitter       Duration `json:"jitter"`
	Pool         int      `json:"pool"`
	Seed         uint64   `json:"seed"`
}

// faultConfig converts and validates the fault section (the wrapper's
// burst is port.burst). rmad wraps the port only if the result is Active.
func (c *Config) faultConfig() (faultport.Config, error) {
	f := &c.Fault
	fc := faultport.Config{
		Direction: f.Direction,
		Drop:      f.Drop, Duplicate: f.Duplicate, Reorder: f.Reorder, Delay: f.Delay,
		ReorderDepth: f.ReorderDepth,
		DelayNs:      int64(f.DelayBy), JitterNs: int64(f.Jitter),
		Pool: f.Pool, Burst: c.Port.Burst, Seed: f.Seed,
	}
	switch {
	case f.DelayBy < 0:
		return fc, fmt.Errorf("%w: fault.delay_by %v is negative", errConfig, time.Duration(f.DelayBy))
	case f.Jitter < 0:
		return fc, fmt.Errorf("%w: fault.jitter %v is negative", errConfig, time.Duration(f.Jitter))
	}
	if err := fc.Validate(); err != nil {
		return fc, fmt.Errorf("%w: fault: %v", errConfig, err)
	}
	return fc, nil
}

// Duration is a time.Duration written as a Go duration string ("2ms").
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"2ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// decodeInto overlays a JSON document onto cfg: keys present replace,
// keys absent keep their value; unknown keys are an error.
func decodeInto(cfg *Config, r io.Reader, what string) error {
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	if err := d.Decode(cfg); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if d.More() {
		return fmt.Errorf("%s: trailing data after the JSON object", what)
	}
	return nil
}

// defaultConfig is the embedded default.
func defaultConfig() Config {
	var c Config
	if err := decodeInto(&c, bytes.NewReader(defaultJSON), "embedded default config"); err != nil {
		panic(err) // a build defect: TestDefaultConfigValid catches it
	}
	return c
}

// setter applies one flag to the config.
type setter func(c *Config, v string) error

func setStr(f func(*Config) *string) setter {
	return func(c *Config, v string) error { *f(c) = v; return nil }
}

func setInt(f func(*Config) *int) setter {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		*f(c) = n
		return nil
	}
}

func setUint[T uint16 | uint32 | uint64](bits int, f func(*Config) *T) setter {
	return func(c *Config, v string) error {
		n, err := strconv.ParseUint(v, 0, bits)
		if err != nil {
			return err
		}
		*f(c) = T(n)
		return nil
	}
}

func setBool(f func(*Config) *bool) setter {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return err
		}
		*f(c) = b
		return nil
	}
}

func setFloat(f func(*Config) *float64) setter {
	return func(c *Config, v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return err
		}
		*f(c) = x
		return nil
	}
}

// setOptGID sets a gid, or none ("none", "").
func setOptGID(f func(*Config) **uint32) setter {
	return func(c *Config, v string) error {
		if v == "none" || v == "" {
			*f(c) = nil
			return nil
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return err
		}
		g := uint32(n)
		*f(c) = &g
		return nil
	}
}

func setDur(f func(*Config) *Duration) setter {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		*f(c) = Duration(d)
		return nil
	}
}

// setConnsQuota sets ctl.quota.conns (-max-conns-per-uid, its older name).
func setConnsQuota(c *Config, v string) error {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n < 1 {
		return fmt.Errorf("want a count of at least 1")
	}
	c.Ctl.Quota.Conns = ctl.Count(n)
	return nil
}

// flagSpecs: every flag that overrides a config key, named after the key.
var flagSpecs = []struct {
	name, usage string
	set         setter
}{
	{"eal", "EAL arguments, space separated (replaces eal_args)", func(c *Config, v string) error { c.EALArgs = strings.Fields(v); return nil }},
	{"port-name", "DPDK port (ethdev) name", setStr(func(c *Config) *string { return &c.Port.Name })},
	{"vdev", "--vdev argument creating the port (\"\" for none)", setStr(func(c *Config) *string { return &c.Port.Vdev })},
	{"rx-desc", "rx descriptors", setUint(16, func(c *Config) *uint16 { return &c.Port.RxDesc })},
	{"tx-desc", "tx descriptors", setUint(16, func(c *Config) *uint16 { return &c.Port.TxDesc })},
	{"mbufs", "mbuf pool size", setUint(32, func(c *Config) *uint32 { return &c.Port.Mbufs })},
	{"mbuf-cache", "per-lcore mbuf cache", setUint(32, func(c *Config) *uint32 { return &c.Port.MbufCache })},
	{"burst", "rx/tx burst size", setInt(func(c *Config) *int { return &c.Port.Burst })},
	{"ip", "engine IPv4 address A.B.C.D, or A.B.C.D/N with its on-link subnet (a bare address: every destination on-link)", setStr(func(c *Config) *string { return &c.Engine.IP })},
	{"gateway", "next hop of destinations off the subnet (needs -ip A.B.C.D/N; \"\": none)", setStr(func(c *Config) *string { return &c.Engine.Gateway })},
	{"route", "a static route DST[,via=ADDR][,mtu=N], e.g. 10.9.0.0/16,via=10.1.0.254,mtu=1400; repeatable, each one appended to engine.routes", addRoute},
	{"dscp-low", "DSCP (0..63) of the low class's frames", setInt(func(c *Config) *int { return &c.Engine.DSCP.Low })},
	{"dscp-high", "DSCP (0..63) of the high class's frames", setInt(func(c *Config) *int { return &c.Engine.DSCP.High })},
	{"neighbor-reachable", "how long a neighbor's MAC is good for after it answered our ARP request (re-asked past 3/4)", setDur(func(c *Config) *Duration { return &c.Engine.NeighborReachable })},
	{"mac", "engine MAC address (\"\": the port's)", setStr(func(c *Config) *string { return &c.Engine.MAC })},
	{"udp-port", "engine UDP port", setUint(16, func(c *Config) *uint16 { return &c.Engine.UDPPort })},
	{"mtu", "IPv4 MTU", setInt(func(c *Config) *int { return &c.Engine.MTU })},
	{"slots", "command slot table size", setInt(func(c *Config) *int { return &c.Engine.Slots })},
	{"regions", "region table size", setInt(func(c *Config) *int { return &c.Engine.Regions })},
	{"portals", "portal table size", setInt(func(c *Config) *int { return &c.Engine.Portals })},
	{"tenants", "tenants the engine serves at once (the data path's per-tenant state)", setInt(func(c *Config) *int { return &c.Engine.Tenants })},
	{"window-bytes", "solicitation window bytes", setInt(func(c *Config) *int { return &c.Engine.WindowBytes })},
	{"responsive", "a tenant borrows window beyond its share only for ops to a destination that answered within this long (0: timeout/4)", setDur(func(c *Config) *Duration { return &c.Engine.Responsive })},
	{"destinations", "destinations whose last answer each core remembers (the least recently answered forgotten)", setInt(func(c *Config) *int { return &c.Engine.Destinations })},
	{"high-burst", "high-class grants before one low-class grant", setInt(func(c *Config) *int { return &c.Engine.HighBurst })},
	{"inbound-queue", "inbound request queue size", setInt(func(c *Config) *int { return &c.Engine.InboundQueue })},
	{"nack-threshold", "inbound queue depth that NACKs (0: derived from the timeout, the port type's RTT and the serve rate, as the paper's §6.1 derives it)", setInt(func(c *Config) *int { return &c.Engine.NackThreshold })},
	{"serve-rate", "requests a serving core serves per second, for the NACK threshold's derivation (0: the port type's measured rate)", setFloat(func(c *Config) *float64 { return &c.Engine.ServeRate })},
	{"serve-budget", "requests served per poll", setInt(func(c *Config) *int { return &c.Engine.ServeBudget })},
	{"low-after-high", "low-class requests served in a poll after a high-class frame left in it (0: no bound)", setInt(func(c *Config) *int { return &c.Engine.LowAfterHigh })},
	{"poll-bytes", "bulk bytes each stage of a poll starts while high-class or short work is in progress (0: no bound)", setInt(func(c *Config) *int { return &c.Engine.PollBytes })},
	{"priority-hold", "how long poll-bytes stays in force after the latest high-class or short op (0: 50µs)", setDur(func(c *Config) *Duration { return &c.Engine.PriorityHold })},
	{"high-hold", "how long poll-bytes stays in force after the latest high-class op (0: 1ms)", setDur(func(c *Config) *Duration { return &c.Engine.HighHold })},
	{"dispatch-timeout", "DISPATCH_TIMEOUT", setDur(func(c *Config) *Duration { return &c.Engine.DispatchTimeout })},
	{"timeout", "TIMEOUT (0: the port type's default, 2-8 ms)", setDur(func(c *Config) *Duration { return &c.Engine.Timeout })},
	{"pull-idle-timeout", "a served WRITE whose first data has not come this long after its pull may be abandoned when a request needs its context or window (bounds what a replayed write request holds; 0: timeout/4)", setDur(func(c *Config) *Duration { return &c.Engine.PullIdleTimeout })},
	{"resolve-timeout", "ARP resolution timeout", setDur(func(c *Config) *Duration { return &c.Engine.ResolveTimeout })},
	{"doorbell-gap", "least time between two rings of one portal's completion doorbell, an interrupt throttle (0: none; at most 1ms)", setDur(func(c *Config) *Duration { return &c.Engine.DoorbellGap })},
	{"arp-retry", "ARP retry interval", setDur(func(c *Config) *Duration { return &c.Engine.ARPRetry })},
	{"icmp-rate", "ICMP echo requests (ping) answered per second at most (0: none)", setInt(func(c *Config) *int { return &c.Engine.ICMPRate })},
	{"icmp-burst", "ICMP echo requests answered at once after a quiet spell", setInt(func(c *Config) *int { return &c.Engine.ICMPBurst })},
	{"neighbor-table", "neighbor table size (power of two)", setInt(func(c *Config) *int { return &c.Engine.NeighborTable })},
	{"neighbors-per-tenant", "incomplete neighbor entries (new on-link addresses being resolved) one tenant holds at once per core; beyond it ops to new addresses end UNREACHABLE at once", setInt(func(c *Config) *int { return &c.Engine.NeighborsPerTenant })},
	{"arp-rate", "ARP requests the engine sends per second at most (all cores; over it a request waits for its next retry)", setInt(func(c *Config) *int { return &c.Engine.ARPRate })},
	{"arp-burst", "ARP requests the engine sends at once after a quiet spell", setInt(func(c *Config) *int { return &c.Engine.ARPBurst })},
	{"replay-peers", "senders whose anti-replay windows are kept (8 KB each, at most 8192; 0 turns replay detection off), each owner tenant guaranteed replay_peers/tenants of them", setInt(func(c *Config) *int { return &c.Engine.ReplayPeers })},
	{"replay-lanes-per-sender", "a sender address's replay lanes of one owner's windows (0: 64, every lane an engine can use)", setInt(func(c *Config) *int { return &c.Engine.ReplayLanesPerSender })},
	{"inbound-per-owner", "requests for one owner tenant's regions queued at once per core; beyond, NACK (0: nack_threshold/2)", setInt(func(c *Config) *int { return &c.Engine.InboundPerOwner })},
	{"inbound-per-sender", "requests from one source address for one owner tenant's regions queued at once per core; beyond, NACK (0: nack_threshold/2)", setInt(func(c *Config) *int { return &c.Engine.InboundPerSender })},
	{"pulls-per-owner", "WRITEs and REKEYs to one owner tenant's regions served at once per core; beyond, they wait (0: half the pulls a core runs at once)", setInt(func(c *Config) *int { return &c.Engine.PullsPerOwner })},
	{"pulls-per-sender", "WRITEs and REKEYs from one source address to one owner tenant's regions served at once per core; beyond, they wait (0: half the pulls a core runs at once)", setInt(func(c *Config) *int { return &c.Engine.PullsPerSender })},
	{"iv-state", "IV counter state file (\"\": " + DefaultIVDir + "/iv-<ip>.state); must persist across restarts, one per engine", setStr(func(c *Config) *string { return &c.Engine.IVState })},
	{"key-cache", "prepared AEADs cached per core and side", setInt(func(c *Config) *int { return &c.Engine.KeyCache })},
	{"crypto", "seal backend: \"ipsec-mb\" (batched, one cgo call per burst) or \"go\" (crypto/cipher)", setStr(func(c *Config) *string { return &c.Engine.Crypto })},
	{"hairpin-self", "send frames to this engine's own address out of the port (a reflecting port such as net_ring loopback)", setBool(func(c *Config) *bool { return &c.Engine.HairpinSelf })},
	{"socket", "control socket path (ctl.socket, by default " + ctlmsg.DefaultSocket + ")", setStr(func(c *Config) *string { return &c.Ctl.Socket })},
	{"socket-mode", "control socket permissions (octal)", setStr(func(c *Config) *string { return &c.Ctl.SocketMode })},
	{"cmd-cap", "default command ring capacity", setUint(32, func(c *Config) *uint32 { return &c.Ctl.CmdCap })},
	{"cpl-cap", "default completion ring capacity", setUint(32, func(c *Config) *uint32 { return &c.Ctl.CplCap })},
	{"slot-cap", "default slot cap per application (slot_policy.default)", setInt(func(c *Config) *int { return &c.Ctl.SlotPolicy.Default })},
	{"default-class", "highest class of service of applications no slot_policy rule matches: low or high", setStr(func(c *Config) *string { return &c.Ctl.SlotPolicy.DefaultClass })},
	{"max-conns", "control connections at once", setInt(func(c *Config) *int { return &c.Ctl.MaxConns })},
	{"max-conns-per-uid", "control connections at once per tenant (the older name of ctl.quota.conns)", setConnsQuota},
	{"reserve-tenants", "tenants that hold nothing yet the engine keeps room for in every pool, each with its guarantee", setInt(func(c *Config) *int { return &c.Ctl.ReserveTenants })},
	{"open-deadline", "close a control connection that has not opened a portal this long after it connected", setDur(func(c *Config) *Duration { return &c.Ctl.OpenDeadline })},
	{"max-regions-per-portal", "regions per portal", setInt(func(c *Config) *int { return &c.Ctl.MaxRegionsPerPortal })},
	{"max-region-bytes", "bytes per region", setUint(64, func(c *Config) *uint64 { return &c.Ctl.MaxRegionBytes })},
	{"max-portal-bytes", "region bytes per portal", setUint(64, func(c *Config) *uint64 { return &c.Ctl.MaxPortalBytes })},
	{"hugetlb", "shared memory: auto or off", setStr(func(c *Config) *string { return &c.Ctl.Hugetlb })},
	{"passwd-file", "passwd file naming the uids that are tenants of their own (\"\": none)", setStr(func(c *Config) *string { return &c.Ctl.PasswdFile })},
	{"subuid-file", "subordinate uid file: a uid in a user's range counts as that user (\"\": none)", setStr(func(c *Config) *string { return &c.Ctl.SubuidFile })},
	{"stats-rate", "stats requests per second of one tenant", setFloat(func(c *Config) *float64 { return &c.Ctl.StatsRate })},
	{"stats-burst", "stats requests of one tenant at once", setInt(func(c *Config) *int { return &c.Ctl.StatsBurst })},
	{"operator-gid", "group whose members see every tenant's portals and usage in stats, as root does (\"none\": no group)", setOptGID(func(c *Config) **uint32 { return &c.Ctl.OperatorGID })},
	{"id-state", "process identity state file (\"\": engine.iv_state + \".ids\"); must persist as long as the IV state", setStr(func(c *Config) *string { return &c.Ctl.IDState })},
	{"oom-score-adj", "rmad's oom_score_adj (-1000..1000): low, so the kernel's OOM killer picks a tenant first", setInt(func(c *Config) *int { return &c.OOMScoreAdj })},
	{"poll-mode", "busy, backoff or yield (spin, giving the CPU to a co-located app when idle)", setStr(func(c *Config) *string { return &c.Poll.Mode })},
	{"cpu", "CPUs of the polling cores, one core each: N, or a list 1,2 (-1: one core, unpinned)", setCPUs},
	{"cores", "polling cores (0: one per -cpu CPU, or one); without a CPU list they run unpinned", setInt(func(c *Config) *int { return &c.Poll.Cores })},
	{"handover-ring", "frames each ring between two polling cores holds", setInt(func(c *Config) *int { return &c.Port.HandOverRing })},
	{"max-sleep", "backoff mode: longest idle sleep", setDur(func(c *Config) *Duration { return &c.Poll.MaxSleep })},
	{"poll-nice", "busy mode with a CPU: the polling thread's nice value (-20..19; 0 if an app shares the CPU)", setInt(func(c *Config) *int { return &c.Poll.Nice })},
	{"fault-direction", "fault injection: frames faulted, rx, tx or both", setStr(func(c *Config) *string { return &c.Fault.Direction })},
	{"fault-drop", "fault injection: probability a frame is dropped", setFloat(func(c *Config) *float64 { return &c.Fault.Drop })},
	{"fault-duplicate", "fault injection: probability a frame is duplicated", setFloat(func(c *Config) *float64 { return &c.Fault.Duplicate })},
	{"fault-reorder", "fault injection: probability a frame is reordered", setFloat(func(c *Config) *float64 { return &c.Fault.Reorder })},
	{"fault-reorder-depth", "fault injection: frames that overtake a reordered frame", setInt(func(c *Config) *int { return &c.Fault.ReorderDepth })},
	{"fault-delay", "fault injection: probability a frame is delayed", setFloat(func(c *Config) *float64 { return &c.Fault.Delay })},
	{"fault-delay-by", "fault injection: delay of a delayed frame", setDur(func(c *Config) *Duration { return &c.Fault.DelayBy })},
	{"fault-jitter", "fault injection: uniform jitter added to a delay", setDur(func(c *Config) *Duration { return &c.Fault.Jitter })},
	{"fault-pool", "fault injection: frame buffers for held frames", setInt(func(c *Config) *int { return &c.Fault.Pool })},
	{"fault-seed", "fault injection: random seed", setUint(64, func(c *Config) *uint64 { return &c.Fault.Seed })},
	{"metrics", "serve Prometheus metrics at http://HOST:PORT/metrics (\"\": off)", setStr(func(c *Config) *string { return &c.Metrics.Listen })},
	{"metrics-pprof", "also serve the Go runtime's profiles at http://HOST:PORT/debug/pprof/ (debugging; loopback only)", setBool(func(c *Config) *bool { return &c.Metrics.Pprof })},
	{"metrics-portals", "also export a series per portal, labelled with its name, uid and identity (a new series per process: debugging)", setBool(func(c *Config) *bool { return &c.Metrics.Portals })},
	{"log-level", "trace, debug, info, warn, error", setStr(func(c *Config) *string { return &c.LogLevel })},
}

// options are the flags that are not config keys, and the config keys'
// flags as given.
type options struct {
	configPath  string
	printConfig bool
	cpuProfile  string
	selftest    selfTestOptions // selftest.go
	overrides   []override
}

// override is one config key's flag as given on the command line.
type override struct {
	set   setter
	name  string
	value string
}

// loadConfig builds the effective configuration: embedded default, then
// the -config file, then every flag given on the command line, in order.
func loadConfig(args []string, stderr io.Writer) (Config, options, error) {
	fs := cli.New("rmad", "rmad [-config FILE] [-print-config] [flags]",
		"rmad -selftest read_bw|write_bw|read_lat [-s SIZE] [-O N] [-D DURATION] [-json] [flags]")
	fs.Notes("Flags override the config file, which overrides the embedded default; each\nconfig key's flag is named after it (engine.udp_port: -udp-port).")
	fs.Example("rmad -ip 10.0.0.1 -socket "+ctlmsg.DefaultSocket+" -poll-mode busy -cpu 1",
		"rmad -config /etc/onerma/rmad.json -print-config",
		"rmad -vdev net_ring0 -port-name net_ring0 -ip 10.99.2.1 -hairpin-self=true -cpu 1 -selftest read_bw -s 64 -O 64 -D 5s -json")
	fs.SetOutput(stderr)
	var opt options
	fs.StringVar(&opt.configPath, "config", "", "JSON config file (overrides the embedded default)")
	fs.BoolVar(&opt.printConfig, "print-config", false, "print the effective config as JSON and exit")
	fs.StringVar(&opt.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the whole run to this file")
	opt.selftest.flags(fs)
	for _, f := range flagSpecs {
		fs.Func(f.name, f.usage, func(v string) error {
			// Check now for a precise usage error; apply after the file.
			var scratch Config
			if err := f.set(&scratch, v); err != nil {
				return err
			}
			opt.overrides = append(opt.overrides, override{f.set, f.name, v})
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, opt, err
	}
	if fs.NArg() > 0 {
		return Config{}, opt, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := opt.selftest.check(fs); err != nil {
		return Config{}, opt, err
	}
	cfg, err := opt.build(-1)
	return cfg, opt, err
}

// build makes the config: the embedded default, the -config file, then
// every override but the skip'th, in order.
func (opt *options) build(skip int) (Config, error) {
	cfg := defaultConfig()
	if opt.configPath != "" {
		f, err := os.Open(opt.configPath)
		if err != nil {
			return Config{}, err
		}
		err = decodeInto(&cfg, f, opt.configPath)
		f.Close()
		if err == nil {
			err = cfg.Ctl.foldConnsAlias()
		}
		if err != nil {
			return Config{}, err
		}
	}
	for i, o := range opt.overrides {
		if i == skip {
			continue
		}
		if err := o.set(&cfg, o.value); err != nil {
			return Config{}, fmt.Errorf("-%s: %w", o.name, err)
		}
	}
	cfg.Engine.IVState = cfg.ivStatePath()
	cfg.Ctl.IDState = cfg.idStatePath()
	if cfg.Engine.Timeout == 0 {
		cfg.Engine.Timeout = Duration(defaultTimeout(&cfg.Port, cfg.Poll.Mode)) // timeout.go
	}
	return cfg, nil
}

// nameFlag prefixes err, the effective config's validation error, with
// the flag that caused it: the last one given without which the config
// validates or fails otherwise. A config key's error names the key (and
// its flag is named after it); this names the flag as typed.
func (opt *options) nameFlag(err error) error {
	for i := len(opt.overrides) - 1; i >= 0; i-- {
		cfg, berr := opt.build(i)
		if berr != nil {
			continue
		}
		if verr := cfg.validate(); verr == nil || verr.Error() != err.Error() {
			o := opt.overrides[i]
			return fmt.Errorf("-%s %s: %w", o.name, o.value, err)
		}
	}
	return err
}

// errConfig wraps every validation failure.
var errConfig = errors.New("invalid config")

// engineConfig converts and validates the engine part. portMAC fills an
// empty MAC; iv is the engine's IV source (opened from engine.iv_state).
func (c *Config) engineConfig(portMAC wire.MAC, iv *aesni.IVSource) (engine.Config, error) {
	e := &c.Engine
	ec := engine.DefaultConfig()
	ip, subnet, err := engineAddr(e.IP)
	if err != nil || !ip.Is4() {
		return ec, fmt.Errorf("%w: engine.ip %q is neither an IPv4 address nor an address/prefix length", errConfig, e.IP)
	}
	mac := portMAC
	if e.MAC != "" {
		if mac, err = parseMAC(e.MAC); err != nil {
			return ec, fmt.Errorf("%w: engine.mac: %v", errConfig, err)
		}
	}
	if e.MAC == "" && (mac == (wire.MAC{}) || mac[0]&1 != 0) {
		// Some vdevs (net_ring) report no MAC: derive a locally
		// administered one from the IPv4 address, unique per engine.
		a := ip.As4()
		mac = wire.MAC{0x02, 0x00, a[0], a[1], a[2], a[3]}
	}
	ec.LocalIP, ec.LocalMAC, ec.Subnet = ip, mac, subnet
	if err := e.routing(&ec); err != nil {
		return ec, err
	}
	ec.UDPPort, ec.MTU = e.UDPPort, e.MTU
	ec.Slots, ec.Regions, ec.Portals, ec.Tenants = e.Slots, e.Regions, e.Portals, e.Tenants
	ec.WindowBytes, ec.HighBurst = e.WindowBytes, e.HighBurst
	ec.Responsive, ec.Destinations = time.Duration(e.Responsive), e.Destinations
	ec.InboundQueue, ec.NackThreshold, ec.ServeBudget = e.InboundQueue, e.NackThreshold, e.ServeBudget
	if e.ServeRate < 0 || math.IsNaN(e.ServeRate) || math.IsInf(e.ServeRate, 0) {
		return ec, fmt.Errorf("%w: engine.serve_rate %v (requests a second; 0: the port type's)", errConfig, e.ServeRate)
	}
	if ec.NackThreshold == 0 {
		d, _ := c.nackDerivation()
		ec.NackThreshold = d.Threshold
	}
	ec.LowAfterHigh = e.LowAfterHigh
	ec.PollBytes = e.PollBytes
	ec.PriorityHold = time.Duration(e.PriorityHold)
	ec.HighHold = time.Duration(e.HighHold)
	ec.DispatchTimeout, ec.Timeout = time.Duration(e.DispatchTimeout), time.Duration(e.Timeout)
	if ec.Timeout == 0 { // loadConfig sets it; a Config built otherwise may not
		ec.Timeout = defaultTimeout(&c.Port, c.Poll.Mode)
	}
	ec.PullIdleTimeout = time.Duration(e.PullIdleTimeout)
	ec.ResolveTimeout, ec.ARPRetry = time.Duration(e.ResolveTimeout), time.Duration(e.ARPRetry)
	ec.DoorbellGap = time.Duration(e.DoorbellGap)
	ec.ICMPRate, ec.ICMPBurst = e.ICMPRate, e.ICMPBurst
	ec.NeighborReachable = time.Duration(e.NeighborReachable)
	ec.NeighborTable, ec.ReplayPeers = e.NeighborTable, e.ReplayPeers
	ec.InboundPerOwner, ec.InboundPerSender = e.InboundPerOwner, e.InboundPerSender
	ec.PullsPerOwner, ec.PullsPerSender = e.PullsPerOwner, e.PullsPerSender
	ec.ReplayLanesPerSender = e.ReplayLanesPerSender
	ec.NeighborsPerTenant, ec.ARPRate, ec.ARPBurst = e.NeighborsPerTenant, e.ARPRate, e.ARPBurst
	ec.HairpinSelf = e.HairpinSelf
	ec.IV, ec.KeyCache = iv, e.KeyCache
	ec.Crypto = e.Crypto
	ec.CacheSeed = 0 // random per process: peers cannot aim collisions at the key caches
	if err := (aesni.IVConfig{Path: c.ivStatePath()}).Validate(); err != nil {
		return ec, fmt.Errorf("%w: engine.iv_state: %v", errConfig, err)
	}
	ec.Neighbors = nil
	for i, n := range e.Neighbors {
		nip, err := netip.ParseAddr(n.IP)
		if err != nil || !nip.Is4() {
			return ec, fmt.Errorf("%w: engine.neighbors[%d].ip %q is not IPv4", errConfig, i, n.IP)
		}
		nmac, err := parseMAC(n.MAC)
		if err != nil {
			return ec, fmt.Errorf("%w: engine.neighbors[%d].mac: %v", errConfig, i, err)
		}
		ec.Neighbors = append(ec.Neighbors, engine.Neighbor{IP: nip, MAC: nmac})
	}
	if err := ec.Validate(); err != nil {
		return ec, fmt.Errorf("%w: engine: %v", errConfig, err)
	}
	return ec, nil
}

func parseMAC(s string) (wire.MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return wire.MAC{}, fmt.Errorf("%q is not a 48-bit MAC address", s)
	}
	return wire.MAC(hw), nil
}

// validate checks everything that can be checked before DPDK starts.
func (c *Config) validate() error {
	// The real IV source is opened (and locked) only by serve; a volatile
	// one stands in for the check.
	if _, err := c.engineConfig(wire.MAC{0x02, 0, 0, 0, 0, 1}, aesni.NewVolatileIVSource(aesni.IVConfig{})); err != nil {
		return err
	}
	if _, err := c.ctlConfig(); err != nil {
		return err
	}
	p := &c.Port
	switch {
	case p.Name == "":
		return fmt.Errorf("%w: port.name is empty", errConfig)
	case p.Vdev != "" && strings.SplitN(p.Vdev, ",", 2)[0] != p.Name:
		return fmt.Errorf("%w: port.vdev %q does not create port.name %q", errConfig, p.Vdev, p.Name)
	case p.RxDesc == 0 || p.TxDesc == 0:
		return fmt.Errorf("%w: port.rx_desc/tx_desc must be > 0", errConfig)
	case p.Mbufs < 2*uint32(p.RxDesc):
		return fmt.Errorf("%w: port.mbufs %d < 2 x rx_desc (%d)", errConfig, p.Mbufs, p.RxDesc)
	case p.HandOverRing < p.Burst || p.HandOverRing > 1<<16:
		return fmt.Errorf("%w: port.handover_ring %d (port.burst %d to 65536)", errConfig, p.HandOverRing, p.Burst)
	case p.MbufCache > 512 || uint64(p.MbufCache)*3 > uint64(p.Mbufs)*2:
		return fmt.Errorf("%w: port.mbuf_cache %d (max 512 and mbufs/1.5)", errConfig, p.MbufCache)
	case p.Burst < 1 || p.Burst > 256:
		return fmt.Errorf("%w: port.burst %d (1..256)", errConfig, p.Burst)
	case c.Poll.Mode != "busy" && c.Poll.Mode != "backoff" && c.Poll.Mode != "yield":
		return fmt.Errorf("%w: poll.mode %q, want busy, backoff or yield", errConfig, c.Poll.Mode)
	case c.Poll.Nice < -20 || c.Poll.Nice > 19:
		return fmt.Errorf("%w: poll.nice %d, want -20..19", errConfig, c.Poll.Nice)
	case c.OOMScoreAdj < -1000 || c.OOMScoreAdj > 1000:
		return fmt.Errorf("%w: oom_score_adj %d, want -1000..1000", errConfig, c.OOMScoreAdj)
	}
	if err := c.Poll.validate(p); err != nil {
		return err
	}
	if xdp.IsAFXDP(p.Vdev) {
		if _, err := parseAFXDPVdev(p.Vdev, c.Poll.cores()); err != nil {
			return err
		}
		if m := afxdpMaxMTU(); c.Engine.MTU > m {
			return fmt.Errorf("%w: engine.mtu %d: an AF_XDP port's frames fit one page each here: engine.mtu %d at most", errConfig, c.Engine.MTU, m)
		}
	}
	if _, err := c.faultConfig(); err != nil {
		return err
	}
	if err := c.Metrics.validate(); err != nil {
		return err
	}
	if _, err := zerolog.ParseLevel(c.LogLevel); err != nil || c.LogLevel == "" {
		return fmt.Errorf("%w: log_level %q", errConfig, c.LogLevel)
	}
	return nil
}

// ealArgs is the EAL command line: eal_args plus --vdev=vdev (none if
// ""): port.vdev, or what rmad made of it (an AF_XDP port's program).
func (c *Config) ealArgs(vdev string) []string {
	args := append([]string(nil), c.EALArgs...)
	if vdev != "" {
		args = append(args, "--vdev="+vdev)
	}
	return args
}

// ealRuntimeDir is the EAL runtime directory of a non-default
// --file-prefix ("" when the default prefix or --in-memory is used: those
// are shared or absent, and not ours to remove).
func (c *Config) ealRuntimeDir() string {
	prefix := ""
	for i, a := range c.EALArgs {
		switch {
		case a == "--in-memory":
			return ""
		case strings.HasPrefix(a, "--file-prefix="):
			prefix = strings.TrimPrefix(a, "--file-prefix=")
		case a == "--file-prefix" && i+1 < len(c.EALArgs):
			prefix = c.EALArgs[i+1]
		}
	}
	if prefix == "" || prefix == "rte" || strings.ContainsAny(prefix, "/.") {
		return ""
	}
	base := "/var/run/dpdk"
	if os.Geteuid() != 0 {
		if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
			base = x + "/dpdk"
		} else {
			base = "/tmp/dpdk"
		}
	}
	return base + "/" + prefix
}

// logFields logs every config key (flattened, sorted) as one event.
func logFields(ev *zerolog.Event, cfg *Config) *zerolog.Event {
	b, _ := json.Marshal(cfg)
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	d.Decode(&m)
	flat := map[string]any{}
	flatten("", m, flat)
	keys := make([]string, 0, len(flat))
	for k := range flat {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ev = ev.Interface(k, flat[k])
	}
	return ev
}

func flatten(prefix string, v any, out map[string]any) {
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			if prefix != "" {
				k = prefix + "." + k
			}
			flatten(k, x, out)
		}
		return
	}
	out[prefix] = v
}
