package ctl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/engine"
)

// Executor runs control-plane closures on the goroutine that owns a Core
// and waits for them: between two iterations of its poll loop, a
// quiescent point of the core. *runner.Runner satisfies it.
type Executor interface {
	Exec(fn func(c *engine.Core)) error
}

// Hugetlb modes for shared memory.
const (
	HugetlbAuto = "auto" // try MFD_HUGETLB, fall back to a plain memfd
	HugetlbOff  = "off"  // plain memfd only
)

// Tenant modes of a socket (SocketConfig.Tenant).
const (
	TenantByUID    = "uid"    // each uid connecting through the socket is a tenant
	TenantBySocket = "socket" // the socket is one tenant, whatever uids connect through it
)

// SocketConfig is one control socket. Whoever can connect to it (its mode,
// owner and directory decide) is a tenant of it, or one per uid: a tenant
// is known by what it cannot forge, the socket it came through and the uid
// the kernel reports.
type SocketConfig struct {
	Path string      // path of the unix socket
	Mode os.FileMode // permissions of the socket file
	// UID and GID, if set, own the socket file (chown), so a mode like
	// 0600 or 0660 gives it to one user or group.
	UID, GID *uint32
	// Name labels the socket's tenants in logs, errors and stats
	// ("": the socket file's name).
	Name string
	// Tenant is TenantByUID or TenantBySocket. A socket shared by the
	// users of a host splits them by uid; a socket given to one pod or
	// container makes it one tenant, whatever uids it runs (a user
	// namespace maps many).
	Tenant string
	// Policy gives this socket's applications their class of service and
	// slot caps.
	Policy AppPolicy
	// Quota and Guarantee, field by field, replace Config.Quota and
	// Config.Guarantee for this socket's tenants.
	Quota     Quota
	Guarantee Quota
	// Weight is each of the socket's tenants' weight in the data path's
	// shares (the solicitation window; engine.PortalSpec.Weight): 1..
	// engine.MaxWeight, 0 meaning 1. Weights gives some tenants of a
	// socket that splits tenants by uid another weight, by the uid the
	// tenant stands for.
	Weight  int
	Weights []TenantWeight
}

// TenantWeight is the weight of the tenant of one uid (the uid it stands
// for: a user's, into which its subordinate uids fold).
type TenantWeight struct {
	UID    uint32 `json:"uid"`
	Weight int    `json:"weight"`
}

// weightOf is the weight of the socket's tenant k.
func (sc *SocketConfig) weightOf(k tenantKey) int {
	for _, w := range sc.Weights {
		if k.uid == int64(w.UID) {
			return w.Weight
		}
	}
	return max(sc.Weight, 1)
}

// label is the socket's name for messages.
func (sc *SocketConfig) label() string {
	if sc.Name != "" {
		return sc.Name
	}
	return filepath.Base(sc.Path)
}

