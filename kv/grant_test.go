package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

func anyAddr() []netip.Prefix { return []netip.Prefix{keyx.AnyAddress} }

// TestReadOnlyClientSetRefused: a client whose certificate the server
// grants READ alone reads the cache but is refused SET and DELETE, with a
// refusal naming why, and its access hints change nothing; a client the
// server's permits do not name is refused altogether.
func TestReadOnlyClientSetRefused(t *testing.T) {
	permits := []keyx.Permit{
		{Client: "kv client", Ops: keyx.Read | keyx.Write, Addrs: anyAddr()},
		{Client: "ro", Addrs: anyAddr()},
	}
	var mu sync.Mutex
	var log strings.Builder
	logf := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(&log, format+"\n", args...)
		mu.Unlock()
	}
	logged := func(s string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(log.String(), s) }
	}
	cl := newCluster(t, 1, kv.ServerConfig{Permits: permits, Logf: logf})
	rw := cl.dial(kv.ClientConfig{HintBatch: 1})
	if err := rw.Set([]byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.Get([]byte("k"), nil); err != nil {
		t.Fatal(err)
	}
	// The updater's hits reach the server as hints.
	srv := cl.servers[0]
	waitFor(t, "the updater's hint", func() bool { return srv.Stats().Hints == 1 })

	roCreds, err := cl.ca.IssueClient("ro")
	if err != nil {
		t.Fatal(err)
	}
	ro := cl.dial(kv.ClientConfig{Credentials: roCreds, HintBatch: 1})
	for range 3 {
		if v, err := ro.Get([]byte("k"), nil); err != nil || !bytes.Equal(v, []byte("v1")) {
			t.Fatalf("read-only GET: %q %v", v, err)
		}
	}
	err = ro.Set([]byte("k"), []byte("v2"))
	if !errors.Is(err, kv.ErrNotGranted) || !strings.Contains(err.Error(), `kv: server refused: certificate "ro" may not update (SET): it is granted READ only`) {
		t.Fatalf("read-only SET: %v", err)
	}
	if err := ro.Delete([]byte("k")); !errors.Is(err, kv.ErrNotGranted) || !strings.Contains(err.Error(), `may not update (DELETE)`) {
		t.Fatalf("read-only DELETE: %v", err)
	}
	if err := ro.StartSet([]byte("k2"), []byte("x"), 7); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]error{}
	pollUpdates(t, ro, got, 1)
	if !errors.Is(got[7], kv.ErrNotGranted) {
		t.Fatalf("read-only StartSet: %v", got[7])
	}
	if v, err := rw.Get([]byte("k"), nil); err != nil || !bytes.Equal(v, []byte("v1")) {
		t.Fatalf("after the refused updates: %q %v", v, err)
	}
	if _, ok := srv.Get([]byte("k2")); ok {
		t.Fatal("a refused SET was stored")
	}
	// The refused connection still serves what READ allows.
	if _, err := ro.ServerStats(0); err != nil {
		t.Fatalf("read-only STATS: %v", err)
	}
	// Its three hits' hints were dropped; the updater's next one counts.
	waitFor(t, "the read-only client's hints dropped", logged(`dropping hints: certificate "ro" may not update (HINTS): it is granted READ only`))
	waitFor(t, "the refusal logged", logged(`refused: certificate "ro" may not update (SET)`))
	if _, err := rw.Get([]byte("k"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the updater's second hint", func() bool { return srv.Stats().Hints == 2 })
	if st := srv.Stats(); st.Hints != 2 || st.Sets != 1 || st.Deletes != 0 {
		t.Fatalf("server counted %d hints, %d sets, %d deletes; want 2, 1, 0", st.Hints, st.Sets, st.Deletes)
	}

	// A client of the CA no permit names gets nothing, not even the
	// layout.
	stranger, err := cl.ca.IssueClient("stranger")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Dial(kv.ClientConfig{Socket: cl.eng.Socket, Servers: cl.addrs, Credentials: stranger})
	if !errors.Is(err, kv.ErrNotGranted) || !strings.Contains(err.Error(), `certificate "stranger" is granted nothing by this server`) {
		t.Fatalf("stranger: %v", err)
	}
}

// TestRevokedKVClientRefused: a client the CA revokes is refused by a
// server whose credentials come from the CA's directory: its open update
// connection at its next SET, and a new client with its certificate at
// DESCRIBE, each with a refusal that says so; another client is served.
func TestRevokedKVClientRefused(t *testing.T) {
	ca, err := keyx.NewCA("kv kept", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srvCreds, err := ca.IssueServer("kv server")
	if err != nil {
		t.Fatal(err)
	}
	defCreds, err := ca.IssueClient(keyx.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "creds")
	a, err := keyx.CreateAuthority(dir, "", ca, srvCreds, defCreds, false)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := keyx.LoadServer(dir)
	if err != nil {
		t.Fatal(err)
	}
	permits := []keyx.Permit{{Client: "alice", Ops: keyx.Read | keyx.Write, Addrs: anyAddr()}, {Client: "bob", Ops: keyx.Read | keyx.Write, Addrs: anyAddr()}}
	cl := newClusterCA(t, 1, kv.ServerConfig{Permits: permits}, ca, loaded)
	alice, err := a.IssueClient("alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	bob, err := a.IssueClient("bob", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ac := cl.dial(kv.ClientConfig{Credentials: alice})
	bc := cl.dial(kv.ClientConfig{Credentials: bob})
	if err := ac.Set([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke("alice", nil); err != nil {
		t.Fatal(err)
	}
	err = ac.Set([]byte("a"), []byte("2"))
	if !errors.Is(err, kv.ErrRevoked) || !strings.Contains(err.Error(), `certificate "alice" (serial 0x`+alice.Certificate().SerialNumber.Text(16)+") was revoked by the CA at") {
		t.Fatalf("revoked SET: %v", err)
	}
	if v, ok := cl.servers[0].Get([]byte("a")); !ok || string(v) != "1" {
		t.Fatalf("after the revoked SET: %q %v", v, ok)
	}
	_, err = kv.Dial(kv.ClientConfig{Socket: cl.eng.Socket, Servers: cl.addrs, Credentials: alice})
	if !errors.Is(err, kv.ErrRevoked) {
		t.Fatalf("revoked client's Dial: %v", err)
	}
	if err := bc.Set([]byte("b"), []byte("1")); err != nil {
		t.Fatalf("bob: %v", err)
	}
	// The key exchange refuses alice too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := keyx.Fetch(ctx, cl.servers[0].KeyxAddr().String(), alice,
		keyx.Request{Initiator: cl.servers[0].Identity().Addr, PID: 9, Region: 0x10001, Op: 1})
	if !errors.Is(err, keyx.ErrRevoked) {
		t.Fatalf("revoked K_d fetch: %v %v", g, err)
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("%s: not after 5 s", what)
}
