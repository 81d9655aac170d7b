package ctl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Tenants by uid (a socket with Tenant TenantByUID). A uid is not a
// tenant by itself: a user with a subordinate uid range (/etc/subuid,
// Debian's default gives each user 65,536) runs containers whose
// processes connect with any uid of that range, and each uid a tenant of
// its own would give the user 65,536 quotas. So a connecting uid folds
// into the uid of its tenant, the first of these that names it:
//
//  1. the operator's map (Config.UIDMap: ranges of uids, each to a
//     tenant uid);
//  2. uid 0 is its own tenant (root, whatever the files say or whether
//     they exist);
//  3. the subordinate uid file (Config.SubuidFile, "owner:first:count"
//     lines): a uid in a user's range counts as that user, the owner
//     named by uid or by a name the passwd file gives a uid;
//  4. the passwd file (Config.PasswdFile): a uid it names is its own
//     tenant;
//  5. every other uid shares the socket's one "other" tenant ("main
//     other uids"), capped by the socket's quota like any tenant.
//
// The files are read at Listen and read again when their inode, size or
// modification time changes, checked at most once a second when a
// connection is accepted (never on a request, never on the data path). A
// connection keeps the tenant it was given when it was accepted.

// UIDMapEntry maps a range of uids to the tenant of one uid (rmad's
// ctl.uid_map: {"uids": "100000-165535", "tenant_uid": 1000}).
type UIDMapEntry struct {
	// UIDs is one uid ("1234") or an inclusive range ("100000-165535").
	UIDs string `json:"uids"`
	// TenantUID is the uid whose tenant these uids count as.
	TenantUID uint32 `json:"tenant_uid"`
}

// Range parses UIDs.
func (e UIDMapEntry) Range() (lo, hi uint32, err error) {
	a, b, isRange := strings.Cut(e.UIDs, "-")
	if lo, err = parseUID(a); err != nil {
		return 0, 0, fmt.Errorf("uids %q: %v", e.UIDs, err)
	}
	hi = lo
	if isRange {
		if hi, err = parseUID(b); err != nil {
			return 0, 0, fmt.Errorf("uids %q: %v", e.UIDs, err)
		}
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("uids %q: the range ends before it starts", e.UIDs)
	}
	return lo, hi, nil
}

func parseUID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || s == "" || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a uid (0..%d)", s, uint32(math.MaxUint32))
	}
	return uint32(n), nil
}

// Keys of the tenants that stand for no one uid (tenantKey.uid).
const (
	keyWholeSocket = -1 // a socket that is one tenant
	keyOtherUIDs   = -2 // a socket's uids named nowhere
)

// tenantKeyOf is the key and name of the tenant of a peer connecting
// through l: the socket's, or on a socket that splits tenants by uid the
// tenant its uid folds into ("main uid 1000", "main other uids").
func (s *Server) tenantKeyOf(l *listener, p *peer) (tenantKey, string) {
	k, name := tenantKey{sock: l.idx, uid: keyWholeSocket}, l.cfg.label()
	if l.cfg.Tenant != TenantByUID {
		return k, name
	}
	f := s.uids.fold(p.uid)
	if f.other {
		k.uid = keyOtherUIDs
		return k, name + " other uids"
	}
	k.uid = int64(f.tenant)
	return k, fmt.Sprintf("%s uid %d", name, f.tenant)
}

// uidRange is an inclusive range of uids folding into tenant.
type uidRange struct{ lo, hi, tenant uint32 }

// parseUIDMap checks the map's entries and returns their ranges, sorted.
// Ranges may not overlap: which entry wins would otherwise depend on
// their order.
func parseUIDMap(m []UIDMapEntry) ([]uidRange, error) {
	rs := make([]uidRange, 0, len(m))
	for i, e := range m {
		lo, hi, err := e.Range()
		if err != nil {
			return nil, fmt.Errorf("UIDMap[%d]: %v", i, err)
		}
		rs = append(rs, uidRange{lo, hi, e.TenantUID})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo < rs[j].lo })
	for i := 1; i < len(rs); i++ {
		if rs[i].lo <= rs[i-1].hi {
			return nil, fmt.Errorf("UIDMap: uids %d-%d and %d-%d overlap", rs[i-1].lo, rs[i-1].hi, rs[i].lo, rs[i].hi)
		}
	}
	return rs, nil
}