// Config of the control socket server.
type Config struct {
	// Sockets are the control sockets the engine listens on, at least one.
	Sockets []SocketConfig

	CmdCap uint32 // default command ring capacity (power of two)
	CplCap uint32 // default completion ring capacity (power of two)

	// Quota is every tenant's quota (the most it may hold of each pool)
	// and Guarantee its guarantee (what it is given of each pool however
	// much the others hold: pool.go) unless its socket sets its own.
	// Every field of both must be set (DefaultQuota and DefaultGuarantee
	// set them all).
	Quota     Quota
	Guarantee Quota
	// ReserveTenants is K of the admission rule (pool.go): room for the
	// guarantees of this many tenants that do not hold anything yet is
	// kept free in every pool, so that they can connect, open a portal
	// and register regions however much the others hold. K times the
	// largest guarantee must fit each pool's total.
	ReserveTenants int
	// Resources, if set, replace the measured memory totals quota
	// percentages are of (MemoryBytes, HugepageBytes; tests set them);
	// the tables are the engine's.
	Resources *Resources

	MaxConns int // control connections at once (each may hold one portal): the conns pool
	// MaxMemoryObjects bounds the memory objects (region memfds, portal
	// segments) charged to tenants at once, over every tenant: at most
	// half of fs.inotify.max_queued_events (memwatch.go), which 0 means.
	MaxMemoryObjects int
	// OpenDeadline closes a connection that has not opened a portal
	// (open and attach) this long after it connected; one that has sent
	// only identity and stats requests, this long after its last.
	OpenDeadline        time.Duration
	MaxRegionsPerPortal int    // regions one portal may hold
	MaxRegionBytes      uint64 // bytes of one region
	MaxPortalBytes      uint64 // bytes of all regions of one portal

	Hugetlb string // HugetlbAuto or HugetlbOff

	// NoSummary refuses the summary request: no core gets a summary
	// doorbell (abi.Summary), and every portal's command ring is read in
	// every poll, as for clients that do not ask for it. The summary is a
	// page every application of a core can read and write: it tells each
	// tenant when the others' portals post, and lets one hide another's
	// posts until the engine's fallback scan (engine.Config.SummaryScan);
	// a host whose tenants must not learn that much of each other sets
	// this (docs/protocol.md, The summary doorbell).
	NoSummary bool

	// IdentityPath is the identity state (identity.go): the table of
	// processes, and beside it (IdentityMarkPath) the mark that records
	// every identity handed out before it is used. Both must live as long
	// as the engine's IV state and region keys, on persistent storage.
	// "": a volatile table (tests only: identities restart at every
	// Listen).
	IdentityPath string
	// MaxIdentities bounds the identity table: processes with no
	// connection are forgotten oldest first beyond it. At least MaxConns.
	MaxIdentities int
	// IdentityRate and IdentityBurst bound how fast one tenant makes the
	// engine hand out identities (a token bucket: IdentityRate a second,
	// IdentityBurst at once): a tenant spawning processes in a loop
	// cannot use up the 32-bit identity space, which would stop every
	// tenant's new processes.
	IdentityRate  float64
	IdentityBurst int

	// UIDMap, PasswdFile and SubuidFile fold the uids connecting through
	// a socket that splits tenants by uid into their tenants (uidmap.go):
	// the map first, then uid 0 is root's own, then a user's subordinate
	// uids (SubuidFile) count as that user, then each uid PasswdFile
	// names is its own tenant; every other uid shares the socket's
	// "other" tenant. A file path "" is a
	// file that does not exist. The files are read again when they
	// change.
	UIDMap     []UIDMapEntry
	PasswdFile string
	SubuidFile string

	// StatsRate and StatsBurst bound each tenant's stats requests (a
	// token bucket: StatsRate a second, StatsBurst at once), whatever
	// its number of connections.
	StatsRate  float64
	StatsBurst int
	// OperatorGID, if set, makes the peers in this group (effective or
	// supplementary) operators, as uid 0 is: on a socket that splits
	// tenants by uid, an operator's stats reply lists every tenant's
	// portals and usage, a tenant's only its own.
	OperatorGID *uint32

	// FaultStats, if set, returns the counters of a fault-injecting
	// wrapper around core's port (engine/port/faultport), for the stats
	// reply's "fault" key. It runs on that core's goroutine, inside the
	// same Executor.Exec as Core.Stats, where the port may be read.
	FaultStats func(core int) *ctlmsg.FaultStats
	// PortStats, if set, returns the counters of core's port (the
	// driver's and the device's) for the stats reply's "port" key. It
	// runs inside the same Executor.Exec as Core.Stats.
	PortStats func(core int) *ctlmsg.PortStats
	// LoopStats, if set, returns core's poll loop's counters for the
	// stats reply's "loop" key. They are atomics: it runs on the
	// connection's goroutine, not inside Exec.
	LoopStats func(core int) *ctlmsg.LoopStats
	// NackThreshold, if set, is the stats reply's "nack_threshold": the
	// engine's NACK threshold and its derivation.
	NackThreshold *ctlmsg.NackThreshold
}

// DefaultConfig returns defaults matching engine.DefaultConfig: one socket,
// a tenant per uid.
func DefaultConfig() Config {
	return Config{
		Sockets: []SocketConfig{{
			Path: ctlmsg.DefaultSocket, Mode: 0o666, Name: "main", Tenant: TenantByUID,
			Policy: AppPolicy{Default: 256, DefaultClass: abi.ClassLow.String()},
		}},
		CmdCap:              256,
		CplCap:              1024,
		Quota:               DefaultQuota(),
		Guarantee:           DefaultGuarantee(),
		ReserveTenants:      8,
		MaxConns:            256,
		OpenDeadline:        5 * time.Second,
		MaxRegionsPerPortal: 256,
		MaxRegionBytes:      1 << 30,
		MaxPortalBytes:      4 << 30,
		Hugetlb:             HugetlbAuto,
		MaxIdentities:       4096,
		IdentityRate:        100,
		IdentityBurst:       1000,
		PasswdFile:          "/etc/passwd",
		SubuidFile:          "/etc/subuid",
		StatsRate:           DefaultStatsRate,
		StatsBurst:          DefaultStatsBurst,
	}
}

// ErrConfig wraps every validation failure.
var ErrConfig = errors.New("ctl: invalid config")

