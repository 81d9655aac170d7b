package protocoldoc_test

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/onerma/onerma/abi"
	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/frontdoor"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := frontdoor.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// row is one table row's cells (backticks dropped, "\|" unescaped) and
// its line in the document.
type row struct {
	cells []string
	line  int
}

var markerRE = regexp.MustCompile(`^<!-- protocol-table: ([a-z-]+) -->$`)

// tables returns docs/protocol.md's marked tables by name, without their
// header and separator rows.
func tables(t *testing.T) map[string][]row {
	t.Helper()
	lines := strings.Split(string(readFile(t, "docs/protocol.md")), "\n")
	out := map[string][]row{}
	for i := 0; i < len(lines); i++ {
		m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Fatalf("protocol.md:%d: table %q twice", i+1, m[1])
		}
		var rows []row
		for j := i + 1; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			if j < i+3 { // header, separator
				continue
			}
			rows = append(rows, row{cells: splitRow(lines[j]), line: j + 1})
		}
		if len(rows) == 0 {
			t.Fatalf("protocol.md:%d: table %q has no rows", i+1, m[1])
		}
		out[m[1]] = rows
	}
	return out
}

func splitRow(s string) []string {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '|':
			cur.WriteByte('|')
			i++
		case s[i] == '|':
			cells = append(cells, clean(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	return append(cells, clean(cur.String()))
}

func clean(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "`", "")) }

func table(t *testing.T, name string) []row {
	t.Helper()
	rows, ok := tables(t)[name]
	if !ok {
		t.Fatalf("docs/protocol.md has no table %q", name)
	}
	return rows
}

func num(t *testing.T, r row, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("protocol.md:%d: %q is not a number", r.line, s)
	}
	return v
}

// TestConstants: every constant the document names has its value.
func TestConstants(t *testing.T) {
	want := map[string]uint64{
		"ctlmsg.Version":          ctlmsg.Version,
		"abi.SegmentVersion":      uint64(abi.SegmentVersion),
		"abi.SegmentMagic":        uint64(abi.SegmentMagic),
		"abi.SegmentHeaderSize":   abi.SegmentHeaderSize,
		"abi.SegmentArmOff":       abi.SegmentArmOff,
		"abi.SegmentSummaryOff":   abi.SegmentSummaryOff,
		"abi.SummaryOn":           abi.SummaryOn,
		"abi.SummaryWordBits":     abi.SummaryWordBits,
		"abi.RingHeaderSize":      abi.RingHeaderSize,
		"abi.CommandSize":         abi.CommandSize,
		"abi.CompletionSize":      abi.CompletionSize,
		"abi.MaxOpBytes":          abi.MaxOpBytes,
		"ctlmsg.KeySize":          ctlmsg.KeySize,
		"ctlmsg.MaxRequestBytes":  ctlmsg.MaxRequestBytes,
		"ctlmsg.MaxResponseBytes": ctlmsg.MaxResponseBytes,
		"ctlmsg.MaxNameBytes":     ctlmsg.MaxNameBytes,
		"ctlmsg.MaxAllocSlots":    ctlmsg.MaxAllocSlots,
		"ctlmsg.MaxRingCap":       ctlmsg.MaxRingCap,
		"ctlmsg.MaxRegionBytes":   ctlmsg.MaxRegionBytes,
		"ctlmsg.MaxCores":         ctlmsg.MaxCores,
	}
	seen := map[string]bool{}
	for _, r := range table(t, "constants") {
		w, ok := want[r.cells[0]]
		if !ok {
			t.Errorf("protocol.md:%d: %s is not a constant this test knows", r.line, r.cells[0])
			continue
		}
		seen[r.cells[0]] = true
		if got := num(t, r, r.cells[1]); got != w {
			t.Errorf("protocol.md:%d: %s = %d, the code says %d", r.line, r.cells[0], got, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("protocol.md's constants table leaves out %s", name)
		}
	}
	if !strings.Contains(string(readFile(t, "docs/protocol.md")), "`"+ctlmsg.DefaultSocket+"`") {
		t.Errorf("protocol.md does not name the default socket %s", ctlmsg.DefaultSocket)
	}
}

// checkLayout checks a layout table (offset, size, field, ...) against
// buf, bytes the code encoded from distinct values: each documented field
// holds its value (little-endian; 16-byte fields compared as bytes),
// reserved fields hold zeros, fields do not overlap and fit in size, every
// byte the code wrote non-zero lies in a documented field, and every
// field of want is documented.
func checkLayout(t *testing.T, name string, buf []byte, size int, want map[string][]byte) {
	t.Helper()
	covered := make([]bool, size)
	seen := map[string]bool{}
	for _, r := range table(t, name) {
		off, n, field := int(num(t, r, r.cells[0])), int(num(t, r, r.cells[1])), r.cells[2]
		if off+n > size {
			t.Errorf("protocol.md:%d: %s at %d+%d beyond %d bytes", r.line, field, off, n, size)
			continue
		}
		for i := off; i < off+n; i++ {
			if covered[i] {
				t.Errorf("protocol.md:%d: %s overlaps byte %d", r.line, field, i)
			}
			covered[i] = true
		}
		got := buf[off : off+n]
		if field == "reserved" {
			if !bytes.Equal(got, make([]byte, n)) {
				t.Errorf("protocol.md:%d: reserved bytes %d..%d hold %x", r.line, off, off+n, got)
			}
			continue
		}
		w, ok := want[field]
		if !ok {
			t.Errorf("protocol.md:%d: %s has no field %s", r.line, name, field)
			continue
		}
		seen[field] = true
		if !bytes.Equal(got, w) {
			t.Errorf("protocol.md:%d: %s.%s at %d (%d B) holds %x, the code wrote %x there", r.line, name, field, off, n, got, w)
		}
	}
	for i := 0; i < len(buf) && i < size; i++ {
		if buf[i] != 0 && !covered[i] {
			t.Errorf("%s: byte %d is written by the code but in no documented field", name, i)
		}
	}
	for f := range want {
		if !seen[f] {
			t.Errorf("protocol.md's %s table leaves out %s", name, f)
		}
	}
}

func le(v uint64, n int) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, v)
	return b[:n]
}

