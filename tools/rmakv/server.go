package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

// serverFields names the flag that sets each kv.ServerConfig field its
// errors name.
var serverFields = []cli.Field{{Name: "Buckets", Flag: "-buckets"}, {Name: "Ways", Flag: "-ways"},
	{Name: "MaxValue", Flag: "-max-value"}, {Name: "SlabBytes", Flag: "-slab"}}

// serverOptions are rmakv server's flags.
type serverOptions struct {
	socket, creds, listen, kxListen string
	buckets, slab                   uint64
	ways, maxValue                  int
	quiet                           bool
	grants                          permitsFlag
}

func parseServer(args []string, out io.Writer) (*serverOptions, error) {
	fs := newFlags("server", out)
	o := &serverOptions{}
	fs.StringVar(&o.socket, "socket", ctlmsg.DefaultSocket, "engine control socket")
	fs.StringVar(&o.creds, "creds", "", "directory of keyx credentials (server.pem)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "the update RPC's address")
	fs.StringVar(&o.kxListen, "keyx", "", "the key exchange's address (default: -listen's host, any port)")
	fs.Uint64Var(&o.buckets, "buckets", kv.DefaultBuckets, "index buckets (a power of two)")
	fs.IntVar(&o.ways, "ways", kv.DefaultWays, "slots per bucket")
	fs.Uint64Var(&o.slab, "slab", kv.DefaultSlabBytes, "slab region bytes")
	fs.IntVar(&o.maxValue, "max-value", kv.DefaultMaxValue, "largest value accepted")
	fs.Var(&o.grants, "grant", "a client granted the cache, NAME[=OPS][@ADDRS]: OPS read (GETs: K_d, DESCRIBE, STATS) or read+write (and SET, DELETE, hints), default read; ADDRS engine addresses or prefixes joined by +, or any, granted beyond its certificate's; repeat for each client (default: the client of -creds DIR, read+write@any)")
	fs.BoolVar(&o.quiet, "q", false, "log no connection")
	fs.Alias("quiet", "q")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("server: unexpected arguments %q", fs.Args())
	}
	if o.creds == "" {
		return nil, errors.New("server: -creds is required")
	}
	return o, nil
}

func serverCmd(args []string) error {
	o, err := parseServer(args, os.Stderr)
	if err != nil {
		return err
	}
	c, err := keyx.LoadServer(o.creds)
	if err != nil {
		return err
	}
	permits := []keyx.Permit(o.grants)
	if len(permits) == 0 {
		permit, err := keyx.DirPermit(o.creds, keyx.Read|keyx.Write)
		if err != nil {
			return err
		}
		permits = []keyx.Permit{permit}
	}
	cfg := kv.ServerConfig{Socket: o.socket, Name: "rmakv-server", Credentials: c, Permits: permits, Listen: o.listen, KeyxListen: o.kxListen,
		Buckets: o.buckets, Ways: o.ways, SlabBytes: o.slab, MaxValue: o.maxValue}
	if !o.quiet {
		cfg.Logf = logf
	}
	s, err := kv.NewServer(cfg)
	if err != nil {
		return cli.NameFlag(err, serverFields)
	}
	l := s.Layout()
	logf("index %d buckets × %d slots (%d MB, region %#x), slab %d MB (region %#x), values up to %d B",
		l.Buckets, l.Ways, l.IndexBytes>>20, l.IndexRegion, l.SlabBytes>>20, l.SlabRegion, l.MaxValue)
	fmt.Printf("rmakv: serving rpc %s keyx %s engine %s\n", s.Addr(), s.KeyxAddr(), l.Owner)
	logf("permits (-grant): %s", o.grants.describe(permits))
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

// permitsFlag collects repeated -grant values (keyx.ParsePermit).
type permitsFlag []keyx.Permit

func (p *permitsFlag) String() string { return p.describe(*p) }

// describe lists permits as -grant takes them.
func (*permitsFlag) describe(permits []keyx.Permit) string {
	s := make([]string, len(permits))
	for i, pm := range permits {
		s[i] = pm.String()
	}
	return strings.Join(s, " ")
}

func (p *permitsFlag) Set(v string) error {
	pm, err := keyx.ParsePermit(v)
	if err != nil {
		return err
	}
	*p = append(*p, pm)
	return nil
}
