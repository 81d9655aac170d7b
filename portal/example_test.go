package portal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

// An application reads 64 bytes of a region with one op. To run on its
// own, the example reads a region it registered itself, served by its own
// engine; a reader on another host does the same with the owner's engine
// address, the owner's region id, and the K_d the owner gave it (see
// Example_keyx).
func Example() {
	sock, _, stop := exampleEngine()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := portal.Dial(sock, "reader") // rmad's socket: portal.DefaultSocket
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	src, err := p.RegisterRegion(4096, portal.PermRemoteRead)
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(src.Bytes(), "hello, 1RMA")
	sink, err := p.RegisterRegion(4096, portal.PermLocalWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.AllocSlots(4); err != nil {
		fmt.Println(err)
		return
	}

	// The region's owner derives the K_d of this reader's identity for
	// READ; between processes, package keyx carries it.
	id := p.Identity()
	kd := src.DeriveKey(id.Addr, id.PID, portal.OpRead)

	s, _ := p.Slot()
	err = p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 1,
		Remote: id.Addr, RemoteRegion: src.ID(), Key: kd,
		Local: sink, Length: 64,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cpl := make([]portal.Completion, 8)
	n, err := p.Wait(ctx, cpl)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range cpl[:n] {
		fmt.Println(c.Op, c.Cookie, c.Status, c.Length)
		p.Release(c.Slot)
	}
	fmt.Printf("%s\n", sink.Bytes()[:11])
	// Output:
	// READ 1 OK 64
	// hello, 1RMA
}

// A WRITE into a remote region, then a READ of it back. The WRITE's
// source and the READ's sink belong to their ops until their completions.
// Ops posted one after the other are independent: to read what a WRITE
// wrote, wait for the WRITE's completion first.
func ExamplePortal_Submit_write() {
	sock, _, stop := exampleEngine()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := portal.Dial(sock, "writer")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	// The remote region (here the same engine's) allows remote WRITE and
	// READ; the local one is the WRITE's source and the READ's sink.
	dst, err := p.RegisterRegion(4096, portal.PermRemoteWrite|portal.PermRemoteRead)
	if err != nil {
		fmt.Println(err)
		return
	}
	local, err := p.RegisterRegion(4096, portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.AllocSlots(4); err != nil {
		fmt.Println(err)
		return
	}
	id := p.Identity()
	cpl := make([]portal.Completion, 1)
	do := func(op *portal.Op) {
		op.Slot, _ = p.Slot()
		if err := p.Submit(op); err != nil {
			fmt.Println(err)
			return
		}
		if _, err := p.Wait(ctx, cpl); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(cpl[0].Op, cpl[0].Status)
		p.Release(cpl[0].Slot)
	}

	n := uint32(copy(local.Bytes(), "written by a WRITE"))
	do(&portal.Op{
		Type:   portal.OpWrite,
		Remote: id.Addr, RemoteRegion: dst.ID(), RemoteOffset: 1024,
		Key:   dst.DeriveKey(id.Addr, id.PID, portal.OpWrite), // a WRITE needs the WRITE K_d
		Local: local, Length: n,
	})
	do(&portal.Op{
		Type:   portal.OpRead,
		Remote: id.Addr, RemoteRegion: dst.ID(), RemoteOffset: 1024,
		Key:   dst.DeriveKey(id.Addr, id.PID, portal.OpRead),
		Local: local, LocalOffset: 2048, Length: n,
	})
	fmt.Printf("remote: %s\n", dst.Bytes()[1024:1024+n])
	fmt.Printf("read back: %s\n", local.Bytes()[2048:2048+n])
	// Output:
	// WRITE OK
	// READ OK
	// remote: written by a WRITE
	// read back: written by a WRITE
}

// An Executor moves transfers of any size: it splits them into ops of at
// most MaxOpBytes, keeps a congestion window of them in flight and retries
// the ones the network or the engines turned away. A failed transfer is
// a *ChunkError matching one sentinel per class of status.
func ExampleExecutor() {
	sock, _, stop := exampleEngine()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := portal.Dial(sock, "mover")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	const size = 256 << 10 // 64 ops of 4 KB each way
	remote, err := p.RegisterRegion(size, portal.PermRemoteRead|portal.PermRemoteWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	src, err := p.RegisterRegion(size, portal.PermLocalRead)
	if err != nil {
		fmt.Println(err)
		return
	}
	sink, err := p.RegisterRegion(size, portal.PermLocalWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 7)
	}
	e, err := portal.NewExecutor(p, portal.ExecutorConfig{}) // takes p's data path until Close
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	id := p.Identity()
	t := portal.Transfer{
		Remote: id.Addr, RemoteRegion: remote.ID(),
		Key:   remote.DeriveKey(id.Addr, id.PID, portal.OpWrite),
		Local: src, Length: size,
	}
	if err := e.Write(ctx, t); err != nil {
		fmt.Println(err)
		return
	}
	t.Key, t.Local = remote.DeriveKey(id.Addr, id.PID, portal.OpRead), sink
	if err := e.Read(ctx, t); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("read back what was written:", bytes.Equal(sink.Bytes(), src.Bytes()))

	t.Key = portal.Key{1} // not the K_d the owner derived
	err = e.Read(ctx, t)
	var ce *portal.ChunkError
	if errors.As(err, &ce) {
		fmt.Println("wrong key:", ce.Status, errors.Is(err, portal.ErrRemoteAuth))
	}
	st := e.Stats()
	fmt.Println("transfers:", st.Transfers, "failed:", st.Failed)
	// Output:
	// read back what was written: true
	// wrong key: REMOTE_AUTHENTICATION_FAILURE true
	// transfers: 3 failed: 1
}

// The owner of a region replaces its key K_r (the local rekey of paper
// §5.2): every K_d derived from the old key stops working at once, and
// readers fetch a K_d of the new one.
func ExamplePortal_Rekey() {
	sock, _, stop := exampleEngine()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := portal.Dial(sock, "owner")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	r, err := p.RegisterRegion(4096, portal.PermRemoteRead|portal.PermLocalWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := p.AllocSlots(1); err != nil {
		fmt.Println(err)
		return
	}
	id := p.Identity()
	cpl := make([]portal.Completion, 1)
	read := func(kd portal.Key) portal.Status {
		s, _ := p.Slot()
		defer p.Release(s)
		err := p.Submit(&portal.Op{
			Type: portal.OpRead, Slot: s,
			Remote: id.Addr, RemoteRegion: r.ID(), Key: kd,
			Local: r, LocalOffset: 2048, Length: 64,
		})
		if err == nil {
			_, err = p.Wait(ctx, cpl)
		}
		if err != nil {
			fmt.Println(err)
			return 0
		}
		return cpl[0].Status
	}

	old := r.DeriveKey(id.Addr, id.PID, portal.OpRead)
	fmt.Println("before:", read(old))
	if err := p.Rekey(r, portal.Key{0x6e, 0x65, 0x77}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("old K_d:", read(old))
	fmt.Println("new K_d:", read(r.DeriveKey(id.Addr, id.PID, portal.OpRead)))
	// Output:
	// before: OK
	// old K_d: REMOTE_AUTHENTICATION_FAILURE
	// new K_d: OK
}

// A reader fetches the K_d of a region from its owner over package keyx
// (mutually authenticated TLS 1.3; here over loopback) and reads with it.
// The grant says where to send the ops (Grant.Owner) and which region.
func Example_keyx() {
	sock, _, stop := exampleEngine()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serverCreds, clientCreds, err := keyx.NewPair("example", time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}

	// The owner: a region, and a key server that hands out K_d of it.
	owner, err := portal.Dial(sock, "owner")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer owner.Close()
	r, err := owner.RegisterRegion(4096, portal.PermRemoteRead)
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(r.Bytes(), "served under K_r")
	// The owner grants the reader's certificate READ (a Permit naming no
	// ops) for the engine's address: owner and reader share it here.
	// A certificate that names its engine's addresses
	// (CA.IssueClient) needs no Addrs.
	srv, err := keyx.NewServer(keyx.Config{Credentials: serverCreds, Owner: owner.Identity().Addr,
		Permits: []keyx.Permit{{Client: clientCreds.Name(), Addrs: []netip.Prefix{netip.PrefixFrom(owner.Identity().Addr, 32)}}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv.Add(r)
	addr, err := srv.Start("127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	// The reader: its own portal, told the owner's address and region id.
	p, err := portal.Dial(sock, "reader")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	sink, err := p.RegisterRegion(4096, portal.PermLocalWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	slots, err := p.AllocSlots(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := keyx.Fetch(ctx, addr.String(), clientCreds, keyx.RequestFor(p.Identity(), r.ID(), portal.OpRead))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer clear(g.Key[:])
	fmt.Println("grant:", g.Op, g.Bytes, "bytes") // a Grant never prints its key
	err = p.Submit(&portal.Op{
		Type: g.Op, Slot: slots[0],
		Remote: g.Owner, RemoteRegion: g.Region, Key: g.Key,
		Local: sink, Length: 16,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cpl := make([]portal.Completion, 1)
	if _, err := p.Wait(ctx, cpl); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cpl[0].Status)
	fmt.Printf("%s\n", sink.Bytes()[:16])
	// Output:
	// grant: READ 4096 bytes
	// OK
	// served under K_r
}