func TestSegmentHeader(t *testing.T) {
	l := abi.Layout{Size: 0x0102030405060708, CmdOff: 0x11121314, CmdCap: 0x21222324, CplOff: 0x31323334, CplCap: 0x41424344, Portal: 0x51525354}
	buf := make([]byte, abi.SegmentHeaderSize)
	l.Encode(buf)
	checkLayout(t, "segment-header", buf, abi.SegmentHeaderSize, map[string][]byte{
		"magic": le(uint64(abi.SegmentMagic), 4), "version": le(uint64(abi.SegmentVersion), 2),
		"size": le(l.Size, 8), "cmd_off": le(uint64(l.CmdOff), 4), "cmd_cap": le(uint64(l.CmdCap), 4),
		"cpl_off": le(uint64(l.CplOff), 4), "cpl_cap": le(uint64(l.CplCap), 4), "portal": le(uint64(l.Portal), 4),
	})
	// The formulas the table states are abi.NewLayout's.
	for _, caps := range [][2]uint32{{2, 2}, {256, 1024}, {64, 8}, {65536, 65536}} {
		nl, err := abi.NewLayout(0, caps[0], caps[1])
		if err != nil {
			t.Fatal(err)
		}
		align := func(v uint32) uint32 { return (v + 63) &^ 63 }
		cpl := align(128 + 128 + caps[0]*64)
		if nl.CmdOff != 128 || nl.CplOff != cpl || nl.Size != uint64(align(cpl+128+caps[1]*32)) {
			t.Errorf("abi.NewLayout(%v) = %+v, not protocol.md's formulas", caps, nl)
		}
	}
}

