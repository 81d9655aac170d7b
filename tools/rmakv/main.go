// Command rmakv runs OneRMA's key/value cache (package kv): a server that
// owns a shard in regions of its engine, and clients that read it with
// one-sided READs and update it over the servers' RPC.
//
//	rmakv server -socket PATH -creds DIR [-listen HOST:PORT] [-keyx HOST:PORT]
//	             [-buckets N] [-ways N] [-slab BYTES] [-max-value BYTES]
//	rmakv get    -socket PATH -creds DIR -servers HOST:PORT,... KEY
//	rmakv set    -socket PATH -creds DIR -servers HOST:PORT,... KEY VALUE
//	rmakv del    -socket PATH -creds DIR -servers HOST:PORT,... KEY
//	rmakv stats  -socket PATH -creds DIR -servers HOST:PORT,...
//	rmakv bench  -socket PATH -creds DIR -servers HOST:PORT,... [-keys N] [-value BYTES]
//	             [-load] [-d DURATION] [-inflight N] [-hedge]
//	rmakv fig9   -rmad PATH [-out DIR] [-d DURATION] [-cases a,b,c]
//
// DIR holds keyx credentials (`rmactl creds DIR`): the server reads
// server.pem, clients client.pem. A server prints one line when it
// serves ("rmakv: serving rpc ADDR keyx ADDR engine ADDR"), rekeys its
// regions on SIGUSR1, and exits on SIGINT or SIGTERM, or when its engine
// goes away. fig9 is the paper's Figure 9 on real engines (needs root):
// see fig9.go.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/kv"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "server":
		err = serverCmd(args)
	case "get", "set", "del", "stats":
		err = clientCmd(cmd, args)
	case "bench":
		err = benchCmd(args)
	case "fig9":
		err = fig9Cmd(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmakv:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: rmakv server|get|set|del|stats|bench|fig9 [flags] [args]
  rmakv server -socket PATH -creds DIR [-listen HOST:PORT]
  rmakv get|del -socket PATH -creds DIR -servers HOST:PORT,... KEY
  rmakv set -socket PATH -creds DIR -servers HOST:PORT,... KEY VALUE
  rmakv stats -socket PATH -creds DIR -servers HOST:PORT,...
  rmakv bench -socket PATH -creds DIR -servers HOST:PORT,... [-load] [-keys N] [-value BYTES] [-d DURATION]
  rmakv fig9 -rmad PATH [-out DIR]
(rmakv CMD -h lists a command's flags)`)
	os.Exit(2)
}

// clientFlags are the flags every client command takes.
type clientFlags struct {
	socket, creds, servers string
	replicas, inflight     int
	maxValue               int
	hedge                  bool
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.socket, "socket", "/run/onerma/rmad.sock", "engine control socket")
	fs.StringVar(&f.creds, "creds", "", "directory of keyx credentials (client.pem)")
	fs.StringVar(&f.servers, "servers", "", "the servers' RPC addresses, HOST:PORT,...")
	fs.IntVar(&f.replicas, "replicas", 0, "replicas per key (default min(3, servers))")
	fs.IntVar(&f.inflight, "inflight", 16, "GETs outstanding at once")
	fs.IntVar(&f.maxValue, "max-value", 0, "largest value read (default 64 KB)")
	fs.BoolVar(&f.hedge, "hedge", false, "hedge a GET that waits past its replica's p99")
}

func (f *clientFlags) config(name string) (kv.ClientConfig, error) {
	if f.servers == "" || f.creds == "" {
		return kv.ClientConfig{}, fmt.Errorf("-servers and -creds are required")
	}
	creds, err := keyx.LoadClient(f.creds)
	if err != nil {
		return kv.ClientConfig{}, err
	}
	cfg := kv.ClientConfig{Socket: f.socket, Name: name, Credentials: creds, Replicas: f.replicas,
		MaxInFlight: f.inflight, MaxValue: f.maxValue, Hedge: f.hedge}
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
	return c, cfg, err
}

func clientCmd(cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var f clientFlags
	f.register(fs)
	fs.Parse(args)
	want := map[string]int{"get": 1, "del": 1, "set": 2, "stats": 0}[cmd]
	if fs.NArg() != want {
		return fmt.Errorf("%s takes %d arguments, got %d", cmd, want, fs.NArg())
	}
	c, cfg, err := f.dial("rmakv-" + cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	switch cmd {
	case "get":
		v, err := c.Get([]byte(fs.Arg(0)), nil)
		if err != nil {
			return err
		}
		os.Stdout.Write(append(v, '\n'))
	case "set":
		return c.Set([]byte(fs.Arg(0)), []byte(fs.Arg(1)))
	case "del":
		return c.Delete([]byte(fs.Arg(0)))
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