// find returns the range of sorted, disjoint rs holding uid.
func find(rs []uidRange, uid uint32) (uidRange, bool) {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].hi >= uid })
	if i < len(rs) && rs[i].lo <= uid {
		return rs[i], true
	}
	return uidRange{}, false
}

// How a uid found its tenant (for logs).
const (
	foldRoot   = "root"
	foldMap    = "uid_map"
	foldSubuid = "subuid"
	foldPasswd = "passwd"
	foldOther  = "other"
)

// uidFold is where a connecting uid belongs.
type uidFold struct {
	tenant uint32 // the tenant's uid (unset for other)
	other  bool   // the socket's shared tenant of uids named nowhere
	via    string // foldRoot, foldMap, ...
}

// uidTable is what the two files say.
type uidTable struct {
	users map[uint32]struct{} // uids the passwd file names
	sub   []uidRange          // subordinate ranges, sorted, disjoint
}

// fileStamp tells a file's versions apart: replaced (a new inode),
// rewritten in place (size or modification time), or absent.
type fileStamp struct {
	ino, size uint64
	mtime     int64
	exists    bool
}

func stampOf(path string) (fileStamp, error) {
	if path == "" {
		return fileStamp{}, nil
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fileStamp{}, nil
	}
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: uint64(fi.Size()), mtime: fi.ModTime().UnixNano(), exists: true}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}

// uidRecheck is how often, at most, the files are checked for changes.
const uidRecheck = time.Second

// maxUIDFileBytes bounds the passwd and subuid files read: a larger one
// is refused (the previous table is kept) rather than read into memory.
const maxUIDFileBytes = 16 << 20

// uidFolder folds connecting uids into their tenants. Safe for
// concurrent use.
type uidFolder struct {
	ranges             []uidRange // Config.UIDMap
	passwdPath, subuid string
	log                zerolog.Logger
	warn               zerolog.Logger // sampled: a broken file is checked every second

	tab atomic.Pointer[uidTable] // swapped whole: fold takes no lock

	mu      sync.Mutex // serializes the checks (fold never waits for a file)
	checked time.Time  // last check of the files
	read    stampPair  // the versions the table was read from
	failed  *stampPair // the versions that could not be read (not tried again)
}

type stampPair struct{ pw, sub fileStamp }

// newUIDFolder reads the files once; a file that exists but cannot be
// read or parsed is an error here (later, its previous table is kept).
func newUIDFolder(cfg *Config, log zerolog.Logger) (*uidFolder, error) {
	rs, err := parseUIDMap(cfg.UIDMap)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	f := &uidFolder{ranges: rs, passwdPath: cfg.PasswdFile, subuid: cfg.SubuidFile, log: log,
		warn: log.Sample(&zerolog.BurstSampler{Burst: 1, Period: time.Minute})}
	if err := f.reload(time.Now()); err != nil {
		return nil, err
	}
	return f, nil
}

// refresh reads the files again if they changed, at most once per
// uidRecheck. A file that cannot be read keeps its previous table; the
// warning is logged once per version of the files.
func (f *uidFolder) refresh(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.checked) < uidRecheck {
		return
	}
	if err := f.reloadLocked(now); err != nil {
		f.warn.Warn().Err(err).Msg("tenants by uid: keeping the previous passwd and subuid tables")
	}
}

func (f *uidFolder) reload(now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reloadLocked(now)
}

func (f *uidFolder) reloadLocked(now time.Time) error {
	f.checked = now
	pw, err := stampOf(f.passwdPath)
	if err != nil {
		return fmt.Errorf("ctl: passwd file: %w", err)
	}
	sub, err := stampOf(f.subuid)
	if err != nil {
		return fmt.Errorf("ctl: subuid file: %w", err)
	}
	seen := stampPair{pw, sub}
	if (f.tab.Load() != nil && seen == f.read) || (f.failed != nil && seen == *f.failed) {
		return nil // unchanged, or a version already found unreadable
	}
	tab, skipped, err := readUIDTable(f.passwdPath, pw.exists, f.subuid, sub.exists)
	if err != nil {
		f.failed = &seen
		return err
	}
	f.read = seen
	f.tab.Store(&tab)
	f.log.Info().Str("passwd_file", f.passwdPath).Bool("passwd_found", pw.exists).Int("users", len(tab.users)).
		Str("subuid_file", f.subuid).Bool("subuid_found", sub.exists).Int("subuid_ranges", len(tab.sub)).
		Int("subuid_lines_skipped", skipped).Int("uid_map_entries", len(f.ranges)).Msg("tenants by uid: tables read")
	return nil
}