func TestCommandAndCompletion(t *testing.T) {
	c := abi.Command{Op: 0x02, Flags: 0x5a, Slot: 0x01020304, Cookie: 0x1122334455667788, RemoteAddr: 0x0a620001,
		RemoteRegion: 0x00020003, RemoteOffset: 0x0102030405060708, LocalRegion: 0x00050006, Length: 0x1000,
		LocalOffset: 0x1112131415161718}
	for i := range c.Key {
		c.Key[i] = byte(i + 1)
	}
	buf := make([]byte, abi.CommandSize)
	c.Encode(buf)
	checkLayout(t, "command", buf, abi.CommandSize, map[string][]byte{
		"op": {byte(c.Op)}, "flags": {c.Flags}, "slot": le(uint64(c.Slot), 4), "cookie": le(c.Cookie, 8),
		"remote_addr": le(uint64(c.RemoteAddr), 4), "remote_region": le(uint64(c.RemoteRegion), 4),
		"remote_offset": le(c.RemoteOffset, 8), "local_region": le(uint64(c.LocalRegion), 4),
		"length": le(uint64(c.Length), 4), "local_offset": le(c.LocalOffset, 8), "key": c.Key[:],
	})
	l := abi.Command{Op: abi.OpLookup, Flags: abi.FlagLookupBucket, Slot: 0x01020304, Cookie: 0x1122334455667788, RemoteAddr: 0x0a620001,
		RemoteRegion: 0x00020003, RemoteOffset: 0x05060708, Tag: 0x2122232425262728, LocalRegion: 0x00050006, Length: 0x0fed,
		LocalOffset: 0x1112131415161718, Key: c.Key}
	l.Encode(buf)
	checkLayout(t, "lookup-command", buf, abi.CommandSize, map[string][]byte{
		"op": {byte(l.Op)}, "flags": {l.Flags}, "length": le(uint64(l.Length), 2), "slot": le(uint64(l.Slot), 4), "cookie": le(l.Cookie, 8),
		"remote_addr": le(uint64(l.RemoteAddr), 4), "remote_region": le(uint64(l.RemoteRegion), 4),
		"tag": le(l.Tag, 8), "local_region": le(uint64(l.LocalRegion), 4),
		"bucket_offset": le(l.RemoteOffset, 4), "local_offset": le(l.LocalOffset, 8), "key": l.Key[:],
	})
	cp := abi.Completion{Cookie: 0x1122334455667788, Slot: 0x01020304, Status: abi.StatusRemoteBounds, Op: abi.OpRekey,
		IssueDelayNs: 0x21222324, TotalDelayNs: 0x31323334, Length: 0x41424344}
	buf = make([]byte, abi.CompletionSize)
	cp.Encode(buf)
	checkLayout(t, "completion", buf, abi.CompletionSize, map[string][]byte{
		"cookie": le(cp.Cookie, 8), "slot": le(uint64(cp.Slot), 4), "status": {byte(cp.Status)}, "op": {byte(cp.Op)},
		"issue_delay_ns": le(uint64(cp.IssueDelayNs), 4), "total_delay_ns": le(uint64(cp.TotalDelayNs), 4),
		"length": le(uint64(cp.Length), 4),
	})
}

// aligned64 returns n zeroed bytes at a 64-byte aligned address, as rings
// need.
func aligned64(n int) []byte {
	b := make([]byte, n+64)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))%64)) % 64
	return b[off : off+n : off+n]
}

// TestRingHeader: where a producer publishes and a consumer releases, and
// where the entries start.
func TestRingHeader(t *testing.T) {
	at := map[string]int{}
	for _, r := range table(t, "ring-header") {
		at[r.cells[2]] = int(num(t, r, r.cells[0]))
	}
	if len(at) != 3 {
		t.Fatalf("ring-header table: %v, want producer index, consumer index, entries", at)
	}
	if at["entries"] != abi.RingHeaderSize {
		t.Errorf("entries at %d, abi.RingHeaderSize is %d", at["entries"], abi.RingHeaderSize)
	}
	mem := aligned64(abi.RingBytes(2, abi.CommandSize))
	p, err := abi.NewProducer(mem, 2, abi.CommandSize)
	if err != nil {
		t.Fatal(err)
	}
	e := p.Reserve()
	if &e[0] != &mem[at["entries"]] {
		t.Errorf("the first entry is not at offset %d", at["entries"])
	}
	p.Commit()
	p.Publish()
	if got := binary.LittleEndian.Uint32(mem[at["producer index"]:]); got != 1 {
		t.Errorf("after publishing one entry the producer index at %d is %d", at["producer index"], got)
	}
	c, err := abi.NewConsumer(mem, 2, abi.CommandSize)
	if err != nil {
		t.Fatal(err)
	}
	if c.Peek() == nil {
		t.Fatal("the consumer does not see the published entry")
	}
	c.Advance()
	c.Release()
	if got := binary.LittleEndian.Uint32(mem[at["consumer index"]:]); got != 1 {
		t.Errorf("after releasing one entry the consumer index at %d is %d", at["consumer index"], got)
	}
}

