package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

func serverCmd(args []string) error {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	socket := fs.String("socket", "/run/onerma/rmad.sock", "engine control socket")
	creds := fs.String("creds", "", "directory of keyx credentials (server.pem)")
	listen := fs.String("listen", "127.0.0.1:0", "the update RPC's address")
	kxListen := fs.String("keyx", "", "the key exchange's address (default: -listen's host, any port)")
	buckets := fs.Uint64("buckets", kv.DefaultBuckets, "index buckets (a power of two)")
	ways := fs.Int("ways", kv.DefaultWays, "slots per bucket")
	slab := fs.Uint64("slab", kv.DefaultSlabBytes, "slab region bytes")
	maxValue := fs.Int("max-value", kv.DefaultMaxValue, "largest value accepted")
	quiet := fs.Bool("quiet", false, "log no connection")
	fs.Parse(args)
	if *creds == "" {
		return errors.New("server: -creds is required")
	}
	c, err := keyx.LoadServer(*creds)
	if err != nil {
		return err
	}
	cfg := kv.ServerConfig{Socket: *socket, Name: "rmakv-server", Credentials: c, Listen: *listen, KeyxListen: *kxListen,
		Buckets: *buckets, Ways: *ways, SlabBytes: *slab, MaxValue: *maxValue}
	if !*quiet {
		cfg.Logf = logf
	}
	s, err := kv.NewServer(cfg)
	if err != nil {
		return err
	}
	l := s.Layout()
	logf("index %d buckets × %d slots (%d MB, region %#x), slab %d MB (region %#x), values up to %d B",
		l.Buckets, l.Ways, l.IndexBytes>>20, l.IndexRegion, l.SlabBytes>>20, l.SlabRegion, l.MaxValue)
	fmt.Printf("rmakv: serving rpc %s keyx %s engine %s\n", s.Addr(), s.KeyxAddr(), l.Owner)
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1)
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	for {
		select {
		case err := <-served:
			s.Close()
			if err != nil {
				return fmt.Errorf("server: %w", err)
			}
			return nil
		case g := <-sig:
			if g == syscall.SIGUSR1 {
				if err := s.Rekey(); err != nil {
					logf("rekey: %v", err)
				} else {
					logf("rekeyed both regions")
				}
				continue
			}
			logf("%v: closing", g)
			return s.Close()
		}
	}
}
