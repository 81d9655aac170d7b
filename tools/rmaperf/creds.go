package main

import (
	"errors"
	"strings"

	"github.com/onerma/onerma/keyx"
)

// loadCreds returns the server's (server) or a client's TLS credentials
// for the key exchange: from the directory dir `rmactl creds` wrote
// (-creds), or from the descriptor fd a launcher passed (-creds-fd).
// Exactly one of the two must be given.
func loadCreds(dir string, fd int, server bool) (*keyx.Credentials, error) {
	switch {
	case dir != "" && fd >= 0:
		return nil, errors.New("-creds and -creds-fd: give one")
	case dir != "" && server:
		return keyx.LoadServer(dir)
	case dir != "":
		return keyx.LoadClient(dir)
	case fd >= 0:
		return keyx.Inherited(fd)
	case server:
		return nil, errors.New("the key service needs TLS credentials: -creds DIR (written by rmactl creds DIR) or -creds-fd FD (from a launcher)")
	}
	return nil, errors.New("-server needs TLS credentials: -creds DIR (DIR/client.pem, copied from the DIR rmactl creds wrote) or -creds-fd FD (from a launcher)")
}

// permitsFlag collects repeated -grant values (keyx.ParsePermit).
type permitsFlag []keyx.Permit

func (p *permitsFlag) String() string {
	s := make([]string, len(*p))
	for i, pm := range *p {
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
