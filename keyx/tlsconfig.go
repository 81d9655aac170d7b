package keyx

import (
	"crypto/tls"
	"fmt"
	"time"
)

// ServerTLS is the TLS configuration of a service that authenticates
// itself with these (server) credentials and accepts only clients holding
// client credentials from the same CA: TLS 1.3 only, client certificate
// required and verified, and not revoked (WithRevocationFile: a revoked
// client fails the handshake with a bad_certificate alert). An
// application's own service beside the key exchange can use it (the
// same CA, the same rules).
func (c *Credentials) ServerTLS() (*tls.Config, error) {
	tc, err := c.ServerTLSDeferred()
	if err != nil {
		return nil, err
	}
	if c.rev != nil {
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return nil // refused anyway: a client certificate is required
			}
			return c.CheckClient(cs.PeerCertificates[0])
		}
	}
	return tc, nil
}

// ServerTLSDeferred is ServerTLS less the revocation check, which the
// service makes itself, after the handshake and before it serves
// anything, with CheckClient: so that it can tell a revoked client why
// it is refused, which a TLS alert cannot. The key exchange's Server
// and kv's update RPC use it.
func (c *Credentials) ServerTLSDeferred() (*tls.Config, error) {
	if err := c.checkRole(true); err != nil {
		return nil, err
	}
	if err := c.checkValid(time.Now()); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.pool(),
	}, nil
}

// ClientTLS is the TLS configuration of a client holding these (client)
// credentials that dials host: TLS 1.3 only, its certificate offered, the
// server's certificate required to be from the same CA, with the
// server-auth usage, naming host (a DNS name or an IP address). Dial uses
// it.
func (c *Credentials) ClientTLS(host string) (*tls.Config, error) {
	if err := c.checkRole(false); err != nil {
		return nil, err
	}
	if err := c.checkValid(time.Now()); err != nil {
		return nil, err
	}
	if host == "" {
		return nil, fmt.Errorf("no server name to verify the server's certificate against")
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		RootCAs:      c.pool(),
		ServerName:   host,
	}, nil
}

// ExplainServerCert says in words why a handshake with host failed when
// the server's certificate is at fault (not from the CA, not naming host,
// expired, not a server certificate), wrapping err; other errors are
// returned as they are.
func (c *Credentials) ExplainServerCert(err error, host string) error {
	return explainServerCert(err, host, c)
}
