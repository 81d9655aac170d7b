package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/onerma/onerma/engine/ctl"
)

// TestTenantsByUIDConfig: ctl.uid_map, passwd_file, subuid_file,
// stats_rate, stats_burst and operator_gid reach ctl.Config from the
// file and their flags; the defaults are ctl's; a bad map is refused
// naming it.
func TestTenantsByUIDConfig(t *testing.T) {
	d := defaultConfig()
	def, err := d.ctlConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := ctl.DefaultConfig()
	if def.PasswdFile != want.PasswdFile || def.SubuidFile != want.SubuidFile || def.StatsRate != want.StatsRate ||
		def.StatsBurst != want.StatsBurst || def.OperatorGID != nil || len(def.UIDMap) != 0 {
		t.Errorf("default.json's ctl %+v, want ctl.DefaultConfig's", def)
	}

	file := writeFile(t, `{"ctl": {"uid_map": [{"uids": "100000-165535", "tenant_uid": 1000}, {"uids": "1234", "tenant_uid": 1001}],
		"passwd_file": "/srv/passwd", "subuid_file": "", "stats_rate": 5, "stats_burst": 10, "operator_gid": 4242}}`)
	cfg, _, err := loadConfig([]string{"-config", file}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.ctlConfig()
	if err != nil {
		t.Fatal(err)
	}
	wantMap := []ctl.UIDMapEntry{{UIDs: "100000-165535", TenantUID: 1000}, {UIDs: "1234", TenantUID: 1001}}
	if !reflect.DeepEqual(cc.UIDMap, wantMap) || cc.PasswdFile != "/srv/passwd" || cc.SubuidFile != "" ||
		cc.StatsRate != 5 || cc.StatsBurst != 10 || cc.OperatorGID == nil || *cc.OperatorGID != 4242 {
		t.Errorf("from the file: %+v", cc)
	}
	cfg, _, err = loadConfig([]string{"-config", file, "-passwd-file", "/p", "-subuid-file", "/s", "-stats-rate", "0.5",
		"-stats-burst", "2", "-operator-gid", "none"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cc, err = cfg.ctlConfig(); err != nil {
		t.Fatal(err)
	}
	if cc.PasswdFile != "/p" || cc.SubuidFile != "/s" || cc.StatsRate != 0.5 || cc.StatsBurst != 2 || cc.OperatorGID != nil {
		t.Errorf("from the flags: %+v", cc)
	}
	if cfg, _, err = loadConfig([]string{"-operator-gid", "7"}, &bytes.Buffer{}); err != nil || cfg.Ctl.OperatorGID == nil || *cfg.Ctl.OperatorGID != 7 {
		t.Errorf("-operator-gid 7: %+v, %v", cfg.Ctl.OperatorGID, err)
	}

	for _, bad := range []struct{ file, want string }{
		{`{"ctl": {"uid_map": [{"uids": "5-3", "tenant_uid": 1}]}}`, `UIDMap[0]: uids "5-3": the range ends before it starts`},
		{`{"ctl": {"uid_map": [{"uids": "1-9", "tenant_uid": 1}, {"uids": "9", "tenant_uid": 2}]}}`, "overlap"},
		{`{"ctl": {"stats_rate": 0}}`, "StatsRate/StatsBurst"},
		{`{"ctl": {"stats_burst": 0}}`, "StatsRate/StatsBurst"},
	} {
		cfg, _, err := loadConfig([]string{"-config", writeFile(t, bad.file)}, &bytes.Buffer{})
		if err == nil {
			_, err = cfg.ctlConfig()
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.file, err, bad.want)
		}
	}
}
