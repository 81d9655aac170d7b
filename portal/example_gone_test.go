package portal_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/engine/ctl"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/portal"
)

// An application whose engine restarts: its op in flight ends with
// ENGINE_GONE, Wait then returns ErrEngineGone, and the application opens
// a new portal with Redial, registers its region again under the same key
// with the old contents, and goes on (handing the region's new id to its
// peers).
func ExamplePortal_Redial() {
	sock, restart, stop := exampleEngine()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	p, err := portal.Dial(sock, "kv")
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := p.RegisterRegion(4096, portal.PermAll)
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(r.Bytes(), "state to keep")
	p.AllocSlots(1)
	s, _ := p.Slot()
	remote := netip.MustParseAddr("10.7.0.99") // never answers: the READ is in flight
	if err := p.Submit(&portal.Op{
		Type: portal.OpRead, Slot: s, Cookie: 42,
		Remote: remote, RemoteRegion: 0x10001, Key: portal.Key{1},
		Local: r, LocalOffset: 64, Length: 64,
	}); err != nil {
		fmt.Println(err)
		return
	}

	restart() // the engine dies; a new one starts on the same socket

	cpl := make([]portal.Completion, 16)
	for {
		n, err := p.Wait(ctx, cpl)
		for _, c := range cpl[:n] {
			fmt.Println("op", c.Cookie, c.Status)
			p.Release(c.Slot)
		}
		if errors.Is(err, portal.ErrEngineGone) {
			fmt.Println("engine gone")
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	np, err := p.Redial(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer np.Close()
	nr, err := np.RegisterRegionKey(r.Size(), r.Perm(), r.Key())
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(nr.Bytes(), r.Bytes())
	p.Close() // unmaps the old region
	fmt.Printf("%s\n", nr.Bytes()[:13])
	// Output:
	// op 42 ENGINE_GONE
	// engine gone
	// state to keep
}

// exampleEngine runs an in-process engine on a socket in a temporary
// directory. restart stops it (as rmad shuts down) and starts another on
// the same socket; stop ends the last one.
func exampleEngine() (sock string, restart, stop func()) {
	dir, err := os.MkdirTemp("", "onerma-example-")
	if err != nil {
		panic(err)
	}
	sock = filepath.Join(dir, "rmad.sock")
	opts := enginetest.Opts{
		Engine: func(c *engine.Config) { c.ResolveTimeout = time.Minute },
		Ctl:    func(c *ctl.Config) { c.Sockets[0].Path = sock },
	}
	eng, err := enginetest.New(opts, dir)
	if err != nil {
		panic(err)
	}
	restart = func() {
		eng.Close()
		if eng, err = enginetest.New(opts, dir); err != nil {
			panic(err)
		}
	}
	stop = func() {
		eng.Close()
		os.RemoveAll(dir)
	}
	return sock, restart, stop
}
