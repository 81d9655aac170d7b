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
	ca      *keyx.CA
	client  *keyx.Credentials
	served  chan error
}

// newCluster starts n servers of scfg, with server credentials of a new
// CA, granting its client "kv client" READ and WRITE unless scfg states
// Permits.
func newCluster(t testing.TB, n int, scfg kv.ServerConfig) *cluster {
	t.Helper()
	ca, err := keyx.NewCA("kv", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	screds, err := ca.IssueServer("kv server")
	if err != nil {
		t.Fatal(err)
	}
	return newClusterCA(t, n, scfg, ca, screds)
}

// newClusterCA is newCluster with the servers' credentials screds of ca.
func newClusterCA(t testing.TB, n int, scfg kv.ServerConfig, ca *keyx.CA, screds *keyx.Credentials) *cluster {
	t.Helper()
	eng := enginetest.Start(t, enginetest.Opts{Engine: func(c *engine.Config) {
		c.Slots, c.Regions, c.Portals = 1024, 64, 16
	}})
	ccreds, err := ca.IssueClient("kv client")
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{t: t, eng: eng, ca: ca, client: ccreds, served: make(chan error, n)}
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

// dial opens a client of every server with cfg's other settings, with
// the cluster's client credentials unless cfg has its own.
func (cl *cluster) dial(cfg kv.ClientConfig) *kv.Client {
	cl.t.Helper()
	cfg.Socket, cfg.Servers = cl.eng.Socket, cl.addrs
	if cfg.Credentials == nil {
		cfg.Credentials = cl.client
	}
	c, err := kv.Dial(cfg)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() { c.Close() })
	return c
}