// fold returns the tenant of a connecting uid.
func (f *uidFolder) fold(uid uint32) uidFold {
	if r, ok := find(f.ranges, uid); ok {
		return uidFold{tenant: r.tenant, via: foldMap}
	}
	if uid == 0 {
		return uidFold{tenant: 0, via: foldRoot}
	}
	tab := f.tab.Load()
	if tab == nil { // never read: newUIDFolder failed
		tab = &uidTable{}
	}
	if r, ok := find(tab.sub, uid); ok {
		return uidFold{tenant: r.tenant, via: foldSubuid}
	}
	if _, ok := tab.users[uid]; ok {
		return uidFold{tenant: uid, via: foldPasswd}
	}
	return uidFold{other: true, via: foldOther}
}

// readUIDTable reads the passwd file, then the subuid file (whose owners
// may be user names). skipped counts subuid lines whose owner is unknown
// or whose range overlaps an earlier line's (the earlier line wins).
func readUIDTable(passwdPath string, pwExists bool, subuidPath string, subExists bool) (tab uidTable, skipped int, err error) {
	tab.users = make(map[uint32]struct{})
	names := make(map[string]uint32)
	if pwExists {
		b, err := readSmall(passwdPath)
		if err != nil {
			return uidTable{}, 0, err
		}
		parsePasswd(b, tab.users, names)
	}
	if subExists {
		b, err := readSmall(subuidPath)
		if err != nil {
			return uidTable{}, 0, err
		}
		tab.sub, skipped = parseSubuid(b, names)
	}
	return tab, skipped, nil
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ctl: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxUIDFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("ctl: reading %s: %w", path, err)
	}
	if len(b) > maxUIDFileBytes {
		return nil, fmt.Errorf("ctl: %s is larger than %d bytes", path, maxUIDFileBytes)
	}
	return b, nil
}

// parsePasswd adds every uid of passwd(5) lines ("name:pw:uid:...") to
// users and each name's uid to names (a name's first line wins). Lines it
// cannot read, and NIS's "+" and "-" lines, name nobody.
func parsePasswd(b []byte, users map[uint32]struct{}, names map[string]uint32) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxUIDFileBytes)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) < 3 || f[0] == "" || f[0][0] == '+' || f[0][0] == '-' || f[0][0] == '#' {
			continue
		}
		uid, err := parseUID(f[2])
		if err != nil {
			continue
		}
		users[uid] = struct{}{}
		if _, dup := names[f[0]]; !dup {
			names[f[0]] = uid
		}
	}
}

// parseSubuid reads subuid(5) lines ("owner:first:count", the owner a
// user name or a uid) into sorted, disjoint ranges. A line whose owner
// names nobody, that does not parse, or that overlaps an earlier line's
// range is skipped and counted.
func parseSubuid(b []byte, names map[string]uint32) ([]uidRange, int) {
	var (
		rs      []uidRange
		skipped int
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), maxUIDFileBytes)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) != 3 {
			skipped++
			continue
		}
		owner, err := parseUID(f[0])
		if err != nil {
			var ok bool
			if owner, ok = names[f[0]]; !ok {
				skipped++
				continue
			}
		}
		first, err1 := parseUID(f[1])
		count, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 != nil || err2 != nil || count == 0 || uint64(first)+count-1 > math.MaxUint32 {
			skipped++
			continue
		}
		r := uidRange{lo: first, hi: uint32(uint64(first) + count - 1), tenant: owner}
		// Insert in order unless it overlaps a range kept already.
		i := sort.Search(len(rs), func(i int) bool { return rs[i].hi >= r.lo })
		if i < len(rs) && rs[i].lo <= r.hi {
			skipped++
			continue
		}
		rs = append(rs, uidRange{})
		copy(rs[i+1:], rs[i:])
		rs[i] = r
	}
	return rs, skipped
}
