package main

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/keyx"
)

// hostsFlag collects repeated -host (or -ip) values.
type hostsFlag []string

func (h *hostsFlag) String() string { return strings.Join(*h, ",") }

func (h *hostsFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*h = append(*h, s)
		}
	}
	return nil
}

// The creds commands' synopses, and an invocation of each.
const (
	credsUsage         = "rmactl creds [-host NAME|IP]... [-valid DURATION] [-ca-valid DURATION] [-ca-key PATH] [-force] DIR"
	credsIssueUsage    = "rmactl creds issue -creds DIR -name NAME [-ip ADDR,...] [-valid DURATION] [-out DIR2] [-ca-key PATH] [-force]"
	credsRevokeUsage   = "rmactl creds revoke -creds DIR (-name NAME | -serial N) [-ca-key PATH]"
	credsListUsage     = "rmactl creds list -creds DIR [-ca-key PATH]"
	credsExample       = "rmactl creds -host hosta.example -host 10.1.2.3 ~/onerma-creds"
	credsIssueExample  = "rmactl creds issue -creds ~/onerma-creds -name reader-b -ip 10.1.2.20 -valid 24h"
	credsRevokeExample = "rmactl creds revoke -creds ~/onerma-creds -name reader-b"
	credsListExample   = "rmactl creds list -creds ~/onerma-creds"
)

// credsNotes is the creds command's paragraph of its usage text.
const credsNotes = `creds DIR makes a CA and keeps it in DIR (its key ca-key.pem, mode 0600,
or the file -ca-key names), with server.pem for the owner's host,
client.pem (the client "onerma-client") for the clients' hosts and the
CA's revocation list crl.pem. issue adds a client of its own name,
engine addresses (-ip) and lifetime (-valid); revoke cuts one off (every
certificate of -name, or the one of -serial): servers reading DIR refuse
it at its next request. list shows what was issued. Owners grant clients
by name: rmaperf server -grant NAME=read, rmakv server -grant NAME=read.`

// creds runs `rmactl creds` and its subcommands issue, revoke and list;
// what it made goes to out, flag errors and usage to errOut. A directory
// named issue, revoke or list is given as ./issue.
func creds(args []string, out, errOut io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "issue":
			return credsIssue(args[1:], out, errOut)
		case "revoke":
			return credsRevoke(args[1:], out, errOut)
		case "list":
			return credsList(args[1:], out, errOut)
		}
	}
	return credsMake(args, out, errOut)
}

// credsMake makes a CA and keeps it in a directory (keyx.CreateAuthority)
// with one server and one client credential, and says on out which file
// goes where. Flags may come before or after DIR.
func credsMake(args []string, out, errOut io.Writer) error {
	set := cli.New("rmactl creds", credsUsage, credsIssueUsage, credsRevokeUsage, credsListUsage)
	set.Notes(credsNotes)
	set.Example(credsExample, credsIssueExample, credsRevokeExample, credsListExample)
	var hosts hostsFlag
	set.Var(&hosts, "host", "a DNS name or IP address clients reach the rmaperf server (the key service) by; repeat or separate with commas (localhost, 127.0.0.1 and ::1 are always in)")
	valid := set.Duration("valid", 7*24*time.Hour, "how long the server and client certificates are valid")
	caValid := set.Duration("ca-valid", 365*24*time.Hour, "how long the CA is valid (every certificate it issues expires with it at the latest)")
	caKey := set.String("ca-key", "", "the CA's private key: an existing file (ECDSA P-256, PEM, mode 0600) is used as it is, a missing one is made there (default DIR/ca-key.pem, made anew)")
	force := set.Bool("force", false, "replace credentials DIR already holds (a new CA: every client of the old one is cut off)")
	set.SetOutput(errOut)
	if err := set.Parse(args); err != nil {
		return err
	}
	if set.NArg() == 0 {
		set.PrintUsage()
		return errors.New("creds: no directory given")
	}
	dir := set.Arg(0)
	if err := set.Parse(set.Args()[1:]); err != nil {
		return err
	}
	if set.NArg() > 0 {
		return fmt.Errorf("creds: unexpected %q after the directory %s (usage: %s)", set.Arg(0), dir, credsUsage)
	}
	if *valid <= 0 {
		return fmt.Errorf("creds: -valid %v: want a positive duration", *valid)
	}
	if *caValid < *valid {
		return fmt.Errorf("creds: -ca-valid %v: want at least -valid (%v)", *caValid, *valid)
	}
	var key *ecdsa.PrivateKey
	if *caKey != "" {
		var err error
		if key, err = keyx.LoadCAKey(*caKey); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	ca, err := keyx.NewCAWithKey("rmactl creds CA", *caValid, key)
	if err != nil {
		return err
	}
	short, err := ca.ValidFor(*valid)
	if err != nil {
		return err
	}
	srv, err := short.IssueServer("onerma-server", hosts...)
	if err != nil {
		return err
	}
	cli, err := short.IssueClient(keyx.DefaultClient)
	if err != nil {
		return err
	}
	a, err := keyx.CreateAuthority(dir, *caKey, ca, srv, cli, *force)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%w (-force replaces them)", err)
		}
		return err
	}
	cert := srv.Certificate()
	names := append([]string(nil), cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	fp := sha256.Sum256(ca.Certificate().Raw)
	abs, _ := filepath.Abs(a.Dir())
	keyFile := keyx.CAKeyFile
	if *caKey != "" {
		keyFile, _ = filepath.Abs(*caKey)
	}
	fmt.Fprintf(out, "wrote %s (mode 0700; files mode 0600), certificates valid until %s, the CA until %s:\n", abs,
		cert.NotAfter.UTC().Format(time.RFC3339), ca.Certificate().NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "  %-10s the CA's certificate, SHA-256 %s\n", keyx.CAFile, hex.EncodeToString(fp[:]))
	fmt.Fprintf(out, "  %-10s the CA's private key (%s): whoever reads it can issue clients; keep DIR on an administrator's host, or the key elsewhere (-ca-key)\n", "CA key", keyFile)
	fmt.Fprintf(out, "  %-10s the server's: keep it on the server's host (rmaperf server -creds DIR); it names %s\n", keyx.ServerFile, strings.Join(names, ", "))
	fmt.Fprintf(out, "  %-10s the clients' (%q; rmaperf and rmakv servers grant it READ and WRITE unless -grant says otherwise): copy it, mode 0600, into a directory of mode 0700 on each client host (rmaperf read_bw ... -creds DIR)\n", keyx.ClientFile, keyx.DefaultClient)
	fmt.Fprintf(out, "  %-10s the CA's revocation list (public): servers reading DIR refuse the clients it names; copy it to servers' directories elsewhere after rmactl creds revoke\n", keyx.RevocationFile)
	fmt.Fprintf(out, "  %-10s a copy of each certificate issued (rmactl creds list)\n", keyx.IssuedDir+"/")
	return nil
}

