package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/onerma/onerma/engine/ctl"
)

// CtlConfig maps onto ctl.Config: the control sockets, their tenants'
// policies and quotas, and the process identities.
type CtlConfig struct {
	// Socket is the host's control socket ("" : none, then sockets must
	// name one). Each uid connecting through it is a tenant, named
	// "main uid N".
	Socket     string `json:"socket"`
	SocketMode string `json:"socket_mode"` // octal
	CmdCap     uint32 `json:"cmd_cap"`
	CplCap     uint32 `json:"cpl_cap"`
	// SlotPolicy is socket's policy (ctl.AppPolicy): the highest class of
	// service and the slot cap per portal of each application, by the
	// uid it runs as or a group it is in, each as the kernel reports it:
	//
	//	"slot_policy": {"default": 256, "default_class": "low", "rules": [
	//	  {"uid": 1000, "class": "high", "max_slots": 64},
	//	  {"gid": 2000, "max_slots": 16}]}
	//
	// The first rule whose uid and gid (at least one of them set) match
	// wins, else default and default_class. class is "high" or "low"
	// (absent: low); an application asking for a class its rule does not
	// grant cannot open a portal, one not asking for high gets low. A
	// rule cannot match on the portal's name (the application chooses it;
	// such a config is refused): give such an application a socket of its
	// own (sockets). The key keeps its name from when the policy only
	// capped slots.
	SlotPolicy ctl.AppPolicy `json:"slot_policy"`
	// Sockets are more control sockets, each with its own tenants,
	// policy and quota: one per pod or container, say, in a directory
	// only it mounts.
	//
	//	"sockets": [{"path": "/run/onerma/pods/web/rmad.sock", "mode": "0666",
	//	  "name": "web", "tenant": "socket",
	//	  "slot_policy": {"default": 64, "default_class": "high"},
	//	  "quota": {"memory_bytes": 1073741824, "hugepage_bytes": "10%"},
	//	  "guarantee": {"memory_bytes": 268435456}}]
	//
	// tenant is "socket" (the default here: everything that connects
	// through it is one tenant, whatever its uids) or "uid". uid and gid,
	// if set, own the socket file.
	Sockets []SocketEntry `json:"sockets"`
	// Quota is each tenant's quota (the most it may hold) of each pool,
	// and Guarantee its guarantee (what it is given however much the
	// others hold), unless its socket sets its own (field by field): a
	// count, or a percentage of what the engine found at start after
	// taking what it needs itself (conns: max_conns; portals, slots:
	// the engine's tables; regions: its region table; memory_bytes: the
	// host's memory less rmad's; hugepage_bytes: the free huge pages).
	// Root is a tenant like any other. A guarantee above its quota is the
	// quota.
	Quota     ctl.Quota `json:"quota"`
	Guarantee ctl.Quota `json:"guarantee"`
	// ReserveTenants is how many tenants that hold nothing yet the
	// engine keeps room for in every pool, each with the largest
	// guarantee: reserve_tenants × guarantee must fit each pool.
	ReserveTenants int `json:"reserve_tenants"`
	MaxConns       int `json:"max_conns"`
	// MaxConnsPerUID is the older name of quota.conns: set, it replaces
	// it (and -print-config shows quota.conns).
	MaxConnsPerUID *int `json:"max_conns_per_uid,omitempty"`
	// OpenDeadline closes a control connection that has not opened a
	// portal this long after it connected (one that sent only identity
	// and stats requests, this long after its last).
	OpenDeadline        Duration `json:"open_deadline"`
	MaxRegionsPerPortal int      `json:"max_regions_per_portal"`
	MaxRegionBytes      uint64   `json:"max_region_bytes"`
	MaxPortalBytes      uint64   `json:"max_portal_bytes"`
	Hugetlb             string   `json:"hugetlb"`
	// NoSummary refuses applications the summary doorbell (a page per
	// core that every application of the core reads and writes): every
	// command ring is then read in every poll. For hosts whose tenants
	// must not see when the others post (docs/protocol.md).
	NoSummary bool `json:"no_summary"`
	// IDState is the process identity state file ("": engine.iv_state
	// followed by ".ids", resolved when the config is loaded). It must
	// live exactly as long as the IV state: see SECURITY.md.
	IDState string `json:"id_state"`
	// MaxIdentities bounds the table of processes and their identities;
	// IdentityRate and IdentityBurst bound how fast one tenant's new
	// processes take new identities (a second, at once).
	MaxIdentities int     `json:"max_identities"`
	IdentityRate  float64 `json:"identity_rate"`
	IdentityBurst int     `json:"identity_burst"`
	// UIDMap, PasswdFile and SubuidFile fold the uids of a socket that
	// splits tenants by uid into tenants: a uid in a uid_map entry's
	// range counts as its tenant_uid, then uid 0 is root's own, then a
	// uid in a user's subordinate range (subuid_file, owners by name or
	// uid) counts as that user, then a uid passwd_file names is its own
	// tenant; every other uid shares the socket's one tenant "main other
	// uids". The files ("" : none) are read again when they change.
	//
	//	"uid_map": [{"uids": "100000-165535", "tenant_uid": 1000}, {"uids": "1234", "tenant_uid": 1000}]
	UIDMap     []ctl.UIDMapEntry `json:"uid_map"`
	PasswdFile string            `json:"passwd_file"`
	SubuidFile string            `json:"subuid_file"`
	// StatsRate and StatsBurst bound each tenant's stats requests (a
	// second, at once). OperatorGID (null: none) names a group whose
	// members see, as root does, every tenant's portals and usage in
	// stats; anyone else sees its own tenant's and the engine's counters.
	StatsRate   float64 `json:"stats_rate"`
	StatsBurst  int     `json:"stats_burst"`
	OperatorGID *uint32 `json:"operator_gid"`
	// Weight is the main socket's tenants' weight in the data path's
	// shares (the solicitation window), 1..1000; Weights gives some of
	// them another, by the uid each tenant stands for:
	//
	//	"weight": 1, "weights": [{"uid": 1000, "weight": 3}]
	Weight  int                `json:"weight"`
	Weights []ctl.TenantWeight `json:"weights"`
}

