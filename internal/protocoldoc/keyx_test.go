package protocoldoc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// The key exchange's tables against package keyx: its constants (read
// from its source, where they are unexported), its files, its codes and
// their names, and the request, grant and refusal layouts checked on the
// bytes keyx's own client and server put on a TLS connection on loopback;
// and libonerma's keyx.c and internal.h against the same.

// keyxConsts evaluates the untyped integer constants of keyx's source
// files named: literals, other constants, and sums of them.
func keyxConsts(t *testing.T, files ...string) map[string]uint64 {
	t.Helper()
	exprs := map[string]ast.Expr{}
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root(t), "keyx", f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			gd, ok := n.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				return true
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						exprs[name.Name] = vs.Values[i]
					}
				}
			}
			return false
		})
	}
	var eval func(e ast.Expr) (uint64, bool)
	eval = func(e ast.Expr) (uint64, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.INT {
				return 0, false
			}
			v, err := strconv.ParseUint(e.Value, 0, 64)
			return v, err == nil
		case *ast.Ident:
			if x, ok := exprs[e.Name]; ok {
				return eval(x)
			}
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.BinaryExpr:
			x, ok1 := eval(e.X)
			y, ok2 := eval(e.Y)
			if e.Op == token.ADD && ok1 && ok2 {
				return x + y, true
			}
		}
		return 0, false
	}
	out := map[string]uint64{}
	for name, e := range exprs {
		if v, ok := eval(e); ok {
			out[name] = v
		}
	}
	return out
}

// TestKeyxConstants: the keyx-constants table holds keyx's values, and
// libonerma's ONR_KX_* the same.
func TestKeyxConstants(t *testing.T) {
	src := keyxConsts(t, "proto.go", "creds.go")
	cName := map[string]string{
		"keyx.Version": "ONR_KX_VERSION", "keyx.requestLen": "ONR_KX_REQUEST_LEN", "keyx.grantLen": "ONR_KX_GRANT_LEN",
		"keyx.maxMsgLen": "ONR_KX_MAX_MSG", "keyx.maxFrameLen": "ONR_KX_MAX_FRAME", "keyx.maxBundle": "ONR_KX_MAX_BUNDLE",
	}
	cgot := map[string]uint64{}
	for _, m := range cDefineRE.FindAllStringSubmatch(string(readFile(t, "libonerma/src/internal.h")), -1) {
		if v, ok := cValue(m[2]); ok {
			cgot[m[1]] = v
		} else if a, b, ok := strings.Cut(strings.Trim(strings.TrimSpace(strings.Split(m[2], "/*")[0]), "()"), "+"); ok {
			x, ok1 := cValue(a)
			y, ok2 := cValue(b)
			if ok1 && ok2 {
				cgot[m[1]] = x + y
			}
		}
	}
	seen := map[string]bool{}
	for _, r := range table(t, "keyx-constants") {
		name := r.cells[0]
		w, ok := src[strings.TrimPrefix(name, "keyx.")]
		if !ok {
			t.Errorf("protocol.md:%d: %s is not a constant of keyx's proto.go or creds.go", r.line, name)
			continue
		}
		seen[name] = true
		if got := num(t, r, r.cells[1]); got != w {
			t.Errorf("protocol.md:%d: %s = %d, the code says %d", r.line, name, got, w)
		}
		if c := cName[name]; c == "" {
			t.Errorf("protocol.md:%d: %s has no libonerma counterpart this test knows", r.line, name)
		} else if cgot[c] != w {
			t.Errorf("libonerma: %s = %d, keyx's %s is %d", c, cgot[c], name, w)
		}
	}
	if keyx.Version != src["Version"] {
		t.Errorf("keyx.Version %d, its source says %d", keyx.Version, src["Version"])
	}
	for name := range cName {
		if !seen[name] {
			t.Errorf("protocol.md's keyx-constants table leaves out %s", name)
		}
	}
}

// TestKeyxFiles: the credentials files are keyx's, and libonerma reads
// the client's under keyx's name.
func TestKeyxFiles(t *testing.T) {
	doc := map[string]bool{}
	for _, r := range table(t, "keyx-files") {
		doc[r.cells[0]] = true
	}
	sameSet(t, "keyx files", doc, map[string]bool{keyx.CAFile: true, keyx.ServerFile: true, keyx.ClientFile: true, keyx.RevocationFile: true})
	if !strings.Contains(string(readFile(t, "libonerma/src/internal.h")), `#define ONR_KX_CLIENT_FILE "`+keyx.ClientFile+`"`) {
		t.Errorf("libonerma's ONR_KX_CLIENT_FILE is not %q", keyx.ClientFile)
	}
}

