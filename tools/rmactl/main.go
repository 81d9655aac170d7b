// Command rmactl is the engine's admin tool: it asks a running rmad,
// through its control socket, for its counters (every field of
// ctlmsg.Stats, among them the security counters rx_auth_failed,
// req_auth_failed, rekeys and iv_errors, IPv4 and ICMP's rx_ip_options,
// rx_fragments, rx_ttl_zero, icmp_echo_replies, icmp_rate_limited,
// icmp_frag_needed and the latest one's frag_needed_dst and
// frag_needed_mtu, the poll loop's loop.*, and
// fault.* when rmad's port is wrapped in a fault injector; then the open
// portals and the tenants' usage against their quotas) or for the
// identity the engine stamps on this process's requests: its line "pid N"
// gives N, the identity the engine allocated to this process (never its
// PID), which a region's owner derives K_d for. It also writes the TLS
// credentials of the key exchange (package keyx) for running rmaperf's
// server and clients on different hosts.
//
//	rmactl [-socket PATH] stats [-json]
//	rmactl [-socket PATH] identity
//	rmactl creds [-host NAME|IP]... [-valid DURATION] [-force] DIR
//
// creds makes a throwaway CA (ECDSA P-256; its private key is never
// stored, so nobody can issue more certificates from it) and writes into
// DIR (created mode 0700; an existing DIR must already be 0700 and this
// user's) three files, each mode 0600: ca.pem (the CA's certificate),
// server.pem (the CA's certificate, the server certificate and its
// private key: for `rmaperf server -creds DIR`) and client.pem (the same
// for clients: copy it to the client hosts' DIR). The server certificate
// has the server-auth usage and names localhost, 127.0.0.1, ::1 and every
// -host (DNS names or IP addresses: clients verify that it names the host
// of their -server HOST:PORT); the client certificate has the client-auth
// usage only. It refuses to replace files DIR already holds unless -force
// is given. No key is printed or logged; nothing secret is on a command
// line.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/onerma/onerma/ctlmsg"
)

func main() {
	sock := flag.String("socket", "/run/onerma/rmad.sock", "engine control socket")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: rmactl [-socket PATH] stats [-json] | identity\n       "+credsUsage)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var err error
	switch flag.Arg(0) {
	case "stats":
		fs := flag.NewFlagSet("stats", flag.ExitOnError)
		asJSON := fs.Bool("json", false, "print the counters as JSON")
		fs.Parse(flag.Args()[1:])
		err = stats(*sock, *asJSON)
	case "identity":
		err = identity(*sock)
	case "creds":
		if err = creds(flag.Args()[1:], os.Stdout, os.Stderr); errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmactl:", err)
		os.Exit(1)
	}
}

// call sends one request and returns the engine's response.
func call(sock string, op ctlmsg.Op) (ctlmsg.Response, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return ctlmsg.Response{}, fmt.Errorf("connecting to the engine: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(ctlmsg.EncodeRequest(&ctlmsg.Request{V: ctlmsg.Version, ID: 1, Op: op})); err != nil {
		return ctlmsg.Response{}, err
	}
	buf := make([]byte, ctlmsg.MaxResponseBytes+1)
	n, err := c.Read(buf)
	if err != nil {
		return ctlmsg.Response{}, err
	}
	resp, err := ctlmsg.DecodeResponse(buf[:n])
	if err != nil {
		return resp, err
	}
	if resp.Error != "" {
		return resp, fmt.Errorf("engine: %s: %s", resp.Code, resp.Error)
	}
	return resp, nil
}

