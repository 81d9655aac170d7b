package keyx_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/onerma/onerma/aesni"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// memRegion stands in for *portal.Region (whose RegisterRegion needs a
// running engine): a region id, size and permissions, and the K_r it
// derives K_d from, as the engine would check them.
type memRegion struct {
	id portal.RegionID
	kr portal.Key
}

func (r *memRegion) ID() portal.RegionID { return r.id }
func (r *memRegion) Size() uint64        { return 1 << 20 }
func (r *memRegion) Perm() portal.Perm   { return portal.PermRemoteRead }
func (r *memRegion) DeriveKey(initiator netip.Addr, pid uint32, op portal.OpType) portal.Key {
	return aesni.DeriveKey(r.kr, initiator.As4(), pid, uint8(op))
}

// An owner serves the K_d of its region; a reader holding client
// credentials from the same CA fetches the K_d of its own identity, again
// after the owner rekeyed, and is refused an op the region does not allow.
func Example() {
	ca, err := keyx.NewCA("example CA", time.Hour)
	if err != nil {
		panic(err)
	}
	ownerCreds, err := ca.IssueServer("owner", "owner.example")
	if err != nil {
		panic(err)
	}
	// The reader's certificate names its engine's address: the one
	// address it may ask K_d for.
	readerCreds, err := ca.IssueClient("reader", netip.MustParseAddr("10.0.0.1"))
	if err != nil {
		panic(err)
	}

	// The owner: with a real engine, Owner is p.Identity().Addr and the
	// region comes from p.RegisterRegion. It grants the reader READ (a
	// Permit that names no ops), on every region it serves.
	region := &memRegion{id: 0x10001, kr: portal.Key{1, 2, 3}}
	srv, err := keyx.NewServer(keyx.Config{Credentials: ownerCreds, Owner: netip.MustParseAddr("10.0.0.2"),
		Permits: []keyx.Permit{{Client: "reader"}}})
	if err != nil {
		panic(err)
	}
	srv.Add(region)
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	// The reader: with a real engine, id is its portal's p.Identity().
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := portal.Identity{Addr: netip.MustParseAddr("10.0.0.1"), PID: 4242}
	c, err := keyx.Dial(ctx, addr.String(), readerCreds)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	g, err := c.Fetch(ctx, keyx.RequestFor(id, region.ID(), portal.OpRead))
	if err != nil {
		panic(err)
	}
	fmt.Println("server certificate:", c.Peer().Subject.CommonName)
	fmt.Println("grant:", g) // never prints the key
	fmt.Println("K_d is the owner's derivation for this reader:", g.Key == region.DeriveKey(id.Addr, id.PID, portal.OpRead))
	// Ops go to g.Owner: p.Submit(&portal.Op{Type: g.Op, Remote: g.Owner, RemoteRegion: g.Region, Key: g.Key, ...}).

	// The owner rekeys (p.Rekey) under Update; ops with the old K_d end
	// REMOTE_AUTHENTICATION_FAILURE, and the reader fetches again.
	srv.Update(func() error { region.kr = portal.Key{4, 5, 6}; return nil })
	g2, err := c.Fetch(ctx, keyx.RequestFor(id, region.ID(), portal.OpRead))
	if err != nil {
		panic(err)
	}
	fmt.Println("new K_d after the rekey:", g2.Key != g.Key && g2.Key == region.DeriveKey(id.Addr, id.PID, portal.OpRead))
	clear(g.Key[:])
	clear(g2.Key[:])

	// A refusal names its reason; the connection stays usable.
	_, err = c.Fetch(ctx, keyx.RequestFor(id, region.ID(), portal.OpWrite))
	fmt.Println(errors.Is(err, keyx.ErrNotGranted), err)
	other := portal.Identity{Addr: netip.MustParseAddr("10.0.0.9"), PID: 4242}
	_, err = c.Fetch(ctx, keyx.RequestFor(other, region.ID(), portal.OpRead))
	fmt.Println(errors.Is(err, keyx.ErrAddress), err)
	// Output:
	// server certificate: owner
	// grant: region 0x10001 (1048576 bytes) on 10.0.0.2, READ K_d
	// K_d is the owner's derivation for this reader: true
	// new K_d after the rekey: true
	// true keyx: owner refused: not granted: certificate "reader" is not granted WRITE on region 0x10001 (granted: READ)
	// true keyx: owner refused: address not granted: initiator 10.0.0.9 is not an address of certificate "reader" (it names 10.0.0.1) nor one the owner granted it
}

// WriteDir stores a server and a client credential (what `rmactl creds
// DIR` does); the owner's host keeps server.pem, each reader's host gets a
// copy of client.pem, and each side loads its own.
func ExampleWriteDir() {
	ca, err := keyx.NewCA("example CA", 7*24*time.Hour)
	if err != nil {
		panic(err)
	}
	srv, err := ca.IssueServer("onerma-server", "hosta.example", "192.0.2.10")
	if err != nil {
		panic(err)
	}
	cli, err := ca.IssueClient("onerma-client")
	if err != nil {
		panic(err)
	}
	tmp, err := os.MkdirTemp("", "keyx-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "creds")
	if err := keyx.WriteDir(dir, srv, cli, false); err != nil {
		panic(err)
	}
	for _, n := range []string{"", keyx.CAFile, keyx.ServerFile, keyx.ClientFile} {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-10s %v\n", filepath.Base(filepath.Join("creds", n)), st.Mode())
	}
	owner, err := keyx.LoadServer(dir)
	if err != nil {
		panic(err)
	}
	reader, err := keyx.LoadClient(dir)
	if err != nil {
		panic(err)
	}
	fmt.Println(owner.Name(), owner.Certificate().DNSNames, owner.Certificate().IPAddresses)
	fmt.Println(reader.Name())
	// Writing again would replace credentials: refused.
	err = keyx.WriteDir(dir, srv, cli, false)
	fmt.Println(err != nil)
	// Output:
	// creds      drwx------
	// ca.pem     -rw-------
	// server.pem -rw-------
	// client.pem -rw-------
	// onerma-server [localhost hosta.example] [127.0.0.1 ::1 192.0.2.10]
	// onerma-client
	// true
}