// clientName checks a client's name as issue takes it: it becomes the
// certificate's common name, what -grant names it by, and the default
// -out directory's name.
func clientName(n string) error {
	if n == "" || len(n) > 64 || n[0] == '.' || n[0] == '-' {
		return fmt.Errorf("-name %q: want 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'", n)
	}
	for _, c := range []byte(n) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("-name %q: want 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'", n)
		}
	}
	return nil
}

// credsIssue issues one client from the CA kept in -creds DIR.
func credsIssue(args []string, out, errOut io.Writer) error {
	set := cli.New("rmactl creds issue", credsIssueUsage)
	set.Example(credsIssueExample, "rmactl creds issue -creds ~/onerma-creds -name ops-laptop -valid 8h -out /tmp/ops-creds")
	set.SetOutput(errOut)
	dir := set.String("creds", "", "the directory rmactl creds DIR made (its CA)")
	name := set.String("name", "", "the client's name: its certificate's common name, what owners grant it by (-grant NAME=...)")
	var ips hostsFlag
	set.Var(&ips, "ip", "an IPv4 address of the client's engine, the initiator address it may ask K_d for; repeat or separate with commas (none: only addresses an owner grants it by name)")
	valid := set.Duration("valid", 24*time.Hour, "how long the certificate is valid (at most until the CA expires)")
	outDir := set.String("out", "", "directory to write the client's client.pem into (default DIR/clients/NAME)")
	caKey := set.String("ca-key", "", "the CA's private key, if not DIR/ca-key.pem")
	force := set.Bool("force", false, "replace a client.pem the -out directory holds")
	if err := set.Parse(args); err != nil {
		return err
	}
	switch {
	case set.NArg() > 0:
		return fmt.Errorf("creds issue: unexpected arguments %q", set.Args())
	case *dir == "":
		return errors.New("creds issue: -creds DIR is required (the directory rmactl creds DIR made)")
	case *valid <= 0:
		return fmt.Errorf("creds issue: -valid %v: want a positive duration", *valid)
	}
	if err := clientName(*name); err != nil {
		return fmt.Errorf("creds issue: %w", err)
	}
	var addrs []netip.Addr
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("creds issue: -ip %q: want an IPv4 address", s)
		}
		addrs = append(addrs, a)
	}
	if *outDir == "" {
		*outDir = filepath.Join(*dir, "clients", *name)
	}
	a, err := keyx.OpenAuthority(*dir, *caKey)
	if err != nil {
		return err
	}
	// Refused before anything is issued.
	if _, err := os.Lstat(filepath.Join(*outDir, keyx.ClientFile)); err == nil && !*force {
		return fmt.Errorf("creds issue: %s: %w; refusing to replace credentials (-force replaces it)", filepath.Join(*outDir, keyx.ClientFile), fs.ErrExist)
	}
	c, err := a.IssueClient(*name, *valid, addrs...)
	if err != nil {
		return err
	}
	if err := keyx.WriteClientDir(*outDir, c, *force); err != nil {
		return err
	}
	cert := c.Certificate()
	abs, _ := filepath.Abs(filepath.Join(*outDir, keyx.ClientFile))
	fmt.Fprintf(out, "issued %q: serial %#x, valid until %s, engine addresses %s\n", *name, cert.SerialNumber,
		cert.NotAfter.UTC().Format(time.RFC3339), addrList(cert))
	fmt.Fprintf(out, "  %s: copy it, mode 0600, into a directory of mode 0700 on the client's host (rmaperf read_bw ... -creds DIR, rmakv get -creds DIR)\n", abs)
	fmt.Fprintf(out, "  owners grant it by name: rmaperf server -grant %s=read (read+write for WRITE), rmakv server -grant %s=read (read+write to update)\n", *name, *name)
	return nil
}