// TestStatusOpPerm: the tables of statuses, ops and permission bits are
// abi's, all of them.
func TestStatusOpPerm(t *testing.T) {
	docStatus := map[abi.Status]string{}
	for _, r := range table(t, "status") {
		v := abi.Status(num(t, r, r.cells[0]))
		docStatus[v] = r.cells[1]
		if v.String() != r.cells[1] {
			t.Errorf("protocol.md:%d: status %d is %s, abi says %s", r.line, v, r.cells[1], v)
		}
	}
	for v := abi.Status(0); v < abi.NumStatus; v++ {
		if !strings.HasPrefix(v.String(), "STATUS_") && docStatus[v] == "" {
			t.Errorf("protocol.md's status table leaves out %d %s", v, v)
		}
	}
	docOp := map[abi.Op]bool{}
	for _, r := range table(t, "op") {
		v := abi.Op(num(t, r, r.cells[0]))
		docOp[v] = true
		if v.String() != r.cells[1] {
			t.Errorf("protocol.md:%d: op %d is %s, abi says %s", r.line, v, r.cells[1], v)
		}
	}
	for v := 0; v < 256; v++ {
		if o := abi.Op(v); !strings.HasPrefix(o.String(), "OP_") && !docOp[o] {
			t.Errorf("protocol.md's op table leaves out %d %s", v, o)
		}
	}
	perms := map[string]abi.Perm{"LOCAL_READ": abi.PermLocalRead, "LOCAL_WRITE": abi.PermLocalWrite,
		"REMOTE_READ": abi.PermRemoteRead, "REMOTE_WRITE": abi.PermRemoteWrite, "REMOTE_REKEY": abi.PermRemoteRekey,
		"REMOTE_LOOKUP": abi.PermRemoteLookup}
	var all abi.Perm
	for _, r := range table(t, "perm") {
		bit, val := num(t, r, r.cells[0]), num(t, r, r.cells[1])
		name, _, _ := strings.Cut(r.cells[2], ":")
		p, ok := perms[name]
		if !ok || uint64(p) != val || val != 1<<bit {
			t.Errorf("protocol.md:%d: permission %s bit %d value %d; abi's is %d", r.line, name, bit, val, p)
		}
		all |= abi.Perm(val)
	}
	if all != abi.PermAny {
		t.Errorf("the perm table's bits make %#x, abi.PermAny is %#x", all, abi.PermAny)
	}
}

// constStrings returns the string values of the constants of type typ
// declared in ctlmsg's source file.
func constStrings(t *testing.T, file, typ string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root(t), "ctlmsg", file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, _ := strconv.Unquote(lit.Value)
				out[s] = true
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("no constants of type %s in ctlmsg/%s", typ, file)
	}
	return out
}

func sameSet(t *testing.T, what string, doc, code map[string]bool) {
	t.Helper()
	for k := range doc {
		if !code[k] {
			t.Errorf("%s: protocol.md has %q, the code does not", what, k)
		}
	}
	for k := range code {
		if !doc[k] {
			t.Errorf("%s: the code has %q, protocol.md does not", what, k)
		}
	}
}

// sample holds a valid JSON value for every request key.
var sample = map[string]string{
	"name": `"app"`, "cmd_cap": "256", "cpl_cap": "1024", "class": `"low"`, "core": "0", "n": "8",
	"size": "4096", "memory": "1", "perm": "7", "region": "65537", "key": `"00112233445566778899aabbccddeeff"`,
	"layout": "[256,32,0,8,8,8,0,16,4,0]", "count": "16", "period_us": "50",
}

