// Command rmakv runs OneRMA's key/value cache (package kv): a server that
// owns a shard in regions of its engine, and clients that read it with
// one-sided READs and update it over the servers' RPC.
//
//	rmakv server [-socket PATH] -creds DIR [-listen HOST:PORT] [-keyx HOST:PORT]
//	             [-grant NAME[=OPS][@ADDRS]]... [-buckets N] [-ways N] [-slab BYTES] [-max-value BYTES] [-q]
//	rmakv get    [-socket PATH] -creds DIR -servers HOST:PORT,... KEY
//	rmakv set    [-socket PATH] -creds DIR -servers HOST:PORT,... KEY VALUE
//	rmakv del    [-socket PATH] -creds DIR -servers HOST:PORT,... KEY
//	rmakv stats  [-socket PATH] -creds DIR -servers HOST:PORT,...
//	rmakv bench  [-socket PATH] -creds DIR -servers HOST:PORT,... [-keys N] [-s BYTES]
//	             [-load] [-D DURATION] [-O N] [-hedge] [-nolookup]
//	rmakv fig9   -rmad PATH [-rmakv PATH] [-out DIR] [-runs N] [-cases a,b,c]
//
// -socket is the engine's control socket (default ctlmsg.DefaultSocket).
// Old spellings still accepted: -inflight for -O, bench's -value for -s
// and -d for -D, server's -quiet for -q.
//
// DIR holds keyx credentials (`rmactl creds DIR`): the server reads
// server.pem, clients client.pem. The server serves the clients -grant
// names, by their certificates' names (keyx.ParsePermit): NAME=read may
// GET (the K_d of both regions for the engine addresses its certificate
// holds, or @ADDRS), DESCRIBE and STATS; NAME=read+write may also SET,
// DELETE and send access hints. Others are refused. Without -grant it
// grants the client of DIR/client.pem (onerma-client, as `rmactl creds
// DIR` issues it) read+write@any, so that existing directories work as
// they are. A server prints one line when it
// serves ("rmakv: serving rpc ADDR keyx ADDR engine ADDR"), rekeys its
// regions on SIGUSR1, and exits on SIGINT or SIGTERM, or when its engine
// goes away. fig9 is the paper's Figure 9 on real engines (needs root):
// see fig9.go.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

func main() {
	cli.Exit("rmakv", rmakv(os.Args[1:]))
}

var synopsis = []string{
	"rmakv server [-socket PATH] -creds DIR [-listen HOST:PORT] [-keyx HOST:PORT] [-grant NAME[=OPS][@ADDRS]]... [-buckets N] [-ways N] [-slab BYTES] [-max-value BYTES] [-q]",
	"rmakv get    [-socket PATH] -creds DIR -servers HOST:PORT,... KEY",
	"rmakv set    [-socket PATH] -creds DIR -servers HOST:PORT,... KEY VALUE",
	"rmakv del    [-socket PATH] -creds DIR -servers HOST:PORT,... KEY",
	"rmakv stats  [-socket PATH] -creds DIR -servers HOST:PORT,...",
	"rmakv bench  [-socket PATH] -creds DIR -servers HOST:PORT,... [-keys N] [-s BYTES] [-load] [-D DURATION] [-O N] [-hedge] [-nolookup]",
	"rmakv fig9   -rmad PATH [-rmakv PATH] [-out DIR] [-runs N] [-cases a,b,c]",
}

var examples = map[string][]string{
	"server": {"rmakv server -creds ~/onerma-creds -listen 10.0.0.1:7000"},
	"get":    {"rmakv get -creds ~/onerma-creds -servers 10.0.0.1:7000,10.0.0.2:7000 user:42"},
	"set":    {"rmakv set -creds ~/onerma-creds -servers 10.0.0.1:7000,10.0.0.2:7000 user:42 alice"},
	"del":    {"rmakv del -creds ~/onerma-creds -servers 10.0.0.1:7000,10.0.0.2:7000 user:42"},
	"stats":  {"rmakv stats -creds ~/onerma-creds -servers 10.0.0.1:7000,10.0.0.2:7000"},
	"bench":  {"rmakv bench -creds ~/onerma-creds -servers 10.0.0.1:7000 -keys 20000 -load -s 64 -D 3s -O 16"},
	"fig9":   {"rmakv fig9 -rmad bin/rmad -rmakv bin/rmakv -out figures -runs 3"},
}

// usage is rmakv's own usage text; each command prints its flags.
func usage(w io.Writer) {
	cli.PrintHeader(w, synopsis, "rmakv CMD -h lists a command's flags.",
		[]string{examples["server"][0], examples["set"][0], examples["bench"][0]})
}

// newFlags returns the FlagSet of command cmd, its usage text to out.
func newFlags(cmd string, out io.Writer) *cli.FlagSet {
	i := slices.IndexFunc(synopsis, func(s string) bool { return strings.HasPrefix(s, "rmakv "+cmd+" ") })
	fs := cli.New("rmakv "+cmd, strings.Join(strings.Fields(synopsis[i]), " ")) // without the alignment
	fs.Example(examples[cmd]...)
	fs.SetOutput(out)
	return fs
}