// addrList names a certificate's IP addresses.
func addrList(c *x509.Certificate) string {
	if len(c.IPAddresses) == 0 {
		return "none (only those an owner grants it)"
	}
	s := make([]string, len(c.IPAddresses))
	for i, ip := range c.IPAddresses {
		s[i] = ip.String()
	}
	return strings.Join(s, ", ")
}

// credsRevoke revokes clients of the CA kept in -creds DIR.
func credsRevoke(args []string, out, errOut io.Writer) error {
	set := cli.New("rmactl creds revoke", credsRevokeUsage)
	set.Example(credsRevokeExample, "rmactl creds revoke -creds ~/onerma-creds -serial 0x3f1c...")
	set.SetOutput(errOut)
	dir := set.String("creds", "", "the directory rmactl creds DIR made (its CA)")
	name := set.String("name", "", "revoke every certificate issued to this client name")
	serialFlag := set.String("serial", "", "revoke the certificate of this serial number (0x... as rmactl creds list prints it, or decimal)")
	caKey := set.String("ca-key", "", "the CA's private key, if not DIR/ca-key.pem")
	if err := set.Parse(args); err != nil {
		return err
	}
	switch {
	case set.NArg() > 0:
		return fmt.Errorf("creds revoke: unexpected arguments %q", set.Args())
	case *dir == "":
		return errors.New("creds revoke: -creds DIR is required (the directory rmactl creds DIR made)")
	case (*name == "") == (*serialFlag == ""):
		return errors.New("creds revoke: give -name NAME or -serial N, one of the two")
	}
	var serial *big.Int
	if *serialFlag != "" {
		var ok bool
		if serial, ok = new(big.Int).SetString(*serialFlag, 0); !ok || serial.Sign() <= 0 {
			return fmt.Errorf("creds revoke: -serial %q: want a positive number (0x... or decimal)", *serialFlag)
		}
	}
	a, err := keyx.OpenAuthority(*dir, *caKey)
	if err != nil {
		return err
	}
	revoked, err := a.Revoke(*name, serial)
	if err != nil {
		return err
	}
	for _, c := range revoked {
		fmt.Fprintf(out, "revoked %q: serial %#x (valid until %s)\n", c.Subject.CommonName, c.SerialNumber, c.NotAfter.UTC().Format(time.RFC3339))
	}
	abs, _ := filepath.Abs(filepath.Join(*dir, keyx.RevocationFile))
	fmt.Fprintf(out, "  %s updated: servers reading %s refuse it at its next request; copy it to servers' credential directories elsewhere.\n", abs, *dir)
	fmt.Fprintf(out, "  K_d it holds work until the owners rekey their regions (rmakv server: SIGUSR1).\n")
	return nil
}

// credsList lists the certificates the CA kept in -creds DIR issued.
func credsList(args []string, out, errOut io.Writer) error {
	set := cli.New("rmactl creds list", credsListUsage)
	set.Example(credsListExample)
	set.SetOutput(errOut)
	dir := set.String("creds", "", "the directory rmactl creds DIR made (its CA)")
	caKey := set.String("ca-key", "", "the CA's private key, if not DIR/ca-key.pem")
	if err := set.Parse(args); err != nil {
		return err
	}
	switch {
	case set.NArg() > 0:
		return fmt.Errorf("creds list: unexpected arguments %q", set.Args())
	case *dir == "":
		return errors.New("creds list: -creds DIR is required (the directory rmactl creds DIR made)")
	}
	a, err := keyx.OpenAuthority(*dir, *caKey)
	if err != nil {
		return err
	}
	issued, err := a.Issued()
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERIAL\tNAME\tROLE\tVALID UNTIL\tADDRESSES\tSTATE")
	for _, ic := range issued {
		c := ic.Cert
		role, addrs := "server", strings.Join(c.DNSNames, ",")
		if ic.Client() {
			role, addrs = "client", ""
		}
		for _, ip := range c.IPAddresses {
			addrs = strings.TrimPrefix(addrs+","+ip.String(), ",")
		}
		state := "valid"
		switch {
		case !ic.Revoked.IsZero():
			state = "revoked " + ic.Revoked.UTC().Format(time.RFC3339)
		case now.After(c.NotAfter):
			state = "expired"
		}
		if addrs == "" {
			addrs = "-"
		}
		fmt.Fprintf(tw, "%#x\t%s\t%s\t%s\t%s\t%s\n", c.SerialNumber, c.Subject.CommonName, role, c.NotAfter.UTC().Format(time.RFC3339), addrs, state)
	}
	return tw.Flush()
}