func keyList(s string) []string {
	var out []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

func request(op string, keys map[string]string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"v":1,"id":3,"op":%q`, op)
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(&b, `,%q:%s`, k, keys[k])
	}
	b.WriteString("}")
	return []byte(b.String())
}

// TestRequests: the ops are ctlmsg's; each takes exactly the keys the
// table says (DecodeRequest accepts its required keys, refuses it without
// any one of them, accepts each optional one and refuses every other).
func TestRequests(t *testing.T) {
	keyRows := table(t, "request-keys")
	allKeys := map[string]bool{}
	for _, r := range keyRows {
		allKeys[r.cells[0]] = true
		if _, ok := sample[r.cells[0]]; !ok {
			t.Errorf("protocol.md:%d: key %s unknown to this test", r.line, r.cells[0])
		}
	}
	ops := map[string]bool{}
	used := map[string]bool{}
	for _, r := range table(t, "request-ops") {
		op := r.cells[0]
		ops[op] = true
		required, optional := keyList(r.cells[1]), keyList(r.cells[2])
		base := map[string]string{}
		for _, k := range required {
			base[k] = sample[k]
			used[k] = true
		}
		if _, err := ctlmsg.DecodeRequest(request(op, base)); err != nil {
			t.Errorf("protocol.md:%d: %s with its required keys: %v", r.line, op, err)
		}
		for _, k := range required {
			m := copyMap(base)
			delete(m, k)
			if _, err := ctlmsg.DecodeRequest(request(op, m)); err == nil {
				t.Errorf("protocol.md:%d: %s without %s is accepted: it is not required", r.line, op, k)
			}
		}
		allowed := map[string]bool{}
		for _, k := range append(required, optional...) {
			allowed[k] = true
		}
		for _, k := range optional {
			used[k] = true
			m := copyMap(base)
			m[k] = sample[k]
			if _, err := ctlmsg.DecodeRequest(request(op, m)); err != nil {
				t.Errorf("protocol.md:%d: %s with optional %s: %v", r.line, op, k, err)
			}
		}
		for k := range allKeys {
			if allowed[k] {
				continue
			}
			m := copyMap(base)
			m[k] = sample[k]
			if _, err := ctlmsg.DecodeRequest(request(op, m)); err == nil {
				t.Errorf("protocol.md:%d: %s accepts %s, which the table does not give it", r.line, op, k)
			}
		}
	}
	sameSet(t, "request ops", ops, constStrings(t, "request.go", "Op"))
	sameSet(t, "request keys", allKeys, used)
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

var rangeRE = regexp.MustCompile(`^(\d+)\.\.(\d+)`)

// TestRequestKeyRanges: a numeric key's documented bounds are accepted and
// the values just outside them refused; the string keys' rules hold.
func TestRequestKeyRanges(t *testing.T) {
	opFor := map[string]string{}
	required := map[string][]string{}
	for _, r := range table(t, "request-ops") {
		required[r.cells[0]] = keyList(r.cells[1])
		for _, k := range append(keyList(r.cells[1]), keyList(r.cells[2])...) {
			if _, ok := opFor[k]; !ok {
				opFor[k] = r.cells[0]
			}
		}
	}
	try := func(key, val string) error {
		op := opFor[key]
		m := map[string]string{}
		for _, k := range required[op] {
			m[k] = sample[k]
		}
		m[key] = val
		_, err := ctlmsg.DecodeRequest(request(op, m))
		return err
	}
	for _, r := range table(t, "request-keys") {
		key, typ, rng := r.cells[0], r.cells[1], r.cells[2]
		if typ == "string" && key != "name" || typ == "array" {
			continue // class, key and layout: their rules are checked below
		}
		m := rangeRE.FindStringSubmatch(rng)
		if m == nil {
			t.Errorf("protocol.md:%d: %s has no lo..hi range", r.line, key)
			continue
		}
		lo, hi := num(t, r, m[1]), num(t, r, m[2])
		if typ == "string" { // a name's length
			for n, ok := range map[uint64]bool{lo: true, hi: true, hi + 1: false} {
				if err := try(key, strconv.Quote(strings.Repeat("a", int(n)))); (err == nil) != ok {
					t.Errorf("protocol.md:%d: a name of %d bytes: %v", r.line, n, err)
				}
			}
			continue
		}
		vals := map[uint64]bool{lo: true, hi: true, hi + 1: false}
		if lo > 0 {
			vals[lo-1] = false
		}
		for v, ok := range vals {
			if err := try(key, strconv.FormatUint(v, 10)); (err == nil) != ok {
				t.Errorf("protocol.md:%d: %s = %d: %v (want accepted %v)", r.line, key, v, err, ok)
			}
		}
		if strings.Contains(rng, "power of two") && try(key, strconv.FormatUint(lo+1, 10)) == nil {
			t.Errorf("protocol.md:%d: %s = %d, not a power of two, accepted", r.line, key, lo+1)
		}
	}
	for val, ok := range map[string]bool{`"low"`: true, `"high"`: true, `"medium"`: false, `"LOW"`: false} {
		if err := try("class", val); (err == nil) != ok {
			t.Errorf("class %s: %v", val, err)
		}
	}
	for val, ok := range map[string]bool{
		`"0123456789abcdef0123456789abcdef"`: true, `"0123456789ABCDEF0123456789abcdef"`: false,
		`"0123456789abcdef0123456789abcde"`: false, `"00000000000000000000000000000000"`: false,
	} {
		if err := try("key", val); (err == nil) != ok {
			t.Errorf("key %s: %v", val, err)
		}
	}
	for val, ok := range map[string]bool{
		"[256,32,0,8,8,8,0,16,4,0]": true, "[4096,8,0,1,2,2,32,4,4,4294967295]": true,
		"[256,32,0,8,8,8,0,16,4]": false, "[256,32,0,8,8,8,0,16,4,0,0]": false, "[256,32,0,8,8,8,0,16,4,4294967296]": false,
		"[4097,32,0,8,8,8,0,16,4,0]": false, "[256,32,0,3,8,8,0,16,4,0]": false, "[256,32,0,8,30,8,0,16,4,0]": false,
		"[256,32,0,8,8,8,33,16,4,0]": false,
	} {
		if err := try("layout", val); (err == nil) != ok {
			t.Errorf("layout %s: %v", val, err)
		}
	}
}

// jsonKeys are a struct's JSON keys, embedded structs flattened.
func jsonKeys(typ reflect.Type, out map[string]bool) {
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Anonymous {
			jsonKeys(f.Type, out)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
}

// TestReplyFields: the keys of each response object are ctlmsg's.
func TestReplyFields(t *testing.T) {
	doc := map[string]map[string]bool{}
	for _, r := range table(t, "reply-fields") {
		if doc[r.cells[0]] == nil {
			doc[r.cells[0]] = map[string]bool{}
		}
		doc[r.cells[0]][r.cells[1]] = true
	}
	for obj, typ := range map[string]reflect.Type{
		"response": reflect.TypeOf(ctlmsg.Response{}), "open": reflect.TypeOf(ctlmsg.OpenReply{}),
		"attach": reflect.TypeOf(ctlmsg.AttachReply{}), "memory": reflect.TypeOf(ctlmsg.MemoryReply{}),
		"region": reflect.TypeOf(ctlmsg.RegionReply{}), "identity": reflect.TypeOf(ctlmsg.Identity{}),
		"summary": reflect.TypeOf(ctlmsg.SummaryReply{}),
	} {
		code := map[string]bool{}
		jsonKeys(typ, code)
		sameSet(t, "reply object "+obj, doc[obj], code)
		delete(doc, obj)
	}
	for obj := range doc {
		t.Errorf("protocol.md's reply-fields names object %q, which this test does not know", obj)
	}
}

var cCodeRE = regexp.MustCompile(`\{"([a-z_]+)", (ONERMA_E_[A-Z_]+)\}`)

// TestCodes: the refusal codes are ctlmsg's, and libonerma maps each to the
// error the table names.
func TestCodes(t *testing.T) {
	doc := map[string]string{}
	for _, r := range table(t, "codes") {
		doc[r.cells[0]] = r.cells[3]
	}
	docSet := map[string]bool{}
	for k := range doc {
		docSet[k] = true
	}
	sameSet(t, "refusal codes", docSet, constStrings(t, "response.go", "Code"))
	cmap := map[string]string{}
	for _, m := range cCodeRE.FindAllStringSubmatch(string(readFile(t, "libonerma/src/ctl.c")), -1) {
		cmap[m[1]] = m[2]
	}
	for code, e := range doc {
		if cmap[code] != e {
			t.Errorf("code %s: protocol.md says %s, libonerma/src/ctl.c maps it to %q", code, e, cmap[code])
		}
	}
	if len(cmap) != len(doc) {
		t.Errorf("libonerma maps %d codes, protocol.md has %d", len(cmap), len(doc))
	}
}

// TestKeyDerivationBlock: AES under K_r of the block the table lays out
// is aesni.DeriveKey's K_d.
func TestKeyDerivationBlock(t *testing.T) {
	kr := aesni.Key{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	addr, pid := [4]byte{10, 98, 0, 2}, uint32(0x01020304)
	for _, op := range []uint8{1, 2, 3} {
		var block [16]byte
		seen := 0
		for _, r := range table(t, "kdf-block") {
			off, n := int(num(t, r, r.cells[0])), int(num(t, r, r.cells[1]))
			field, _, _ := strings.Cut(r.cells[2], ":")
			seen += n
			switch {
			case field == "initiator address" && n == 4:
				copy(block[off:], addr[:])
			case field == "identity" && n == 4:
				binary.BigEndian.PutUint32(block[off:], pid)
			case field == "op" && n == 1:
				block[off] = op
			case field == "zero":
			default:
				t.Fatalf("protocol.md:%d: kdf-block field %q of %d bytes", r.line, field, n)
			}
		}
		if seen != 16 {
			t.Fatalf("the kdf-block table covers %d bytes, want 16", seen)
		}
		c, _ := aes.NewCipher(kr[:])
		var got [16]byte
		c.Encrypt(got[:], block[:])
		if want := aesni.DeriveKey(kr, addr, pid, op); got != [16]byte(want) {
			t.Errorf("op %d: AES_Kr(the documented block) = %x, aesni.DeriveKey = %x", op, got, want)
		}
	}
}

var (
	cEnumRE   = regexp.MustCompile(`(?m)^\s*(ONERMA_(?:STATUS|OP|PERM|CLASS)_[A-Z_]+) = ([^,\n]+),?`)
	cDefineRE = regexp.MustCompile(`(?m)^#define (ONERMA_[A-Z_]+|ONR_[A-Z_]+) (.+)$`)
	cOpNameRE = regexp.MustCompile(`\[ONR_OP_[A-Z_]+\] = "([a-z_]+)"`)
)

// cValue evaluates the integer expressions the C headers use: 0x1f,
// 128u, 1 << 4, (1ULL << 40), (64 << 10).
func cValue(s string) (uint64, bool) {
	s = strings.TrimSpace(s)
	if i := strings.Index(s, "/*"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "("), ")")
	if a, b, ok := strings.Cut(s, "<<"); ok {
		x, ok1 := cValue(a)
		y, ok2 := cValue(b)
		return x << y, ok1 && ok2
	}
	s = strings.TrimRight(strings.TrimSpace(s), "uUlL")
	v, err := strconv.ParseUint(s, 0, 64)
	return v, err == nil
}