func stats(sock string, asJSON bool) error {
	resp, err := call(sock, ctlmsg.OpStats)
	if err != nil {
		return err
	}
	if resp.Stats == nil {
		return errors.New("engine sent no counters")
	}
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(resp.Stats)
	}
	// One counter per line, named as in the JSON, then completions by status.
	v := reflect.ValueOf(*resp.Stats)
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
		switch f := v.Field(i); {
		case f.Kind() == reflect.Uint64:
			fmt.Printf("%-19s %d\n", name, f.Uint())
		case f.Kind() == reflect.String && f.String() != "": // frag_needed_dst
			fmt.Printf("%-19s %s\n", name, f.String())
		}
	}
	for i := 0; i < t.NumField(); i++ {
		if m, ok := v.Field(i).Interface().(map[string]uint64); ok {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Printf("completed.%-30s %d\n", k, m[k])
			}
		}
	}
	ops := make([]string, 0, len(resp.Stats.CompletedByOp))
	for op := range resp.Stats.CompletedByOp {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		m := resp.Stats.CompletedByOp[op]
		sts := make([]string, 0, len(m))
		for st := range m {
			sts = append(sts, st)
		}
		sort.Strings(sts)
		for _, st := range sts {
			fmt.Printf("completed_by_op.%-22s %d\n", op+"."+st, m[st])
		}
	}
	if p := resp.Stats.Port; p != nil {
		fmt.Printf("%-24s %s\n", "port.name", p.Name)
		counters("port.driver.", reflect.ValueOf(p.Driver))
		counters("port.dev.", reflect.ValueOf(p.Dev))
		if p.DevErr != "" {
			fmt.Printf("%-24s %s\n", "port.dev_error", p.DevErr)
		}
		if x := p.XDP; x != nil {
			fmt.Printf("%-24s %s\n%-24s %d\n%-24s %s\n%-24s %d\n%-24s %v\n", "port.xdp.iface", x.Iface, "port.xdp.prog_id", x.ProgID,
				"port.xdp.mode", x.Mode, "port.xdp.sockets", x.Sockets, "port.xdp.zero_copy", x.ZeroCopy)
			counters("port.xdp.steer.", reflect.ValueOf(x.Steer))
			counters("port.xdp.socket.", reflect.ValueOf(x.Socket))
			if x.Err != "" {
				fmt.Printf("%-24s %s\n", "port.xdp.error", x.Err)
			}
		}
	}
	if l := resp.Stats.Loop; l != nil {
		counters("loop.", reflect.ValueOf(*l))
	}
	if f := resp.Stats.Fault; f != nil { // a fault-injecting port wraps the engine's
		fmt.Printf("%-24s %d\n", "fault.held", f.Held)
		for _, d := range []struct {
			name string
			st   *ctlmsg.FaultDirStats
		}{{"rx", &f.Rx}, {"tx", &f.Tx}} {
			counters("fault."+d.name+".", reflect.ValueOf(*d.st))
		}
	}
	fmt.Printf("\n%-4s %-16s %10s %6s %-5s %9s %9s %13s %13s %7s %12s  %s\n", "id", "portal", "pid", "uid", "class", "slots", "in_flight", "cmd_depth", "cpl_depth", "regions", "region_bytes", "tenant")
	for _, p := range resp.Stats.Portals {
		name := p.Name
		if p.Closed {
			name += " (closed: corrupt rings)"
		}
		fmt.Printf("%-4d %-16s %10d %6d %-5s %4d/%-4d %9d %6d/%-6d %6d/%-6d %7d %12d  %s\n", p.ID, name, p.PID, p.UID, p.Class,
			p.Slots, p.MaxSlots, p.InFlight, p.CmdDepth, p.CmdCap, p.CplDepth, p.CplCap, p.Regions, p.RegionBytes, p.Tenant)
	}
	if len(resp.Stats.Tenants) > 0 {
		// Usage against quota, memory in MiB.
		fmt.Printf("\n%-24s %5s %9s %9s %19s %19s  %s\n", "tenant", "conns", "portals", "slots", "memory_mib", "hugepage_mib", "socket")
		for _, t := range resp.Stats.Tenants {
			fmt.Printf("%-24s %5d %4d/%-4d %4d/%-4d %9d/%-9d %9d/%-9d  %s\n", t.Name, t.Conns, t.Portals, t.Quota.Portals,
				t.Slots, t.Quota.Slots, t.MemoryBytes>>20, t.Quota.MemoryBytes>>20, t.HugepageBytes>>20, t.Quota.HugepageBytes>>20, t.Socket)
		}
	}
	return nil
}

// counters prints every uint64 field of the struct v, one a line, named
// prefix plus its JSON name.
func counters(prefix string, v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).Kind() == reflect.Uint64 {
			fmt.Printf("%-24s %d\n", prefix+strings.Split(v.Type().Field(i).Tag.Get("json"), ",")[0], v.Field(i).Uint())
		}
	}
}

func identity(sock string) error {
	resp, err := call(sock, ctlmsg.OpIdentity)
	if err != nil {
		return err
	}
	if resp.Identity == nil {
		return errors.New("engine sent no identity")
	}
	// pid is the identity the engine stamps on this process's requests
	// (an engine-allocated number, not the process's PID).
	id := resp.Identity
	fmt.Printf("address %s\npid %d\nuid %d gid %d\ntenant %s\n", id.Addr, id.PID, id.UID, id.GID, id.Tenant)
	return nil
}
