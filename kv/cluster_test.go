package kv_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/onerma/onerma/engine"
	"github.com/onerma/onerma/internal/enginetest"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

// cluster is n cache servers and their clients on one in-process engine
// (every READ goes through the engine's own loop: frames to itself).
type cluster struct {
	t       testing.TB
	eng     *enginetest.Engine
	servers []*kv.Server
	addrs   []kv.ServerAddr
	client  *keyx.Credentials
	served  chan error
}

func newCluster(t testing.TB, n int, scfg kv.ServerConfig) *cluster {
	t.Helper()
	eng := enginetest.Start(t, enginetest.Opts{Engine: func(c *engine.Config) {
		c.Slots, c.Regions, c.Portals = 1024, 64, 16
	}})
	screds, ccreds, err := keyx.NewPair("kv", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{t: t, eng: eng, client: ccreds, served: make(chan error, n)}
	for range n {
		cfg := scfg
		cfg.Socket, cfg.Credentials = eng.Socket, screds
		if cfg.Permits == nil {
			cfg.Permits = []keyx.Permit{{Client: ccreds.Name(), Ops: keyx.Read | keyx.Write, Addrs: []netip.Prefix{keyx.AnyAddress}}}
		}
		if cfg.Buckets == 0 {
			cfg.Buckets = 1 << 10
		}
		if cfg.SlabBytes == 0 {
			cfg.SlabBytes = 4 << 20
		}
		s, err := kv.NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		go func() { cl.served <- s.Serve() }()
		t.Cleanup(func() { s.Close() })
		cl.servers = append(cl.servers, s)
		cl.addrs = append(cl.addrs, kv.ServerAddr{RPC: s.Addr().String()})
	}
	return cl
}

// dial opens a client of every server with cfg's other settings.
func (cl *cluster) dial(cfg kv.ClientConfig) *kv.Client {
	cl.t.Helper()
	cfg.Socket, cfg.Servers, cfg.Credentials = cl.eng.Socket, cl.addrs, cl.client
	c, err := kv.Dial(cfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() { c.Close() })
	return c
}