// TestCHeader: libonerma's public header and its private ABI constants
// hold abi's and ctlmsg's values: every status, op, permission bit and
// class, the versions, limits and layout constants, and the request ops.
func TestCHeader(t *testing.T) {
	hdr := string(readFile(t, "libonerma/include/onerma.h"))
	internal := string(readFile(t, "libonerma/src/internal.h"))
	statuses, ops := 0, 0
	for _, m := range cEnumRE.FindAllStringSubmatch(hdr, -1) {
		v, ok := cValue(m[2])
		if !ok {
			t.Errorf("onerma.h: %s = %s: not a value this test reads", m[1], m[2])
			continue
		}
		name := m[1]
		switch {
		case strings.HasPrefix(name, "ONERMA_STATUS_"):
			statuses++
			if s := abi.Status(v).String(); "ONERMA_STATUS_"+s != name {
				t.Errorf("onerma.h: %s = %d, abi calls %d %s", name, v, v, s)
			}
		case strings.HasPrefix(name, "ONERMA_OP_"):
			ops++
			if s := abi.Op(v).String(); "ONERMA_OP_"+s != name {
				t.Errorf("onerma.h: %s = %d, abi calls %d %s", name, v, v, s)
			}
		case strings.HasPrefix(name, "ONERMA_PERM_"):
			want := map[string]abi.Perm{"LOCAL_READ": abi.PermLocalRead, "LOCAL_WRITE": abi.PermLocalWrite,
				"REMOTE_READ": abi.PermRemoteRead, "REMOTE_WRITE": abi.PermRemoteWrite,
				"REMOTE_REKEY": abi.PermRemoteRekey, "REMOTE_LOOKUP": abi.PermRemoteLookup, "ALL": abi.PermAll,
				"ANY": abi.PermAny}[strings.TrimPrefix(name, "ONERMA_PERM_")]
			if want == 0 || uint64(want) != v {
				t.Errorf("onerma.h: %s = %d, abi's is %d", name, v, want)
			}
		case name == "ONERMA_CLASS_LOW" && v != uint64(abi.ClassLow), name == "ONERMA_CLASS_HIGH" && v != uint64(abi.ClassHigh):
			t.Errorf("onerma.h: %s = %d", name, v)
		}
	}
	named := 0
	for v := abi.Status(0); v < abi.NumStatus; v++ {
		if !strings.HasPrefix(v.String(), "STATUS_") {
			named++
		}
	}
	if statuses != named || ops != 4 {
		t.Errorf("onerma.h has %d statuses and %d ops, abi %d and 4", statuses, ops, named)
	}
	want := map[string]uint64{
		"ONERMA_PROTOCOL_VERSION": ctlmsg.Version, "ONERMA_SEGMENT_VERSION": uint64(abi.SegmentVersion),
		"ONERMA_MAX_OP_BYTES": abi.MaxOpBytes, "ONERMA_KEY_SIZE": ctlmsg.KeySize,
		"ONERMA_MAX_NAME_BYTES": ctlmsg.MaxNameBytes, "ONERMA_MAX_ALLOC_SLOTS": ctlmsg.MaxAllocSlots,
		"ONERMA_MAX_RING_CAP": ctlmsg.MaxRingCap, "ONERMA_MAX_REGION_BYTES": ctlmsg.MaxRegionBytes,
		"ONERMA_MAX_CORES": ctlmsg.MaxCores, "ONERMA_MAX_LOOKUP_REGION_BYTES": abi.MaxLookupRegionBytes, "ONERMA_FLAG_LOOKUP_BUCKET": uint64(abi.FlagLookupBucket),
		"ONR_SEGMENT_MAGIC": uint64(abi.SegmentMagic), "ONR_SEGMENT_HEADER_SIZE": abi.SegmentHeaderSize,
		"ONR_SEGMENT_ARM_OFF": abi.SegmentArmOff, "ONR_RING_HEADER_SIZE": abi.RingHeaderSize,
		"ONR_RING_PROD_OFF": 0, "ONR_RING_CONS_OFF": 64,
		"ONR_COMMAND_SIZE": abi.CommandSize, "ONR_COMPLETION_SIZE": abi.CompletionSize,
		"ONR_MAX_REQUEST_BYTES": ctlmsg.MaxRequestBytes, "ONR_MAX_RESPONSE_BYTES": ctlmsg.MaxResponseBytes,
	}
	got := map[string]uint64{}
	for _, m := range cDefineRE.FindAllStringSubmatch(hdr+"\n"+internal, -1) {
		if v, ok := cValue(m[2]); ok {
			got[m[1]] = v
		}
		if m[1] == "ONERMA_DEFAULT_SOCKET" && strings.TrimSpace(m[2]) != strconv.Quote(ctlmsg.DefaultSocket) {
			t.Errorf("onerma.h: ONERMA_DEFAULT_SOCKET %s, ctlmsg's is %q", m[2], ctlmsg.DefaultSocket)
		}
	}
	for name, w := range want {
		if v, ok := got[name]; !ok || v != w {
			t.Errorf("libonerma: %s = %d (defined %v), the Go side's is %d", name, v, ok, w)
		}
	}
	cops := map[string]bool{}
	for _, m := range cOpNameRE.FindAllStringSubmatch(string(readFile(t, "libonerma/src/ctl.c")), -1) {
		cops[m[1]] = true
	}
	sameSet(t, "libonerma's request ops", cops, constStrings(t, "request.go", "Op"))
}