// Validate checks every field; the error names the first bad one.
func (c *Config) Validate() error {
	bad := func(f string, v any) error { return fmt.Errorf("%w: %s = %v", ErrConfig, f, v) }
	pow2 := func(v uint32) bool { return v >= 2 && v <= ctlmsg.MaxRingCap && v&(v-1) == 0 }
	q, g := c.Quota, c.Guarantee
	switch {
	case len(c.Sockets) == 0:
		return bad("Sockets", "none")
	case !pow2(c.CmdCap):
		return bad("CmdCap", c.CmdCap)
	case !pow2(c.CplCap):
		return bad("CplCap", c.CplCap)
	case !q.complete():
		return bad("Quota", "with a field unset (start from DefaultQuota)")
	case !g.complete():
		return bad("Guarantee", "with a field unset (start from DefaultGuarantee)")
	case c.ReserveTenants < 0 || c.ReserveTenants > 1<<16:
		return bad("ReserveTenants", c.ReserveTenants)
	case c.MaxConns < 1:
		return bad("MaxConns", c.MaxConns)
	case c.OpenDeadline <= 0:
		return bad("OpenDeadline", c.OpenDeadline)
	case c.MaxMemoryObjects < 0:
		return bad("MaxMemoryObjects", c.MaxMemoryObjects)
	case c.MaxRegionsPerPortal < 0:
		return bad("MaxRegionsPerPortal", c.MaxRegionsPerPortal)
	case c.MaxRegionBytes < 1 || c.MaxRegionBytes > ctlmsg.MaxRegionBytes:
		return bad("MaxRegionBytes", c.MaxRegionBytes)
	case c.MaxPortalBytes < c.MaxRegionBytes:
		return bad("MaxPortalBytes", c.MaxPortalBytes)
	case c.Hugetlb != HugetlbAuto && c.Hugetlb != HugetlbOff:
		return bad("Hugetlb", c.Hugetlb)
	case c.MaxIdentities < c.MaxConns:
		return bad("MaxIdentities", fmt.Sprintf("%d (at least MaxConns, %d)", c.MaxIdentities, c.MaxConns))
	case !(c.IdentityRate > 0) || c.IdentityBurst < 1:
		return bad("IdentityRate/IdentityBurst", fmt.Sprintf("%v/%d (both positive)", c.IdentityRate, c.IdentityBurst))
	case !(c.StatsRate > 0) || c.StatsBurst < 1:
		return bad("StatsRate/StatsBurst", fmt.Sprintf("%v/%d (both positive)", c.StatsRate, c.StatsBurst))
	}
	if _, err := parseUIDMap(c.UIDMap); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("%w: Quota: %v", ErrConfig, err)
	}
	if err := g.Validate(); err != nil {
		return fmt.Errorf("%w: Guarantee: %v", ErrConfig, err)
	}
	paths, names := map[string]bool{}, map[string]bool{}
	for i := range c.Sockets {
		sc := &c.Sockets[i]
		f := func(name string) string { return fmt.Sprintf("Sockets[%d].%s", i, name) }
		switch {
		case sc.Path == "" || len(sc.Path) > 107:
			return bad(f("Path"), fmt.Sprintf("%q (1..107 bytes)", sc.Path))
		case paths[filepath.Clean(sc.Path)]:
			return bad(f("Path"), fmt.Sprintf("%q (twice)", sc.Path))
		case names[sc.label()]:
			return bad(f("Name"), fmt.Sprintf("%q (twice: names tell tenants apart in logs and stats)", sc.label()))
		case sc.Mode&^0o777 != 0:
			return bad(f("Mode"), sc.Mode)
		case sc.Tenant != TenantByUID && sc.Tenant != TenantBySocket:
			return bad(f("Tenant"), fmt.Sprintf("%q, want %q or %q", sc.Tenant, TenantByUID, TenantBySocket))
		}
		if sc.Weight < 0 || sc.Weight > engine.MaxWeight {
			return bad(f("Weight"), fmt.Sprintf("%d (0..%d)", sc.Weight, engine.MaxWeight))
		}
		for j, w := range sc.Weights {
			if w.Weight < 1 || w.Weight > engine.MaxWeight {
				return bad(f(fmt.Sprintf("Weights[%d]", j)), fmt.Sprintf("uid %d weight %d (1..%d)", w.UID, w.Weight, engine.MaxWeight))
			}
		}
		if sc.Name != "" {
			if err := ctlmsg.ValidName(sc.Name); err != nil {
				return bad(f("Name"), err)
			}
		}
		paths[filepath.Clean(sc.Path)], names[sc.label()] = true, true
		if err := sc.Quota.Validate(); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrConfig, f("Quota"), err)
		}
		if err := sc.Guarantee.Validate(); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrConfig, f("Guarantee"), err)
		}
		if err := sc.Policy.Validate(); err != nil {
			return fmt.Errorf("%w (%s, socket %s)", err, f("Policy"), sc.label())
		}
	}
	return nil
}
