// Command rmactl is the engine's admin tool: it asks a running rmad,
// through its control socket, for its counters (every field of
// ctlmsg.Stats, among them the security counters rx_auth_failed,
// req_auth_failed, rekeys and iv_errors, IPv4 and ICMP's rx_ip_options,
// rx_fragments, rx_ttl_zero, icmp_echo_replies, icmp_rate_limited,
// icmp_frag_needed and the latest one's frag_needed_dst and
// frag_needed_mtu, the poll loop's loop.*, and
// fault.* when rmad's port is wrapped in a fault injector; then the open
// portals and the tenants' usage against their quotas; on an engine of
// several polling cores, a column per core beside the sum, and the
// portals' cores) or for the
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
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
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