// SocketEntry is one more control socket (ctl.SocketConfig).
type SocketEntry struct {
	Path       string        `json:"path"`
	Mode       string        `json:"mode"` // octal ("": 0660)
	UID        *uint32       `json:"uid,omitempty"`
	GID        *uint32       `json:"gid,omitempty"`
	Name       string        `json:"name"`
	Tenant     string        `json:"tenant"` // "socket" (""), or "uid"
	SlotPolicy ctl.AppPolicy `json:"slot_policy"`
	Quota      ctl.Quota     `json:"quota"`
	Guarantee  ctl.Quota     `json:"guarantee"`
	// Weight and Weights: as the main socket's (ctl.weight, ctl.weights).
	Weight  int                `json:"weight"`
	Weights []ctl.TenantWeight `json:"weights"`
}

// foldConnsAlias replaces quota.conns with max_conns_per_uid, its older
// name, when a file set it.
func (k *CtlConfig) foldConnsAlias() error {
	if k.MaxConnsPerUID == nil {
		return nil
	}
	n := *k.MaxConnsPerUID
	k.MaxConnsPerUID = nil
	if n < 1 {
		return fmt.Errorf("%w: ctl.max_conns_per_uid %d (now ctl.quota.conns): want at least 1", errConfig, n)
	}
	k.Quota.Conns = ctl.Count(uint64(n))
	return nil
}

// idStatePath is ctl.id_state, or its default beside the IV state.
func (c *Config) idStatePath() string {
	if c.Ctl.IDState == "" {
		return c.ivStatePath() + ".ids"
	}
	return c.Ctl.IDState
}

func parseMode(key, s string) (os.FileMode, error) {
	mode, err := strconv.ParseUint(s, 8, 32)
	if err != nil || mode > 0o777 {
		return 0, fmt.Errorf("%w: %s %q is not an octal permission", errConfig, key, s)
	}
	return os.FileMode(mode), nil
}