var cKxCodeRE = regexp.MustCompile(`\{(\d+), (ONERMA_E_KX_[A-Z_]+), "([^"]+)"\}`)

// TestKeyxCodes: the refusal codes are keyx's, named as Code.String names
// them, every one keyx names is documented, and libonerma maps each to
// the error the table names, an error onerma.h declares.
func TestKeyxCodes(t *testing.T) {
	doc := map[uint64]string{}
	for _, r := range table(t, "keyx-codes") {
		c := num(t, r, r.cells[0])
		doc[c] = r.cells[2]
		if got := keyx.Code(c).String(); got != r.cells[1] {
			t.Errorf("protocol.md:%d: code %d is %q, keyx calls it %q", r.line, c, r.cells[1], got)
		}
	}
	for c := 1; c < 256; c++ {
		if s := keyx.Code(c).String(); !strings.HasPrefix(s, "code ") && doc[uint64(c)] == "" {
			t.Errorf("protocol.md's keyx-codes table leaves out %d %s", c, s)
		}
	}
	hdr := string(readFile(t, "libonerma/include/onerma.h"))
	cmap := map[uint64]string{}
	for _, m := range cKxCodeRE.FindAllStringSubmatch(string(readFile(t, "libonerma/src/keyx.c")), -1) {
		c, _ := strconv.ParseUint(m[1], 10, 8)
		cmap[c] = m[2]
		if got := keyx.Code(c).String(); got != m[3] {
			t.Errorf("libonerma/src/keyx.c: code %d named %q, keyx calls it %q", c, m[3], got)
		}
	}
	for c, e := range doc {
		if cmap[c] != e {
			t.Errorf("keyx code %d: protocol.md says %s, libonerma/src/keyx.c maps it to %q", c, e, cmap[c])
		}
		if !regexp.MustCompile(`(?m)^\s*` + e + `,`).MatchString(hdr) {
			t.Errorf("onerma.h does not declare %s", e)
		}
	}
	if len(cmap) != len(doc) {
		t.Errorf("libonerma maps %d keyx codes, protocol.md has %d", len(cmap), len(doc))
	}
}

func be(v uint64, n int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b[8-n:]
}

// frame reads one frame: the body its big-endian u16 length announces.
func frame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		t.Fatalf("frame length: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("frame body: %v", err)
	}
	return body
}

// TestKeyxRequest: the request keyx's client (Conn.Fetch) sends, read by a
// bare TLS server, is the keyx-request table's.
func TestKeyxRequest(t *testing.T) {
	srvCreds, cliCreds, err := keyx.NewPair("protocoldoc", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := srvCreds.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			got <- nil
			return
		}
		body := make([]byte, binary.BigEndian.Uint16(l[:]))
		io.ReadFull(c, body)
		got <- body
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := keyx.Dial(ctx, ln.Addr().String(), cliCreds)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := keyx.Request{Initiator: netip.AddrFrom4([4]byte{10, 98, 0, 2}), PID: 0x01020304, Region: 0x00050006, Op: portal.OpWrite}
	c.Fetch(ctx, req) // no reply comes: only the bytes sent matter
	body := <-got
	if len(body) != int(keyxConsts(t, "proto.go")["requestLen"]) {
		t.Fatalf("the request body is %d bytes: %x", len(body), body)
	}
	checkLayout(t, "keyx-request", body, len(body), map[string][]byte{
		"version": {keyx.Version}, "op": {byte(req.Op)}, "initiator": {10, 98, 0, 2},
		"pid": be(uint64(req.PID), 4), "region": be(uint64(req.Region), 4),
	})
}

// region is a keyx.Region of known size and K_d.
type region struct{}

var kd = portal.Key{0xf0, 0xe1, 0xd2, 0xc3, 0xb4, 0xa5, 0x96, 0x87, 0x78, 0x69, 0x5a, 0x4b, 0x3c, 0x2d, 0x1e, 0x0f}

func (region) ID() portal.RegionID { return 0x00050006 }
func (region) Size() uint64        { return 0x0102030405060708 }
func (region) Perm() portal.Perm   { return portal.PermRemoteRead | portal.PermRemoteWrite }
func (region) DeriveKey(netip.Addr, uint32, portal.OpType) portal.Key {
	return kd
}

