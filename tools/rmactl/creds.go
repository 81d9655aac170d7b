package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/keyx"
)

// hostsFlag collects repeated -host values.
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

// credsUsage is the creds subcommand's synopsis, credsExample an
// invocation.
const (
	credsUsage   = "rmactl creds [-host NAME|IP]... [-valid DURATION] [-force] DIR"
	credsExample = "rmactl creds -host hosta.example -host 10.1.2.3 ~/onerma-creds"
)

// creds writes a throwaway CA's certificate and one server and one client
// credential into a directory (keyx.WriteDir) and says on out which file
// goes where; flag errors and usage go to errOut. Flags may come before
// or after DIR.
func creds(args []string, out, errOut io.Writer) error {
	set := cli.New("rmactl creds", credsUsage)
	set.Example(credsExample)
	var hosts hostsFlag
	set.Var(&hosts, "host", "a DNS name or IP address clients reach the rmaperf server (the key service) by; repeat or separate with commas (localhost, 127.0.0.1 and ::1 are always in)")
	valid := set.Duration("valid", 7*24*time.Hour, "how long the certificates are valid")
	force := set.Bool("force", false, "replace credentials DIR already holds")
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
	ca, err := keyx.NewCA("rmactl creds CA", *valid)
	if err != nil {
		return err
	}
	srv, err := ca.IssueServer("onerma-server", hosts...)
	if err != nil {
		return err
	}
	cli, err := ca.IssueClient("onerma-client")
	if err != nil {
		return err
	}
	if err := keyx.WriteDir(dir, srv, cli, *force); err != nil {
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
	abs, _ := filepath.Abs(dir)
	fmt.Fprintf(out, "wrote %s (mode 0700; files mode 0600), valid until %s:\n", abs, cert.NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(out, "  %-10s the CA's certificate, SHA-256 %s (its private key was never stored: nobody can issue more)\n", keyx.CAFile, hex.EncodeToString(fp[:]))
	fmt.Fprintf(out, "  %-10s the server's: keep it on the server's host (rmaperf server -creds DIR); it names %s\n", keyx.ServerFile, strings.Join(names, ", "))
	fmt.Fprintf(out, "  %-10s the clients': copy it, mode 0600, into a directory of mode 0700 on each client host (rmaperf read_bw ... -creds DIR)\n", keyx.ClientFile)
	return nil
}