// ctlConfig converts and validates the control socket part.
func (c *Config) ctlConfig() (ctl.Config, error) {
	k := &c.Ctl
	cc := ctl.DefaultConfig()
	cc.Sockets = nil
	if k.Socket != "" {
		mode, err := parseMode("ctl.socket_mode", k.SocketMode)
		if err != nil {
			return cc, err
		}
		cc.Sockets = append(cc.Sockets, ctl.SocketConfig{Path: k.Socket, Mode: mode, Name: "main",
			Tenant: ctl.TenantByUID, Policy: k.SlotPolicy, Weight: k.Weight, Weights: k.Weights})
	}
	for i, e := range k.Sockets {
		m := e.Mode
		if m == "" {
			m = "0660"
		}
		mode, err := parseMode(fmt.Sprintf("ctl.sockets[%d].mode", i), m)
		if err != nil {
			return cc, err
		}
		tenant := e.Tenant
		if tenant == "" {
			tenant = ctl.TenantBySocket
		}
		cc.Sockets = append(cc.Sockets, ctl.SocketConfig{Path: e.Path, Mode: mode, UID: e.UID, GID: e.GID, Name: e.Name,
			Tenant: tenant, Policy: e.SlotPolicy, Quota: e.Quota, Guarantee: e.Guarantee, Weight: e.Weight, Weights: e.Weights})
	}
	cc.CmdCap, cc.CplCap = k.CmdCap, k.CplCap
	cc.Quota = k.Quota.Over(ctl.DefaultQuota())
	cc.Guarantee = k.Guarantee.Over(ctl.DefaultGuarantee())
	cc.ReserveTenants, cc.OpenDeadline = k.ReserveTenants, time.Duration(k.OpenDeadline)
	cc.MaxConns, cc.MaxRegionsPerPortal = k.MaxConns, k.MaxRegionsPerPortal
	cc.MaxRegionBytes, cc.MaxPortalBytes, cc.Hugetlb = k.MaxRegionBytes, k.MaxPortalBytes, k.Hugetlb
	cc.NoSummary = k.NoSummary
	cc.IdentityPath = c.idStatePath()
	cc.MaxIdentities, cc.IdentityRate, cc.IdentityBurst = k.MaxIdentities, k.IdentityRate, k.IdentityBurst
	cc.UIDMap, cc.PasswdFile, cc.SubuidFile = k.UIDMap, k.PasswdFile, k.SubuidFile
	cc.StatsRate, cc.StatsBurst, cc.OperatorGID = k.StatsRate, k.StatsBurst, k.OperatorGID
	if err := cc.Validate(); err != nil {
		return cc, fmt.Errorf("%w: %v", errConfig, err)
	}
	return cc, nil
}

// setOOMScoreAdj lowers rmad's badness for the kernel's OOM killer. The
// kernel kills the task with the most points: its resident memory (for
// rmad, every region it maps, all tenants' together) plus
// oom_score_adj/1000 of the host's memory. At -999 rmad is chosen only
// once no other task holds more than about 0.1 % of the memory; at -900 a
// host whose tenants each hold less than a tenth of the memory would see
// rmad, which maps all of it, killed first, and every tenant with it.
// -1000 (never) is not the default: a leak in rmad itself would then have
// the kernel kill everything else. Killing a tenant closes its control
// connections, and rmad unmaps its regions, which frees their memory.
func setOOMScoreAdj(v int) error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(v)), 0)
}

// errIVStateLost: the IV state is missing beside an identity state.
var errIVStateLost = errors.New("IV state lost")

// checkIVStateLost refuses to start when the IV state does not exist but
// the identity state (the table or its mark) does. rmad creates the IV
// state first, before the identity state, and both live as long as each
// other: an identity state without an IV state is an engine that ran
// before and lost its counters. Recreated at 0 they would count the same
// IVs again, under region keys and K_d (identities persist) still in use:
// AES-GCM nonces repeat. A first start has neither file, a restart both;
// an IV state without an identity state is warnIdentityStateLost's case.
func checkIVStateLost(cfg *Config) error {
	iv := cfg.ivStatePath()
	if _, err := os.Stat(iv); !errors.Is(err, os.ErrNotExist) {
		return nil // there, or unreadable: opening it says which
	}
	ids := cfg.idStatePath()
	mark := ctl.IdentityMarkPath(ids)
	found := ""
	for _, p := range []string{ids, mark} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			found = p
			break
		}
	}
	if found == "" {
		return nil // a first start
	}
	return fmt.Errorf("%w: engine.iv_state %s does not exist, but the identity state %s does: this engine ran before "+
		"and its IV counters are gone; started, it would count IVs from 0 again and repeat AES-GCM nonces under keys still in use. "+
		"If the file is only out of reach (its storage not mounted, engine.iv_state or engine.ip changed), put it back and start again. "+
		"If it is lost: rotate every region key in use with this engine (of the regions it serves, and of the regions on other engines "+
		"whose K_d its applications hold); then remove the identity state (ctl.id_state %s and %s) and start: "+
		"rmad then begins with a new IV state and new identities",
		errIVStateLost, iv, found, ids, mark)
}

// warnIdentityStateLost says so when the identity state files (the table
// and its mark) are missing beside an IV state that exists: either this is
// the first start of an engine that stamped PIDs before identities existed
// (harmless: identities start above every PID), or the files were lost,
// and identities handed out before may be handed out again to other
// processes, which could then use the K_d issued for the earlier ones.
func warnIdentityStateLost(log zerolog.Logger, cfg *Config) {
	if _, err := os.Stat(cfg.ivStatePath()); err != nil {
		return
	}
	for _, p := range []string{cfg.idStatePath(), ctl.IdentityMarkPath(cfg.idStatePath())} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	log.Warn().Str("id_state", cfg.idStatePath()).Str("iv_state", cfg.ivStatePath()).
		Msg("no identity state beside an existing IV state: a new one is made. If this engine handed out process identities before (a lost file), rotate every region key: the same identities will be handed out again")
}