// TestKeyxGrantAndRefusal: a request laid out by the keyx-request table is
// what keyx's Server parses, and its grant and its refusal are laid out as
// the keyx-grant and keyx-refusal tables say.
func TestKeyxGrantAndRefusal(t *testing.T) {
	srvCreds, cliCreds, err := keyx.NewPair("protocoldoc", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	owner := netip.AddrFrom4([4]byte{10, 98, 0, 1})
	parsed := make(chan keyx.Request, 4)
	srv, err := keyx.NewServer(keyx.Config{Credentials: srvCreds, Owner: owner,
		Permits: []keyx.Permit{{Client: cliCreds.Name(), Ops: keyx.Read | keyx.Write, Addrs: []netip.Prefix{keyx.AnyAddress}}},
		Authorize: func(_ *x509.Certificate, req keyx.Request) error {
			parsed <- req
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Add(region{})
	ap, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cfg, err := cliCreds.ClientTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ap.String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))

	// The request, by the table.
	request := func(op byte, regionID uint32) []byte {
		vals := map[string][]byte{"version": {keyx.Version}, "op": {op}, "initiator": {10, 98, 0, 2},
			"pid": be(0x01020304, 4), "region": be(uint64(regionID), 4)}
		var b []byte
		for _, r := range table(t, "keyx-request") {
			off, n := int(num(t, r, r.cells[0])), int(num(t, r, r.cells[1]))
			for len(b) < off+n {
				b = append(b, 0)
			}
			if r.cells[2] != "reserved" {
				copy(b[off:off+n], vals[r.cells[2]])
			}
		}
		return append(be(uint64(len(b)), 2), b...)
	}
	if _, err := conn.Write(request(byte(portal.OpWrite), 0x00050006)); err != nil {
		t.Fatal(err)
	}
	grant := frame(t, conn)
	select {
	case req := <-parsed:
		want := keyx.Request{Initiator: netip.AddrFrom4([4]byte{10, 98, 0, 2}), PID: 0x01020304, Region: 0x00050006, Op: portal.OpWrite}
		if req != want {
			t.Errorf("keyx's Server parsed the documented request as %+v, want %+v", req, want)
		}
	default:
		t.Errorf("keyx's Server did not accept the documented request; it answered %x", grant)
	}
	if len(grant) != int(keyxConsts(t, "proto.go")["grantLen"]) {
		t.Fatalf("grant of %d bytes: %x", len(grant), grant)
	}
	checkLayout(t, "keyx-grant", grant, len(grant), map[string][]byte{
		"version": {keyx.Version}, "code": {0}, "region": be(0x00050006, 4), "op": {byte(portal.OpWrite)},
		"owner": {10, 98, 0, 1}, "size": be(region{}.Size(), 8), "kd": kd[:],
	})

	// A refusal: the region is not served.
	if _, err := conn.Write(request(byte(portal.OpRead), 0x00070008)); err != nil {
		t.Fatal(err)
	}
	refusal := frame(t, conn)
	const msg = "region 0x70008 is not served here"
	for _, r := range table(t, "keyx-refusal") {
		off := int(num(t, r, r.cells[0]))
		switch r.cells[2] {
		case "version", "code", "reserved":
			n := int(num(t, r, r.cells[1]))
			want := map[string][]byte{"version": {keyx.Version}, "code": {byte(keyx.CodeUnknownRegion)}, "reserved": make([]byte, n)}[r.cells[2]]
			if off+n > len(refusal) || string(refusal[off:off+n]) != string(want) {
				t.Errorf("protocol.md:%d: refusal %s at %d holds %x, want %x", r.line, r.cells[2], off, refusal[off:min(off+n, len(refusal))], want)
			}
		case "message":
			lo, hi, ok := strings.Cut(r.cells[1], "..")
			if !ok || num(t, r, lo) != 1 || num(t, r, hi) != keyxConsts(t, "proto.go")["maxMsgLen"] {
				t.Errorf("protocol.md:%d: message size %q, want 1..maxMsgLen", r.line, r.cells[1])
			}
			if off > len(refusal) || string(refusal[off:]) != msg {
				t.Errorf("protocol.md:%d: refusal message at %d is %q, want %q", r.line, off, refusal[min(off, len(refusal)):], msg)
			}
		default:
			t.Errorf("protocol.md:%d: refusal field %q unknown to this test", r.line, r.cells[2])
		}
	}
}
