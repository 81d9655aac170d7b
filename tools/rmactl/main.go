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
// PID), which a region's owner derives K_d for. It also keeps the CA of
// the key exchange's TLS credentials (package keyx) and issues and
// revokes its clients, for running rmaperf's and rmakv's servers and
// clients on different hosts.
//
//	rmactl [-socket PATH] stats [-json]
//	rmactl [-socket PATH] identity
//	rmactl creds [-host NAME|IP]... [-valid DURATION] [-ca-valid DURATION] [-ca-key PATH] [-force] DIR
//	rmactl creds issue -creds DIR -name NAME [-ip ADDR,...] [-valid DURATION] [-out DIR2] [-ca-key PATH] [-force]
//	rmactl creds revoke -creds DIR (-name NAME | -serial N) [-ca-key PATH]
//	rmactl creds list -creds DIR [-ca-key PATH]
//
// -socket is the engine's control socket (default ctlmsg.DefaultSocket);
// stats and identity also take it after the command.
//
// creds DIR makes a CA (ECDSA P-256, valid -ca-valid, a year by default)
// and keeps it in DIR (keyx.CreateAuthority; DIR created mode 0700, an
// existing DIR must already be 0700 and this user's), each file mode
// 0600: ca.pem (the CA's certificate), ca-key.pem (its private key, or
// the file -ca-key names: used as it is if it exists, an operator's own
// key), server.pem (the CA's certificate, the server certificate and its
// private key: for `rmaperf server -creds DIR`), client.pem (the same for
// the client "onerma-client": copy it to the client hosts' DIR), crl.pem
// (the CA's revocation list, empty) and issued/ (a copy of each
// certificate issued). Server and client certificates are valid -valid
// (7 days by default). The server certificate has the server-auth usage
// and names localhost, 127.0.0.1, ::1 and every -host (DNS names or IP
// addresses: clients verify that it names the host of their -server
// HOST:PORT); the client certificate has the client-auth usage only and
// names no address (servers grant it any by default). It refuses to
// replace files DIR already holds unless -force is given.
//
// creds issue issues one more client from the CA kept in DIR: its own
// -name (what owners grant it by: rmaperf server -grant NAME=read), its
// engines' addresses (-ip: the initiator addresses it may ask K_d for)
// and lifetime (-valid, a day by default), into DIR2/client.pem (-out,
// default DIR/clients/NAME). creds revoke adds to crl.pem every
// certificate issued to -name, or the one of -serial: servers reading DIR
// (rmaperf server, rmakv server, keyx.LoadServer) refuse it at its next
// request. creds list prints what was issued, serials and states. No key
// is printed or logged; nothing secret is on a command line.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/cli"
)

func main() {
	cli.Exit("rmactl", rmactl(os.Args[1:], os.Stdout, os.Stderr))
}

// The synopses of the commands that ask an engine.
const (
	statsUsage    = "rmactl [-socket PATH] stats [-json]"
	identityUsage = "rmactl [-socket PATH] identity"
)

// rmactl runs the command args names; usage texts and flag errors go to
// stderr.
func rmactl(args []string, stdout, stderr io.Writer) error {
	fs := cli.New("rmactl", statsUsage, identityUsage, credsUsage, credsIssueUsage, credsRevokeUsage, credsListUsage)
	fs.Notes("rmactl CMD -h lists a command's flags.")
	fs.Example("rmactl stats", "rmactl -socket /run/onerma/pods/web/rmad.sock identity", credsExample)
	fs.SetOutput(stderr)
	sock := fs.String("socket", ctlmsg.DefaultSocket, "engine control socket")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		fs.PrintUsage()
		return cli.ErrUsage
	}
	cmd, args := fs.Arg(0), fs.Args()[1:]
	switch cmd {
	case "stats":
		o, err := parseStats(*sock, args, stderr)
		if err != nil {
			return err
		}
		return stats(o.socket, o.json)
	case "identity":
		o, err := parseIdentity(*sock, args, stderr)
		if err != nil {
			return err
		}
		return identity(o.socket)
	case "creds":
		return creds(args, stdout, stderr)
	}
	fmt.Fprintf(stderr, "rmactl: unknown command %q\n", cmd)
	fs.PrintUsage()
	return cli.ErrUsage
}

// engineOptions are the flags of a command that asks an engine.
type engineOptions struct {
	socket string
	json   bool
}

// engineFlags returns the FlagSet of a command that asks the engine at
// socket (the -socket before the command, or this one's own).
func engineFlags(name, synopsis, socket string, o *engineOptions, stderr io.Writer) *cli.FlagSet {
	fs := cli.New(name, synopsis)
	fs.SetOutput(stderr)
	fs.StringVar(&o.socket, "socket", socket, "engine control socket")
	return fs
}

func parseStats(socket string, args []string, stderr io.Writer) (*engineOptions, error) {
	o := &engineOptions{}
	fs := engineFlags("rmactl stats", statsUsage, socket, o, stderr)
	fs.Example("rmactl stats", "rmactl -socket /run/onerma/pods/web/rmad.sock stats -json")
	fs.BoolVar(&o.json, "json", false, "print the counters as JSON")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("stats: unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func parseIdentity(socket string, args []string, stderr io.Writer) (*engineOptions, error) {
	o := &engineOptions{}
	fs := engineFlags("rmactl identity", identityUsage, socket, o, stderr)
	fs.Example("rmactl identity", "rmactl -socket /run/onerma/pods/web/rmad.sock identity")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("identity: unexpected arguments %q", fs.Args())
	}
	return o, nil
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
