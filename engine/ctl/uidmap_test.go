package ctl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

const testPasswd = `root:x:0:0:root:/root:/bin/bash
svc:x:998:998::/var/lib/svc:/usr/sbin/nologin
alice:x:1000:1000:Alice:/home/alice:/bin/bash
bob:x:1001:1001:Bob:/home/bob:/bin/bash
+nis
broken:x:notanumber:1::/:/bin/sh
`

const testSubuid = `alice:100000:65536
# numeric owner: uid 1001
1001:165536:65536
ghost:300000:10
bob:100005:10
carol:400000:0
`

// uidFiles writes passwd and subuid files into a temp dir and returns a
// config reading them.
func uidFiles(t *testing.T, passwd, subuid string) *Config {
	t.Helper()
	dir := t.TempDir()
	c := DefaultConfig()
	c.PasswdFile, c.SubuidFile = filepath.Join(dir, "passwd"), filepath.Join(dir, "subuid")
	for path, s := range map[string]string{c.PasswdFile: passwd, c.SubuidFile: subuid} {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &c
}

// TestUIDFold: a connecting uid folds into the uid map's tenant first,
// then root, then the user whose subordinate range holds it (named by
// name or uid), then itself if the passwd file names it; any other uid
// is "other".
func TestUIDFold(t *testing.T) {
	c := uidFiles(t, testPasswd, testSubuid)
	c.UIDMap = []UIDMapEntry{{UIDs: "100007", TenantUID: 4242}, {UIDs: "500000-500099", TenantUID: 1001}}
	f, err := newUIDFolder(c, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	other := uidFold{other: true, via: foldOther}
	for _, tt := range []struct {
		uid  uint32
		want uidFold
	}{
		{0, uidFold{tenant: 0, via: foldRoot}},
		{998, uidFold{tenant: 998, via: foldPasswd}},
		{1000, uidFold{tenant: 1000, via: foldPasswd}},
		{100000, uidFold{tenant: 1000, via: foldSubuid}},
		{100005, uidFold{tenant: 1000, via: foldSubuid}}, // bob's line overlaps alice's earlier one: skipped
		{165535, uidFold{tenant: 1000, via: foldSubuid}},
		{165536, uidFold{tenant: 1001, via: foldSubuid}}, // owner named by uid
		{231071, uidFold{tenant: 1001, via: foldSubuid}},
		{231072, other},
		{100007, uidFold{tenant: 4242, via: foldMap}}, // the map wins over the subuid file
		{500000, uidFold{tenant: 1001, via: foldMap}},
		{500099, uidFold{tenant: 1001, via: foldMap}},
		{500100, other},
		{300005, other}, // ghost is nobody: its range is skipped
		{400000, other}, // a range of 0 uids
		{777, other},
		{99999, other},
	} {
		if got := f.fold(tt.uid); got != tt.want {
			t.Errorf("fold(%d) = %+v, want %+v", tt.uid, got, tt.want)
		}
	}
	// Without any file: root is still its own tenant, everyone else other.
	c.PasswdFile, c.SubuidFile = filepath.Join(t.TempDir(), "none"), ""
	c.UIDMap = nil
	f, err = newUIDFolder(c, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if got := f.fold(0); got.other || got.tenant != 0 {
		t.Errorf("no passwd file: fold(0) = %+v", got)
	}
	if got := f.fold(1000); !got.other {
		t.Errorf("no passwd file: fold(1000) = %+v, want other", got)
	}
}

// TestUIDFoldRereadsChangedFiles: a file that changes is read again on
// the first check a second or more after the last; one that cannot be
// read keeps the previous table.
func TestUIDFoldRereadsChangedFiles(t *testing.T) {
	c := uidFiles(t, testPasswd, testSubuid)
	f, err := newUIDFolder(c, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t0 := f.checked
	if got := f.fold(2000); !got.other {
		t.Fatalf("fold(2000) = %+v before the change", got)
	}
	// Replaced by rename, as useradd does.
	tmp := c.PasswdFile + ".new"
	os.WriteFile(tmp, []byte(testPasswd+"dave:x:2000:2000::/home/dave:/bin/sh\n"), 0o644)
	if err := os.Rename(tmp, c.PasswdFile); err != nil {
		t.Fatal(err)
	}
	f.refresh(t0.Add(uidRecheck / 2))
	if got := f.fold(2000); !got.other {
		t.Fatalf("fold(2000) = %+v: read again within %v of the last check", got, uidRecheck)
	}
	f.refresh(t0.Add(uidRecheck))
	if got := f.fold(2000); got != (uidFold{tenant: 2000, via: foldPasswd}) {
		t.Fatalf("fold(2000) = %+v after the passwd file changed", got)
	}
	// Rewritten in place: dave gets a subordinate range.
	if err := os.WriteFile(c.SubuidFile, []byte(testSubuid+"dave:600000:65536\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.refresh(t0.Add(2 * uidRecheck))
	if got := f.fold(600001); got != (uidFold{tenant: 2000, via: foldSubuid}) {
		t.Fatalf("fold(600001) = %+v after the subuid file changed", got)
	}
	// Unreadable (a directory now): the previous table stays.
	os.Remove(c.SubuidFile)
	if err := os.Mkdir(c.SubuidFile, 0o755); err != nil {
		t.Fatal(err)
	}
	f.refresh(t0.Add(3 * uidRecheck))
	if got := f.fold(600001); got.tenant != 2000 {
		t.Fatalf("fold(600001) = %+v with the subuid file unreadable: want the previous table", got)
	}
	// Removed: no subordinate ranges.
	os.Remove(c.SubuidFile)
	f.refresh(t0.Add(4 * uidRecheck))
	if got := f.fold(600001); !got.other {
		t.Fatalf("fold(600001) = %+v with no subuid file", got)
	}
	if got := f.fold(100001); !got.other {
		t.Fatalf("fold(100001) = %+v with no subuid file", got)
	}
}

func TestUIDMapValidate(t *testing.T) {
	for _, tt := range []struct {
		m    []UIDMapEntry
		want string
	}{
		{[]UIDMapEntry{{UIDs: "abc"}}, `UIDMap[0]: uids "abc": "abc" is not a uid`},
		{[]UIDMapEntry{{UIDs: "1"}, {UIDs: "5-3"}}, `UIDMap[1]: uids "5-3": the range ends before it starts`},
		{[]UIDMapEntry{{UIDs: "+5"}}, `UIDMap[0]: uids "+5"`},
		{[]UIDMapEntry{{UIDs: "5-"}}, `UIDMap[0]: uids "5-"`},
		{[]UIDMapEntry{{UIDs: ""}}, `UIDMap[0]: uids ""`},
		{[]UIDMapEntry{{UIDs: "4294967296"}}, `UIDMap[0]: uids "4294967296"`},
		{[]UIDMapEntry{{UIDs: "100-200"}, {UIDs: "200"}}, "UIDMap: uids 100-200 and 200-200 overlap"},
	} {
		c := DefaultConfig()
		c.UIDMap = tt.m
		if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("UIDMap %+v: Validate = %v, want %q", tt.m, err, tt.want)
		}
	}
	c := DefaultConfig()
	c.UIDMap = []UIDMapEntry{{UIDs: "0-99"}, {UIDs: "100"}, {UIDs: "101-4294967295", TenantUID: 7}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