// rmakv runs the command args names.
func rmakv(args []string) error {
	if len(args) < 1 {
		usage(os.Stderr)
		return cli.ErrUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "server":
		return serverCmd(args)
	case "get", "set", "del", "stats":
		return clientCmd(cmd, args)
	case "bench":
		return benchCmd(args)
	case "fig9":
		return fig9Cmd(args)
	case "-h", "-help", "--help", "help":
		usage(os.Stderr)
		return flag.ErrHelp
	}
	fmt.Fprintf(os.Stderr, "rmakv: unknown command %q\n", cmd)
	usage(os.Stderr)
	return cli.ErrUsage
}

// clientFlags are the flags every client command takes.
type clientFlags struct {
	socket, creds, servers string
	replicas, inflight     int
	maxValue               int
	hedge                  bool
	noLookup               bool
}

func (f *clientFlags) register(fs *cli.FlagSet) {
	fs.StringVar(&f.socket, "socket", ctlmsg.DefaultSocket, "engine control socket")
	fs.StringVar(&f.creds, "creds", "", "directory of keyx credentials (client.pem)")
	fs.StringVar(&f.servers, "servers", "", "the servers' RPC addresses, HOST:PORT,...")
	fs.IntVar(&f.replicas, "replicas", 0, "replicas per key (default min(3, servers))")
	fs.IntVar(&f.inflight, "O", 16, "GETs outstanding at once (1..4096)")
	fs.IntVar(&f.maxValue, "max-value", 0, "largest value read (default 64 KB)")
	fs.BoolVar(&f.hedge, "hedge", false, "hedge a GET that waits past its replica's p99")
	fs.BoolVar(&f.noLookup, "nolookup", false, "GET with READs (the bucket, then the record), not one LOOKUP")
	fs.Alias("inflight", "O")
}

// check checks the flags' values before anything is dialed.
func (f *clientFlags) check() error {
	switch {
	case f.servers == "" || f.creds == "":
		return fmt.Errorf("-servers and -creds are required")
	case f.replicas < 0:
		return fmt.Errorf("-replicas %d: want 0 (the default) or more", f.replicas)
	case f.inflight < 1 || f.inflight > 4096:
		return fmt.Errorf("-O %d: want 1..4096", f.inflight)
	case f.maxValue < 0 || f.maxValue > kv.MaxValueBytes:
		return fmt.Errorf("-max-value %d: want 0 (the default) ..%d", f.maxValue, kv.MaxValueBytes)
	}
	return nil
}

func (f *clientFlags) config(name string) (kv.ClientConfig, error) {
	if err := f.check(); err != nil {
		return kv.ClientConfig{}, err
	}
	creds, err := keyx.LoadClient(f.creds)
	if err != nil {
		return kv.ClientConfig{}, err
	}
	cfg := kv.ClientConfig{Socket: f.socket, Name: name, Credentials: creds, Replicas: f.replicas,
		MaxInFlight: f.inflight, MaxValue: f.maxValue, Hedge: f.hedge, NoLookup: f.noLookup}
	for _, s := range strings.Split(f.servers, ",") {
		cfg.Servers = append(cfg.Servers, kv.ServerAddr{RPC: strings.TrimSpace(s)})
	}
	return cfg, nil
}

// dial opens a client with the flags' configuration.
func (f *clientFlags) dial(name string) (*kv.Client, kv.ClientConfig, error) {
	cfg, err := f.config(name)
	if err != nil {
		return nil, cfg, err
	}
	c, err := kv.Dial(cfg)
	return c, cfg, cli.NameFlag(err, clientFields)
}

// clientFields names the flag that sets each kv.ClientConfig field its
// errors name.
var clientFields = []cli.Field{{Name: "Replicas", Flag: "-replicas"}, {Name: "MaxInFlight", Flag: "-O"},
	{Name: "MaxValue", Flag: "-max-value"}}

// parseClient parses a get, set, del or stats command's flags and
// checks its arguments.
func parseClient(cmd string, args []string, out io.Writer) (*clientFlags, []string, error) {
	fs := newFlags(cmd, out)
	f := &clientFlags{}
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	want := map[string]int{"get": 1, "del": 1, "set": 2, "stats": 0}[cmd]
	if fs.NArg() != want {
		return nil, nil, fmt.Errorf("%s takes %d arguments, got %d", cmd, want, fs.NArg())
	}
	return f, fs.Args(), f.check()
}

func clientCmd(cmd string, args []string) error {
	f, args, err := parseClient(cmd, args, os.Stderr)
	if err != nil {
		return err
	}
	c, cfg, err := f.dial("rmakv-" + cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "get":
		v, err := c.Get([]byte(args[0]), nil)
		if err != nil {
			return err
		}
		os.Stdout.Write(append(v, '\n'))
	case "set":
		return c.Set([]byte(args[0]), []byte(args[1]))
	case "del":
		return c.Delete([]byte(args[0]))
	case "stats":
		for i := range cfg.Servers {
			st, err := c.ServerStats(i)
			if err != nil {
				fmt.Printf("%s: %v\n", cfg.Servers[i].RPC, err)
				continue
			}
			fmt.Printf("%s: items %d (records %d) sets %d deletes %d evicted %d (bucket) %d (slab) hints %d (%d unmatched) slab pages %d/%d\n",
				cfg.Servers[i].RPC, st.Items, st.Records, st.Sets, st.Deletes, st.EvictedIndex, st.EvictedSlab,
				st.Hints, st.HintsUnmatched, st.SlabPages, st.SlabPagesTotal)
		}
	}
	return nil
}

// logf prints a timestamped line to stderr.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s rmakv: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
