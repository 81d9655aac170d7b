package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/dpdk"
	"github.com/onerma/onerma/dpdk/dpdktest"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/engine/port/dpdkport"
	"github.com/onerma/onerma/engine/port/dpdkport/xdp"
	"github.com/onerma/onerma/engine/port/faultport"
	"github.com/onerma/onerma/engine/port/memport"
	"github.com/onerma/onerma/engine/runner"
	"github.com/onerma/onerma/internal/readall"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
	"golang.org/x/sys/unix"
)

func TestDefaultConfigValid(t *testing.T) {
	c := defaultConfig()
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rmad.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFileThenFlagsOverride(t *testing.T) {
	file := writeFile(t, `{"engine": {"ip": "10.1.1.1", "slots": 64, "timeout": "20ms"},
		"ctl": {"slot_policy": {"default": 8, "rules": [{"uid": 1000, "max_slots": 32}]}},
		"log_level": "debug"}`)
	var stderr bytes.Buffer
	cfg, opt, err := loadConfig([]string{"-slots", "128", "-config", file, "-poll-mode", "backoff", "-timeout", "30ms"}, &stderr)
	if err != nil {
		t.Fatal(err, stderr.String())
	}
	if opt.configPath != file {
		t.Errorf("configPath %q", opt.configPath)
	}
	switch {
	case cfg.Engine.IP != "10.1.1.1":
		t.Errorf("file did not override ip: %q", cfg.Engine.IP)
	case cfg.Engine.Slots != 128:
		t.Errorf("flag did not override the file: slots %d", cfg.Engine.Slots)
	case time.Duration(cfg.Engine.Timeout) != 30*time.Millisecond:
		t.Errorf("timeout %v", time.Duration(cfg.Engine.Timeout))
	case cfg.Engine.UDPPort != 4792 || cfg.Port.Name != "net_tap0":
		t.Errorf("defaults lost: %+v", cfg)
	case cfg.Poll.Mode != "backoff" || cfg.LogLevel != "debug":
		t.Errorf("poll %q log %q", cfg.Poll.Mode, cfg.LogLevel)
	case cfg.Ctl.SlotPolicy.Default != 8 || len(cfg.Ctl.SlotPolicy.Rules) != 1 || *cfg.Ctl.SlotPolicy.Rules[0].UID != 1000:
		t.Errorf("slot policy %+v", cfg.Ctl.SlotPolicy)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
}

// TestSlotPolicyConfig: the slot policy's classes come from the file and
// -default-class, reach ctl.Config, and bad class names are refused with
// the key that holds them; a rule on a portal's name is refused.
func TestSlotPolicyConfig(t *testing.T) {
	file := writeFile(t, `{"ctl": {"slot_policy": {"default": 8, "default_class": "low", "rules": [
		{"uid": 1000, "class": "high", "max_slots": 64},
		{"gid": 500, "class": "low", "max_slots": 16},
		{"uid": 2000, "max_slots": 4}]}}}`)
	cfg, _, err := loadConfig([]string{"-config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.ctlConfig()
	if err != nil {
		t.Fatal(err)
	}
	main := &cc.Sockets[0].Policy
	for _, tt := range []struct {
		uid, gid uint32
		want     string
	}{
		{1000, 1000, "class high and 64 slots"},
		{1001, 1001, "class low and 8 slots"},
		{1001, 500, "class low and 16 slots"},
		{2000, 2000, "class low and 4 slots"}, // class absent: low
	} {
		if g := main.Match(tt.uid, tt.gid); g.String() != tt.want {
			t.Errorf("uid %d gid %d: %s (%s), want %s", tt.uid, tt.gid, g, g.From, tt.want)
		}
	}
	// The flag overrides the file; an old file without classes still loads.
	old := writeFile(t, `{"ctl": {"slot_policy": {"default": 8, "rules": [{"uid": 1000, "max_slots": 32}]}}}`)
	cfg, _, err = loadConfig([]string{"-config", old, "-default-class", "high"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cc, err = cfg.ctlConfig(); err != nil {
		t.Fatal(err)
	}
	if g := cc.Sockets[0].Policy.Match(3000, 3000); g.String() != "class high and 8 slots" {
		t.Errorf("-default-class high: %s", g)
	}
	if g := cc.Sockets[0].Policy.Match(1000, 1000); g.String() != "class low and 32 slots" {
		t.Errorf("rule without a class: %s", g)
	}

	for _, tt := range []struct {
		file string
		args []string
		want string
	}{
		{`{"ctl": {"slot_policy": {"rules": [{"uid": 1, "max_slots": 1}, {"uid": 2, "class": "medium", "max_slots": 1}]}}}`, nil,
			`invalid config: ctl: invalid config: slot policy: rules[1].class = "medium", want "low" or "high" (Sockets[0].Policy, socket main)`},
		{`{"ctl": {"slot_policy": {"default_class": "gold"}}}`, nil,
			`invalid config: ctl: invalid config: slot policy: default_class = "gold", want "low" or "high" (Sockets[0].Policy, socket main)`},
		{"", []string{"-default-class", "High"},
			`invalid config: ctl: invalid config: slot policy: default_class = "High", want "low" or "high" (Sockets[0].Policy, socket main)`},
		// A config from before tenants: a rule on the name the
		// application chooses is refused, with what to do instead.
		{`{"ctl": {"slot_policy": {"rules": [{"uid": 1000, "name": "lat", "class": "high", "max_slots": 64}]}}}`, nil,
			`invalid config: ctl: invalid config: slot policy: rules[0].name = "lat": a rule cannot match on a portal's name, which every application chooses itself; match on uid or gid, or give the application a control socket of its own (ctl.sockets) (Sockets[0].Policy, socket main)`},
		{`{"ctl": {"sockets": [{"path": "/run/onerma/web.sock", "name": "web", "slot_policy": {"rules": [{"class": "high", "max_slots": 1}]}}]}}`, nil,
			`invalid config: ctl: invalid config: slot policy: rules[0] sets neither uid nor gid: it would match every application, as the default does (Sockets[1].Policy, socket web)`},
		{`{"ctl": {"sockets": [{"path": "/run/onerma/web.sock", "name": "web", "tenant": "pod"}]}}`, nil,
			`invalid config: ctl: invalid config: Sockets[1].Tenant = "pod", want "uid" or "socket"`},
		{`{"ctl": {"sockets": [{"path": "/run/onerma/web.sock", "mode": "0888"}]}}`, nil,
			`invalid config: ctl.sockets[0].mode "0888" is not an octal permission`},
		{`{"ctl": {"socket": "", "sockets": []}}`, nil, `invalid config: ctl: invalid config: Sockets = none`},
	} {
		args := tt.args
		if tt.file != "" {
			args = append([]string{"-config", writeFile(t, tt.file)}, args...)
		}
		cfg, _, err := loadConfig(args, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.validate(); err == nil || err.Error() != tt.want {
			t.Errorf("%s %v: validate = %v\nwant %s", tt.file, tt.args, err, tt.want)
		}
	}
	// A class that is not a string is a decode error naming the field.
	_, _, err = loadConfig([]string{"-config", writeFile(t, `{"ctl": {"slot_policy": {"rules": [{"class": 1}]}}}`)}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "ctl.slot_policy.rules.class") {
		t.Errorf("numeric class: %v", err)
	}
}

// TestTenantConfig: more sockets, each with its tenants, policy and
// quota; quotas as counts or percentages over the defaults; the identity
// state beside the IV state.
func TestTenantConfig(t *testing.T) {
	file := writeFile(t, `{"engine": {"iv_state": "/var/lib/x/iv.state"},
		"ctl": {"quota": {"memory_bytes": "10%"},
		"sockets": [{"path": "/run/onerma/pods/web/rmad.sock", "mode": "0600", "uid": 1000, "name": "web",
		  "slot_policy": {"default": 64, "default_class": "high"},
		  "quota": {"memory_bytes": 1073741824, "slots": 100}, "guarantee": {"memory_bytes": "10%", "regions": 32}},
		 {"path": "/run/onerma/users.sock", "name": "users", "tenant": "uid"}],
		"max_conns_per_uid": 16}}`)
	cfg, _, err := loadConfig([]string{"-config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.ctlConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Sockets) != 3 || cc.IdentityPath != "/var/lib/x/iv.state.ids" || cfg.Ctl.IDState != cc.IdentityPath {
		t.Fatalf("sockets %+v, identity state %q", cc.Sockets, cc.IdentityPath)
	}
	main, web, users := cc.Sockets[0], cc.Sockets[1], cc.Sockets[2]
	if main.Name != "main" || main.Tenant != ctl.TenantByUID || main.Mode != 0o666 {
		t.Errorf("main socket %+v", main)
	}
	if web.Tenant != ctl.TenantBySocket || web.Mode != 0o600 || *web.UID != 1000 || web.GID != nil || web.Policy.Match(5, 5).String() != "class high and 64 slots" {
		t.Errorf("web socket %+v", web)
	}
	if users.Tenant != ctl.TenantByUID || users.Mode != 0o660 {
		t.Errorf("users socket %+v", users)
	}
	r := ctl.Resources{MemoryBytes: 1000 << 20, HugepageBytes: 400 << 20, Portals: 64, Slots: 1024, Regions: 1024, Conns: 256}
	// max_conns_per_uid, the older name of quota.conns, sets it.
	if got, want := cc.Quota.Resolve(r), (ctlmsg.TenantUsage{Conns: 16, MemoryBytes: 100 << 20, HugepageBytes: 200 << 20, Portals: 32, Slots: 512, Regions: 512}); got != want {
		t.Errorf("default quota %+v, want %+v", got, want)
	}
	if got, want := web.Quota.Over(cc.Quota).Resolve(r), (ctlmsg.TenantUsage{Conns: 16, MemoryBytes: 1 << 30, HugepageBytes: 200 << 20, Portals: 32, Slots: 100, Regions: 512}); got != want {
		t.Errorf("web's quota %+v, want %+v", got, want)
	}
	if got, want := cc.Guarantee.Resolve(r), (ctlmsg.TenantUsage{Conns: 4, MemoryBytes: 64 << 20, HugepageBytes: 8 << 20, Portals: 2, Slots: 64, Regions: 16}); got != want {
		t.Errorf("default guarantee %+v, want %+v", got, want)
	}
	if got, want := web.Guarantee.Over(cc.Guarantee).Resolve(r), (ctlmsg.TenantUsage{Conns: 4, MemoryBytes: 100 << 20, HugepageBytes: 8 << 20, Portals: 2, Slots: 64, Regions: 32}); got != want {
		t.Errorf("web's guarantee %+v, want %+v", got, want)
	}
	if cc.ReserveTenants != 8 || cc.OpenDeadline != 5*time.Second {
		t.Errorf("reserve_tenants %d, open_deadline %v", cc.ReserveTenants, cc.OpenDeadline)
	}
	// -print-config shows the quota as written, the alias folded into it.
	b, _ := json.Marshal(&cfg.Ctl)
	for _, want := range []string{
		`"quota":{"conns":16,"portals":"50%","slots":"50%","regions":"50%","memory_bytes":"10%","hugepage_bytes":"50%"}`,
		`"guarantee":{"conns":4,"portals":2,"slots":64,"regions":16,"memory_bytes":67108864,"hugepage_bytes":8388608},"reserve_tenants":8,`,
		`"open_deadline":"5s"`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("ctl renders as %s, without %s", b, want)
		}
	}
	if strings.Contains(string(b), "max_conns_per_uid") {
		t.Errorf("ctl renders the alias: %s", b)
	}
	// The flags: the alias, and the new keys.
	fc, _, err := loadConfig([]string{"-max-conns-per-uid", "7", "-reserve-tenants", "3", "-open-deadline", "2s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if fcc, err := fc.ctlConfig(); err != nil || *fcc.Quota.Conns != *ctl.Count(7) || fcc.ReserveTenants != 3 || fcc.OpenDeadline != 2*time.Second {
		t.Errorf("flags: %+v %v", fcc, err)
	}
	if _, _, err := loadConfig([]string{"-config", writeFile(t, `{"ctl": {"max_conns_per_uid": 0}}`)}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "max_conns_per_uid 0 (now ctl.quota.conns)") {
		t.Errorf("max_conns_per_uid 0: %v", err)
	}
	for _, bad := range []string{`{"ctl": {"quota": {"slots": "150%"}}}`, `{"ctl": {"quota": {"slots": -1}}}`, `{"ctl": {"quota": {"portals": "x"}}}`} {
		if _, _, err := loadConfig([]string{"-config", writeFile(t, bad)}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "quota") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestConfigRejects(t *testing.T) {
	tests := []struct {
		name string
		file string
		args []string
		want string
	}{
		{"unknown key", `{"engine": {"slotz": 1}}`, nil, `unknown field "slotz"`},
		{"bad duration", `{"engine": {"timeout": "soon"}}`, nil, "invalid duration"},
		{"bad flag value", "", []string{"-slots", "many"}, "invalid value"},
		{"alias of quota.conns", "", []string{"-max-conns-per-uid", "0"}, "want a count of at least 1"},
		{"unknown flag", "", []string{"-frobnicate"}, "not defined"},
		{"stray arg", "", []string{"extra"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append([]string{"-config", writeFile(t, tt.file)}, args...)
			}
			var stderr bytes.Buffer
			_, _, err := loadConfig(args, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	invalid := []struct {
		args []string
		want string
	}{
		{[]string{"-ip", "::1"}, "engine.ip"},
		{[]string{"-mac", "nope"}, "engine.mac"},
		{[]string{"-slots", "0"}, "Slots"},
		{[]string{"-socket-mode", "999"}, "socket_mode"},
		{[]string{"-cmd-cap", "3"}, "CmdCap"},
		{[]string{"-poll-mode", "lazy"}, "poll.mode"},
		{[]string{"-poll-nice", "-21"}, "poll.nice"},
		{[]string{"-poll-nice", "20"}, "poll.nice"},
		{[]string{"-log-level", "loud"}, "log_level"},
		{[]string{"-vdev", "net_ring0", "-port-name", "net_tap0"}, "does not create"},
		{[]string{"-burst", "0"}, "port.burst"},
		{[]string{"-hugetlb", "always"}, "Hugetlb"},
		{[]string{"-reserve-tenants", "-1"}, "ReserveTenants"},
		{[]string{"-open-deadline", "0s"}, "OpenDeadline"},
		{[]string{"-icmp-rate", "-1"}, "ICMPRate"},
		{[]string{"-icmp-burst", "0"}, "ICMPBurst"},
		{[]string{"-neighbors-per-tenant", "129"}, "NeighborsPerTenant"},
		{[]string{"-neighbors-per-tenant", "0"}, "NeighborsPerTenant"},
		{[]string{"-arp-rate", "0"}, "ARPRate"},
		{[]string{"-arp-burst", "0"}, "ARPBurst"},
		{[]string{"-metrics", "9100"}, "metrics.listen"},
		{[]string{"-metrics", "localhost:prom"}, "metrics.listen"},
		{[]string{"-metrics-pprof", "true"}, "metrics.pprof needs metrics.listen"},
		{[]string{"-metrics-portals", "true"}, "metrics.portals needs metrics.listen"},
		{[]string{"-vdev", "net_af_xdp0", "-port-name", "net_af_xdp0"}, "no iface="},
		{[]string{"-vdev", "net_af_xdp0,iface=eth0,queue_count=2", "-port-name", "net_af_xdp0"}, "queue_count 2, but the engine has 1 polling cores"},
		{[]string{"-vdev", "net_af_xdp0,iface=eth0", "-port-name", "net_af_xdp0", "-cpu", "0,1"}, "queue_count 1, but the engine has 2 polling cores"},
		{[]string{"-cpu", "1,1"}, "CPU 1 listed twice"},
		{[]string{"-cpu", "2048"}, "poll.cpus: CPU 2048"},
		{[]string{"-cores", "2", "-cpu", "1,2,3"}, "poll.cores 2 but poll.cpus lists 3 CPUs"},
		{[]string{"-cores", "65"}, "poll.cores 65"},
		{[]string{"-cores", "4", "-mbufs", "4095"}, "x 4 cores"},
		{[]string{"-handover-ring", "16"}, "port.handover_ring 16"},
		{[]string{"-vdev", "net_af_xdp0,iface=eth0", "-port-name", "net_af_xdp0", "-mtu", fmt.Sprint(afxdpMaxMTU() + 1)}, "fit one page"},
	}
	for _, tt := range invalid {
		cfg, _, err := loadConfig(tt.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: validate = %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestPrintConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-print-config", "-ip", "10.7.7.7", "-slot-cap", "9"}, &stdout, &stderr, nil)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	printed := stdout.String()
	var c Config
	d := json.NewDecoder(&stdout)
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Engine.IP != "10.7.7.7" || c.Ctl.SlotPolicy.Default != 9 || c.Port.Burst != 32 {
		t.Fatalf("printed %+v", c)
	}
	if c.Engine.IVState != "/var/lib/onerma/iv-10.7.7.7.state" || c.Engine.KeyCache != 4096 {
		t.Fatalf("printed iv_state %q key_cache %d, want the default derived from the address", c.Engine.IVState, c.Engine.KeyCache)
	}
	// What it prints is a valid config file.
	if _, _, err := loadConfig([]string{"-config", writeFile(t, printed)}, &stderr); err != nil {
		t.Fatalf("printed config does not load: %v", err)
	}
	if code := run(context.Background(), []string{"-slots", "-1", "-print-config"}, &stdout, &stderr, nil); code != 2 {
		t.Fatalf("invalid config: exit %d", code)
	}
}

func TestIVStateConfig(t *testing.T) {
	// Two engines on one host get two state files: by address by default.
	a, _, err := loadConfig([]string{"-ip", "10.0.0.1"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := loadConfig([]string{"-ip", "10.0.0.2", "-socket", "/run/onerma/b.sock"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Engine.IVState == b.Engine.IVState || !strings.HasPrefix(a.Engine.IVState, DefaultIVDir+"/") {
		t.Fatalf("iv_state %q and %q", a.Engine.IVState, b.Engine.IVState)
	}
	// A file and a flag set it; the flag wins.
	file := writeFile(t, `{"engine": {"iv_state": "/srv/a.iv"}}`)
	c, _, err := loadConfig([]string{"-config", file}, &bytes.Buffer{})
	if err != nil || c.Engine.IVState != "/srv/a.iv" {
		t.Fatalf("from the file: %q %v", c.Engine.IVState, err)
	}
	c, _, err = loadConfig([]string{"-config", file, "-iv-state", "/srv/b.iv"}, &bytes.Buffer{})
	if err != nil || c.Engine.IVState != "/srv/b.iv" {
		t.Fatalf("from the flag: %q %v", c.Engine.IVState, err)
	}
	for _, args := range [][]string{{"-key-cache", "0"}} {
		cfg, _, err := loadConfig(args, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "KeyCache") {
			t.Errorf("%v: validate = %v", args, err)
		}
	}
}

// TestIVStateLocked: an engine whose IV state file another engine holds
// stops before it touches DPDK, saying why.
func TestIVStateLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "iv.state")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := aesni.OpenIVSource(aesni.IVConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"-iv-state", path, "-socket", filepath.Join(t.TempDir(), "s.sock"), "-log-level", "warn"},
		&bytes.Buffer{}, &stderr, nil)
	if code != 1 || !strings.Contains(stderr.String(), "in use by another engine") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), "EAL") {
		t.Errorf("got as far as the EAL: %s", stderr.String())
	}
}

// TestIVStateLost: an engine whose identity state (the table, or only its
// mark) survives its IV state refuses to start, before it touches DPDK,
// saying what is wrong and what to do, with every file named. Neither file
// (a first start), both, or an IV state alone pass the check.
func TestIVStateLost(t *testing.T) {
	for _, tc := range []struct {
		name          string
		iv, ids, mark bool
		refused       bool
	}{
		{name: "first start"},
		{name: "restart", iv: true, ids: true, mark: true},
		{name: "IV state alone", iv: true},
		{name: "identity table without IV state", ids: true, mark: true, refused: true},
		{name: "identity table alone", ids: true, refused: true},
		{name: "identity mark alone", mark: true, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			iv := filepath.Join(dir, "iv.state")
			ids, mark := iv+".ids", ctl.IdentityMarkPath(iv+".ids")
			for _, f := range []struct {
				path string
				make bool
			}{{iv, tc.iv}, {ids, tc.ids}, {mark, tc.mark}} {
				if f.make {
					if err := os.WriteFile(f.path, []byte("x"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			args := []string{"-iv-state", iv, "-socket", filepath.Join(dir, "s.sock"), "-log-level", "warn"}
			cfg, _, err := loadConfig(args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			err = checkIVStateLost(&cfg)
			if !tc.refused {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, errIVStateLost) {
				t.Fatalf("not refused: %v", err)
			}
			var stderr bytes.Buffer
			if code := run(context.Background(), args, &bytes.Buffer{}, &stderr, nil); code != 1 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			msg := stderr.String()
			for _, want := range []string{"IV state lost", "engine.iv_state " + iv + " does not exist", "repeat AES-GCM nonces",
				"rotate every region key", "remove the identity state (ctl.id_state " + ids + " and " + mark + ")"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q: %s", want, msg)
				}
			}
			if strings.Contains(msg, "EAL") {
				t.Errorf("got as far as the EAL: %s", msg)
			}
			if _, err := os.Stat(iv); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("an IV state was created: %v", err)
			}
		})
	}
}

// TestIVStateRestart: rmad's first start creates the IV state and the
// identity state, a restart with both starts again, and a start after the
// IV state was removed is refused (TestIVStateLost).
func TestIVStateRestart(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("DPDK needs root; not root and CI is not \"true\"")
	}
	dir := t.TempDir()
	iv := filepath.Join(dir, "lib", "iv.state")
	args := []string{
		"-iv-state", iv,
		"-eal", strings.Join(dpdktest.Args(), " "),
		"-vdev", "net_ring0", "-port-name", "net_ring0",
		"-ip", "10.3.0.3", "-socket", filepath.Join(dir, "rmad.sock"), "-poll-mode", "backoff",
		"-mbufs", "2047", "-rx-desc", "512", "-tx-desc", "512", "-log-level", "warn",
	}
	files := []string{iv, iv + ".ids", ctl.IdentityMarkPath(iv + ".ids")}
	for _, start := range []string{"first start", "restart"} {
		startRmad(t, args).stop(t)
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("after the %s: %v", start, err)
			}
		}
	}
	if err := os.Remove(iv); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), args, &bytes.Buffer{}, &stderr, nil); code != 1 || !strings.Contains(stderr.String(), "IV state lost") {
		t.Fatalf("start without the IV state: exit %d: %s", code, stderr.String())
	}
}

// TestRmadNetRing runs the whole daemon on a net_ring loopback vdev: EAL,
// mempool, port, core, runner and control socket; an application opens a
// portal, READs from another portal's region through the engine's own
// address, and the daemon shuts down leaving no file behind.
func TestRmadNetRing(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("DPDK needs root; not root and CI is not \"true\"")
	}
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "rmad.sock")
	ivState := filepath.Join(t.TempDir(), "lib", "iv.state") // its directory is created by rmad
	metricsAddr, err := testbed.MetricsAddr()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{
		"-iv-state", ivState,
		"-eal", strings.Join(dpdktest.Args(), " "),
		"-vdev", "net_ring0", "-port-name", "net_ring0",
		"-ip", "10.3.0.1", "-socket", sock, "-poll-mode", "backoff",
		"-mbufs", "2047", "-rx-desc", "512", "-tx-desc", "512", "-log-level", "warn",
		"-metrics", metricsAddr, "-metrics-pprof", "true", "-metrics-portals", "true",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr bytes.Buffer
	readyc := make(chan string, 1)
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &bytes.Buffer{}, &stderr, func(s string) { readyc <- s }) }()
	select {
	case <-readyc:
	case code := <-done:
		t.Fatalf("rmad exited %d before ready: %s", code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("rmad not ready after 30 s")
	}

	srv, err := portal.Dial(sock, "server")
	if err != nil {
		t.Fatal(err)
	}
	src, err := srv.RegisterRegion(16<<10, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 31)
	}
	cli, err := portal.Dial(sock, "client")
	if err != nil {
		t.Fatal(err)
	}
	// Both portals of this process carry its one identity, allocated by
	// the engine (not its PID) and recorded beside the IV state (checked
	// after shutdown, which writes the table last).
	if id := cli.Identity(); id.Addr.String() != "10.3.0.1" || id.PID != srv.Identity().PID || id.PID < ctl.FirstIdentity || id.Tenant != fmt.Sprintf("main uid %d", os.Getuid()) {
		t.Fatalf("identity %+v, the server portal's %+v", id, srv.Identity())
	}
	if _, err := cli.AllocSlots(4); err != nil {
		t.Fatal(err)
	}
	sink, err := cli.RegisterRegion(16<<10, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		s, _ := cli.Slot()
		kd := src.DeriveKey(cli.Identity().Addr, cli.Identity().PID, abi.OpRead)
		if err := cli.Post(&portal.Op{
			Type: portal.OpRead, Slot: s, Cookie: uint64(i),
			Remote: cli.Identity().Addr, RemoteRegion: src.ID(), RemoteOffset: uint64(i) * 4096, Key: kd,
			Local: sink, LocalOffset: uint64(i) * 4096, Length: 4096,
		}); err != nil {
			t.Fatal(err)
		}
	}
	cli.Flush()
	out := make([]abi.Completion, 4)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	for got := 0; got < 4; {
		n, err := cli.Wait(wctx, out)
		if err != nil {
			t.Fatalf("Wait: %v (stderr: %s)", err, stderr.String())
		}
		for _, c := range out[:n] {
			if c.Status != abi.StatusOK {
				t.Fatalf("completion %+v", c)
			}
		}
		got += n
	}
	if !bytes.Equal(sink.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
	st, err := cli.Stats()
	if err != nil || st.ReqServed < 4 || st.SlotsInUse != 4 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if p := st.Port; p == nil || p.Name != "net_ring0" || p.DevErr != "" || p.Driver.IOCalls == 0 {
		t.Errorf("port counters %+v", p)
	}
	// Backoff mode on net_ring: TIMEOUT 10 ms, the whole queue.
	if n := st.NackThreshold; n == nil || n.Threshold != 1024 || n.Source != "derived" || n.TimeoutNs != int64(10*time.Millisecond) || n.Formula == "" {
		t.Errorf("nack_threshold %+v", n)
	}
	if r := st.CompletedByOp["READ"]; r["OK"] != 4 || len(st.CompletedByOp) != 1 {
		t.Errorf("completions by op %v", st.CompletedByOp)
	}
	if ps := st.Portals; len(ps) != 2 || ps[0].Name != "server" || ps[1].Name != "client" ||
		ps[1].PID != cli.Identity().PID || ps[1].Tenant != cli.Identity().Tenant || ps[1].Slots != 4 || ps[1].InFlight != 0 || ps[1].CmdDepth != 0 || ps[1].CplDepth != 0 ||
		ps[1].CmdCap == 0 || ps[1].CplCap == 0 || ps[1].Class != "low" {
		t.Errorf("portals %+v", ps)
	}
	if st.Fault != nil { // the "fault" section sets no probability: no wrapper
		t.Errorf("fault counters without fault injection: %+v", st.Fault)
	}
	// -metrics: the same counters, with the core's sizes and its portals;
	// the delay histograms within the core's 1 ms batch.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		page, err := testbed.Scrape(metricsAddr)
		if err != nil {
			t.Fatal(err)
		}
		lacks := ""
		for _, want := range []string{`onerma_completions_total{core="0",op="READ",status="OK"} 4`, `onerma_slots_in_use{core="0"} 4`,
			`onerma_slots{core="0"} 1024`, `onerma_window_size_bytes{core="0"} 262144`, `onerma_portals{core="0"} 2`,
			`onerma_port_driver_frames_total{core="0",dir="rx",port="net_ring0"}`, `onerma_portal_regions{class="low",core="0",name="server"`,
			`onerma_op_total_delay_seconds_count{core="0",op="READ"} 4`, "process_resident_memory_bytes"} {
			if !strings.Contains(page, want) {
				lacks = want
			}
		}
		if lacks == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics page lacks %s:\n%s", lacks, page)
		}
	}
	// -metrics-pprof: the Go runtime's heap profile beside the metrics.
	resp, err := http.Get("http://" + metricsAddr + "/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	heap, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.HasPrefix(heap, []byte("heap profile: ")) {
		t.Fatalf("GET /debug/pprof/heap: %v %v: %.200s", resp.Status, err, heap)
	}
	// The loop publishes its counters every 256 iterations; an idle
	// backoff loop iterates thousands of times a second.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, err = cli.Stats(); err != nil {
			t.Fatal(err)
		}
		// (The reads' frames loop inside the core: no rx frames.)
		if l := st.Loop; l != nil && l.Iterations > 0 && l.IdleSleeps > 0 && l.SleptNs > 0 && l.Execs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("loop counters %+v: want iterations, idle sleeps and the control plane's execs", st.Loop)
		}
	}
	// Leave the client's portal open: shutdown must reclaim it.
	srv.Close()
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("rmad exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rmad did not shut down")
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("socket directory left behind: %v", err)
	}
	if b, err := os.ReadFile(ivState + ".ids"); err != nil || !strings.Contains(string(b), fmt.Sprintf(" %d\n", cli.Identity().PID)) {
		t.Errorf("identity state: %q %v", b, err)
	}
	// The IV state stays (it must), unlocked: the next engine resumes above it.
	iv, err := aesni.OpenIVSource(aesni.IVConfig{Path: ivState})
	if err != nil {
		t.Fatalf("IV state after shutdown: %v", err)
	}
	if st := iv.Stats(); st.Next <= 1 {
		t.Errorf("IV state after a run starts at %d", st.Next)
	}
	iv.Close()
	if _, err := cli.AllocSlots(1); err == nil {
		t.Error("portal still served after shutdown")
	}
	cli.Close()
	if strings.Contains(stderr.String(), `"level":"error"`) {
		t.Errorf("errors logged: %s", stderr.String())
	}
}

// TestFaultConfig: the "fault" section comes from the default, the file
// and the flags, in that order; it is off unless a probability is set, and
// every bad value is refused naming it.
func TestFaultConfig(t *testing.T) {
	def := defaultConfig()
	fc, err := def.faultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if fc.Active() {
		t.Fatalf("the default injects faults: %+v", fc)
	}
	file := writeFile(t, `{"fault": {"drop": 0.05, "seed": 7, "reorder": 0.01, "reorder_depth": 8}, "port": {"burst": 64}}`)
	cfg, _, err := loadConfig([]string{"-config", file, "-fault-direction", "both", "-fault-delay", "0.2",
		"-fault-delay-by", "100us", "-fault-jitter", "20us", "-fault-drop", "0.1", "-fault-pool", "512"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	fc, err = cfg.faultConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := faultport.Config{Direction: "both", Drop: 0.1, Reorder: 0.01, ReorderDepth: 8, Delay: 0.2,
		DelayNs: 100_000, JitterNs: 20_000, Pool: 512, Burst: 64, Seed: 7}
	if fc != want || !fc.Active() {
		t.Fatalf("fault config\n got %+v\nwant %+v", fc, want)
	}
	// Unset keys keep the default's values.
	cfg, _, err = loadConfig([]string{"-fault-duplicate", "0.5"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if fc, err = cfg.faultConfig(); err != nil || fc.Direction != "rx" || fc.Pool != 256 || fc.ReorderDepth != 4 || fc.Duplicate != 0.5 {
		t.Fatalf("fault config %+v, %v", fc, err)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-fault-drop", "1.5"}, "invalid config: fault: faultport: invalid config: Drop = 1.5, want a probability in [0, 1]"},
		{[]string{"-fault-duplicate", "-0.1"}, "Duplicate = -0.1"},
		{[]string{"-fault-direction", "up"}, `Direction = "up", want "rx", "tx" or "both"`},
		{[]string{"-fault-delay", "0.1"}, "Delay = 0.1 with DelayNs = JitterNs = 0 (no delay to apply)"},
		{[]string{"-fault-delay-by", "-1ms"}, "invalid config: fault.delay_by -1ms is negative"},
		{[]string{"-fault-jitter", "-1us"}, "invalid config: fault.jitter -1µs is negative"},
		{[]string{"-fault-pool", "0"}, "Pool = 0"},
		{[]string{"-fault-reorder-depth", "0"}, "ReorderDepth = 0"},
		{[]string{"-fault-delay-by", "11s"}, "DelayNs = 11000000000"},
	} {
		cfg, _, err := loadConfig(tt.args, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: validate = %v, want %q", tt.args, err, tt.want)
		}
	}
	for _, tt := range []struct {
		file string
		args []string
		want string
	}{
		{`{"fault": {"drops": 0.1}}`, nil, `unknown field "drops"`},
		{`{"fault": {"delay_by": 100}}`, nil, "duration"},
		{"", []string{"-fault-drop", "some"}, "invalid value"},
		{"", []string{"-fault-seed", "-1"}, "invalid value"},
	} {
		args := tt.args
		if tt.file != "" {
			args = append([]string{"-config", writeFile(t, tt.file)}, args...)
		}
		if _, _, err := loadConfig(args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %v: %v, want %q", tt.file, tt.args, err, tt.want)
		}
	}
}

// TestWrapPort: no wrapper at all unless a probability is set; with one,
// the wrapper is in front of the port with the port's burst.
func TestWrapPort(t *testing.T) {
	inner, err := memport.Loopback(memport.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	fc, err := cfg.faultConfig()
	if err != nil {
		t.Fatal(err)
	}
	port, fault, err := wrapPort(inner, fc)
	if err != nil || port != runner.Port(inner) || fault != nil {
		t.Fatalf("default config: port %T, fault %v, %v", port, fault, err)
	}
	cfg.Fault.Drop = 1
	if fc, err = cfg.faultConfig(); err != nil {
		t.Fatal(err)
	}
	port, fault, err = wrapPort(inner, fc)
	if err != nil || fault == nil || port != runner.Port(fault) || fault.Inner() != runner.Port(inner) || fault.Config().Burst != cfg.Port.Burst {
		t.Fatalf("drop 1: port %T, fault %v, %v", port, fault, err)
	}
	// Everything sent is lost, and counted.
	b := port.Buffer()
	copy(b, make([]byte, 60))
	port.Send(60)
	port.Flush()
	if got := port.Recv(); len(got) != 0 {
		t.Fatalf("received %d frames through a port dropping everything", len(got))
	}
	if st := faultStatsMsg(fault.Stats()); st.Rx.Frames != 1 || st.Rx.Dropped != 1 || st.Tx.Passed != 1 {
		t.Fatalf("counters %+v", st)
	}
}

// TestLoopStatsMsgCoversEveryField fails when runner.Stats gains a counter
// that loopStatsMsg does not carry.
func TestLoopStatsMsgCoversEveryField(t *testing.T) {
	var s runner.Stats
	sv := reflect.ValueOf(&s).Elem()
	for i := range sv.NumField() {
		sv.Field(i).SetUint(uint64(i + 1))
	}
	sameCounters(t, "", sv, reflect.ValueOf(loopStatsMsg(s)).Elem())
}

// sameCounters reports every uint64 field of src that msg (its
// control-socket form) lacks or carries with another value.
func sameCounters(t *testing.T, prefix string, src, msg reflect.Value) {
	t.Helper()
	if src.NumField() != msg.NumField() {
		t.Errorf("%s%s has %d fields, %s %d", prefix, src.Type(), src.NumField(), msg.Type(), msg.NumField())
	}
	for i := range src.NumField() {
		name := src.Type().Field(i).Name
		mf := msg.FieldByName(name)
		if !mf.IsValid() {
			t.Errorf("%s has no field %s", msg.Type(), name)
			continue
		}
		if mf.Uint() != src.Field(i).Uint() {
			t.Errorf("%s%s = %d, want %d", prefix, name, mf.Uint(), src.Field(i).Uint())
		}
	}
}

// TestPortStatsMsgCoversEveryField fails when dpdkport.Stats or
// dpdk.EthStats gains a counter that portStatsMsg does not carry.
func TestPortStatsMsgCoversEveryField(t *testing.T) {
	var (
		s   dpdkport.Stats
		dev dpdk.EthStats
	)
	n := uint64(1)
	for _, v := range []reflect.Value{reflect.ValueOf(&s).Elem(), reflect.ValueOf(&dev).Elem()} {
		for i := range v.NumField() {
			v.Field(i).SetUint(n)
			n++
		}
	}
	m := portStatsMsg("p0", s, dev, nil)
	if m.Name != "p0" || m.DevErr != "" {
		t.Errorf("%+v", m)
	}
	sameCounters(t, "Driver.", reflect.ValueOf(&s).Elem(), reflect.ValueOf(&m.Driver).Elem())
	sameCounters(t, "Dev.", reflect.ValueOf(&dev).Elem(), reflect.ValueOf(&m.Dev).Elem())
	if m := portStatsMsg("p0", s, dev, errors.New("no stats")); m.DevErr != "no stats" {
		t.Errorf("DevErr %q", m.DevErr)
	}
}

// TestXDPStatsMsgCoversEveryField fails when xdp.Stats or the kernel's
// XDP_STATISTICS (unix.XDPStatistics) gains a counter that xdpStatsMsg
// does not carry; the sockets' counters are summed.
func TestXDPStatsMsgCoversEveryField(t *testing.T) {
	var steer xdp.Stats
	socks := make([]xdp.Socket, 2)
	n := uint64(1)
	for _, v := range []reflect.Value{reflect.ValueOf(&steer).Elem(), reflect.ValueOf(&socks[0].Stats).Elem(), reflect.ValueOf(&socks[1].Stats).Elem()} {
		for i := range v.NumField() {
			v.Field(i).SetUint(n)
			n++
		}
	}
	m := &ctlmsg.PortXDPStats{ZeroCopy: true}
	socks[1].ZeroCopy = true
	xdpStatsMsg(m, steer, socks)
	sameCounters(t, "Steer.", reflect.ValueOf(&steer).Elem(), reflect.ValueOf(&m.Steer).Elem())
	// The kernel's names: Rx_dropped for RxDropped.
	sum := reflect.ValueOf(&socks[0].Stats).Elem()
	got := reflect.ValueOf(&m.Socket).Elem()
	if sum.NumField() != got.NumField() {
		t.Errorf("XDP_STATISTICS has %d counters, ctlmsg.XDPSocketStats %d", sum.NumField(), got.NumField())
	}
	for i := range sum.NumField() {
		name := strings.ReplaceAll(sum.Type().Field(i).Name, "_", "")
		f := got.FieldByNameFunc(func(s string) bool { return strings.EqualFold(s, name) })
		if want := sum.Field(i).Uint() + reflect.ValueOf(&socks[1].Stats).Elem().Field(i).Uint(); !f.IsValid() || f.Uint() != want {
			t.Errorf("Socket.%s: %v, want %d", name, f, want)
		}
	}
	if m.ZeroCopy {
		t.Error("ZeroCopy with a copy-mode socket")
	}
}

// TestFaultStatsMsgCoversEveryField fails when faultport.Stats gains a
// counter that faultStatsMsg does not carry.
func TestFaultStatsMsgCoversEveryField(t *testing.T) {
	var s faultport.Stats
	n := uint64(1)
	for _, d := range []*faultport.DirStats{&s.Rx, &s.Tx} {
		v := reflect.ValueOf(d).Elem()
		for i := range v.NumField() {
			v.Field(i).SetUint(n)
			n++
		}
	}
	s.Held = n
	m := faultStatsMsg(s)
	if m.Held != s.Held {
		t.Errorf("Held = %d, want %d", m.Held, s.Held)
	}
	for _, p := range []struct {
		name string
		d    *faultport.DirStats
		m    *ctlmsg.FaultDirStats
	}{{"Rx", &s.Rx, &m.Rx}, {"Tx", &s.Tx, &m.Tx}} {
		sameCounters(t, p.name+".", reflect.ValueOf(p.d).Elem(), reflect.ValueOf(p.m).Elem())
	}
}

// TestRmadHelperProcess is rmad in a process of its own for
// TestRmadNetRingFault (the EAL starts once per process): it runs with the
// arguments in ONERMA_RMAD_HELPER (JSON), says READY on stdout once it
// serves, and exits with rmad's exit code on SIGTERM.
func TestRmadHelperProcess(t *testing.T) {
	env := os.Getenv("ONERMA_RMAD_HELPER")
	if env == "" {
		return // not the helper
	}
	var args []string
	if err := json.Unmarshal([]byte(env), &args); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	code := run(ctx, args, os.Stdout, os.Stderr, func(string) { fmt.Println("READY") })
	stop()
	os.Exit(code)
}

// TestRmadNetRingFault runs rmad with its port behind the fault injector
// (5 % of received frames dropped; hairpin_self, so the engine's frames to
// itself cross the net_ring loopback and the injector): a 1 MB read,
// re-posting every op that fails, arrives intact, the stats reply carries
// the injector's counters, and rmad logs its fault config and final
// counters.
func TestRmadNetRingFault(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("DPDK needs root; not root and CI is not \"true\"")
	}
	sock := filepath.Join(t.TempDir(), "rmad.sock")
	args := []string{
		"-iv-state", filepath.Join(t.TempDir(), "iv.state"),
		"-eal", strings.Join(dpdktest.Args(), " "),
		"-vdev", "net_ring0", "-port-name", "net_ring0", "-hairpin-self", "true",
		"-ip", "10.3.0.2", "-socket", sock, "-poll-mode", "backoff",
		"-mbufs", "2047", "-rx-desc", "512", "-tx-desc", "512", "-log-level", "info",
		"-fault-drop", "0.05", "-fault-seed", "3",
	}
	h := startRmad(t, args)

	srv, err := portal.Dial(sock, "server")
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	src, err := srv.RegisterRegion(size, abi.PermRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i*29 + i>>12)
	}
	cli, err := portal.Dial(sock, "client")
	if err != nil {
		t.Fatal(err)
	}
	slots, err := cli.AllocSlots(32)
	if err != nil {
		t.Fatal(err)
	}
	sink, err := cli.RegisterRegion(size, abi.PermLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	addr := cli.Identity().Addr
	kd := src.DeriveKey(addr, cli.Identity().PID, abi.OpRead)
	const chunks = size / abi.MaxOpBytes
	failed, err := readall.Chunked(cli, slots, addr, src.ID(), kd, sink, size, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), src.Bytes()) {
		t.Fatal("data differs")
	}
	st, err := cli.Stats()
	if err != nil {
		t.Fatal(err)
	}
	f := st.Fault
	if f == nil || f.Rx.Dropped == 0 || f.Rx.Frames < 4*chunks || f.Tx.Frames == 0 || f.Tx.Dropped != 0 || failed == 0 {
		t.Fatalf("%d ops failed; fault counters %+v", failed, f)
	}
	if rate := float64(f.Rx.Dropped) / float64(f.Rx.Frames); rate < 0.03 || rate > 0.07 {
		t.Errorf("rx drop rate %.3f (%+v)", rate, f.Rx)
	}
	cli.Close()
	srv.Close()
	log := h.stop(t)
	for _, want := range []string{`"level":"warn"`, `fault injection ON`, `"drop":0.05`, `"delay_late_at_most":"200µs"`, `final fault injection counters`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, `"level":"error"`) {
		t.Errorf("errors logged: %s", log)
	}
}

// rmadProc is rmad running in a helper process (TestRmadHelperProcess).
type rmadProc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	exited chan error
}

// startRmad starts rmad with args in a helper process and waits until it
// serves; the test's cleanup kills it if the test did not stop it.
func startRmad(t *testing.T, args []string) *rmadProc {
	t.Helper()
	js, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRmadHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ONERMA_RMAD_HELPER="+string(js))
	h := &rmadProc{cmd: cmd, stderr: &bytes.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = h.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyc := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready := false
		for sc.Scan() {
			if sc.Text() == "READY" && !ready {
				ready = true
				readyc <- true
			}
		}
		if !ready {
			readyc <- false
		}
		h.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	select {
	case ok := <-readyc:
		if !ok {
			t.Fatalf("rmad exited before ready: %v\n%s", <-h.exited, h.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rmad not ready after 30 s")
	}
	return h
}

// stop sends SIGTERM, waits for a clean exit and returns rmad's log.
func (h *rmadProc) stop(t *testing.T) string {
	t.Helper()
	h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.exited:
		if err != nil {
			t.Fatalf("rmad: %v\n%s", err, h.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rmad did not shut down")
	}
	return h.stderr.String()
}

// TestRmadBusyNice: in busy mode with a CPU the polling thread, pinned
// there, runs at poll.nice (default -20) and every other thread of the
// daemon at the process's 0; in backoff mode, in busy mode without a CPU
// and with -poll-nice 0, no thread changes.
func TestRmadBusyNice(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("DPDK needs root; not root and CI is not \"true\"")
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	last := -1
	for c := range len(all) * 64 {
		if all.IsSet(c) {
			last = c // the last CPU this test may use
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		cpu  int // the polling thread's CPU; -1: none
		want int // the polling thread's nice value
	}{
		{"busy", []string{"-poll-mode", "busy"}, last, -20},
		{"busy-nice0", []string{"-poll-mode", "busy", "-poll-nice", "0"}, last, 0},
		{"busy-unpinned", []string{"-poll-mode", "busy"}, -1, 0},
		{"backoff", []string{"-poll-mode", "backoff"}, last, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startRmad(t, append([]string{
				"-iv-state", filepath.Join(t.TempDir(), "iv.state"),
				"-eal", strings.Join(dpdktest.Args(), " "),
				"-vdev", "net_ring0", "-port-name", "net_ring0",
				"-ip", "10.3.0.3", "-socket", filepath.Join(t.TempDir(), "rmad.sock"),
				"-cpu", strconv.Itoa(tc.cpu),
				"-mbufs", "2047", "-rx-desc", "512", "-tx-desc", "512", "-log-level", "warn",
			}, tc.args...))
			// Read at once: a busy loop at -20 should not hold a CPU of
			// the test machine longer than it must.
			pid := h.cmd.Process.Pid
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if err != nil {
				t.Fatal(err)
			}
			var loop []int
			for _, e := range tasks {
				tid, err := strconv.Atoi(e.Name())
				if err != nil {
					continue
				}
				var set unix.CPUSet
				p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
				if err != nil || unix.SchedGetaffinity(tid, &set) != nil {
					continue // exited
				}
				nice := 20 - p // the system call answers 20 - nice
				if tc.cpu >= 0 && set.Count() == 1 && set.IsSet(tc.cpu) {
					loop = append(loop, tid)
					if nice != tc.want {
						t.Errorf("the polling thread %d runs at nice %d, want %d", tid, nice, tc.want)
					}
				} else if nice != 0 {
					t.Errorf("thread %d (not a pinned polling thread) runs at nice %d", tid, nice)
				}
			}
			if tc.cpu >= 0 && len(loop) != 1 {
				t.Errorf("%d threads pinned to CPU %d alone, want the polling thread: %v", len(loop), tc.cpu, loop)
			}
			if log := h.stop(t); strings.Contains(log, `"level":"error"`) || strings.Contains(log, "keeps the process's nice") {
				t.Errorf("rmad logged:\n%s", log)
			}
		})
	}
}
