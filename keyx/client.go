package keyx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// Conn is a reader's TLS connection to an owner's Server. It carries one
// request at a time: use it from one goroutine (or Dial one per
// goroutine).
type Conn struct {
	c    *tls.Conn
	in   [2 + maxFrameLen]byte
	out  [2 + maxFrameLen]byte
	dead bool
	// answered: a reply arrived, so the server accepted this client's
	// certificate; later TLS alerts are about something else.
	answered bool
}

// Dial connects to the Server at addr (host:port) with creds (client
// credentials: CA.IssueClient, LoadClient or Inherited) and completes the
// TLS 1.3 handshake, verifying that the server's certificate is from
// creds' CA, has the server-auth usage and names host (a DNS name or an
// IP address, as CA.IssueServer's hosts). With TLS 1.3 the server checks
// the client's certificate after the client's handshake is done: a refusal
// of this certificate shows on the first Fetch.
func Dial(ctx context.Context, addr string, creds *Credentials) (*Conn, error) {
	if creds == nil {
		return nil, errors.New("keyx: dial: no credentials")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("keyx: dial %q: want HOST:PORT: %w", addr, err)
	}
	cfg, err := creds.ClientTLS(host)
	if err != nil {
		return nil, fmt.Errorf("keyx: dial: %w", err)
	}
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("keyx: dial %s: %w", addr, explainServerCert(err, host, creds))
	}
	return &Conn{c: c.(*tls.Conn)}, nil
}

// explainServerCert says in words why the server's certificate failed
// verification, wrapping err (the x509 error stays reachable with
// errors.As).
func explainServerCert(err error, host string, creds *Credentials) error {
	var (
		ua x509.UnknownAuthorityError
		he x509.HostnameError
		ci x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &ua):
		return fmt.Errorf("the server's certificate is not from the CA of these credentials (%q): the owner's and the readers' credentials must come from one CA: %w", creds.ca.Subject.CommonName, err)
	case errors.As(err, &he):
		names := slices.Clone(he.Certificate.DNSNames)
		for _, ip := range he.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		return fmt.Errorf("the server's certificate does not name %s (it names %s): dial a name it holds, or issue the server's credentials for %s: %w", host, strings.Join(names, ", "), host, err)
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		return fmt.Errorf("the server's certificate has expired or is not yet valid (check both clocks): %w", err)
	case errors.As(err, &ci) && ci.Reason == x509.IncompatibleUsage:
		return fmt.Errorf("the server's certificate is not a server certificate: %w", err)
	}
	return err
}

// explainAlert says in words that the server refused this client's
// certificate when err holds a TLS alert from the server before its first
// reply (with TLS 1.3 the server's verdict on the client's certificate
// arrives as an alert on the first read), keeping the alert and nothing of
// the framing around it.
func (c *Conn) explainAlert(err error) error {
	var oe *net.OpError
	if !c.answered && errors.As(err, &oe) && oe.Op == "remote error" {
		return fmt.Errorf("the owner refused this client's certificate (it must be a client certificate from the owner's CA, not expired): %w", oe)
	}
	return err
}

// Peer is the server's certificate.
func (c *Conn) Peer() *x509.Certificate { return c.c.ConnectionState().PeerCertificates[0] }

// Fetch asks for req's K_d. A refusal is a *RefusedError (errors.Is with
// ErrNotGranted, ErrAddress, ErrUnknownRegion, ...); after a malformed
// exchange, a bad-request, revoked or internal refusal (the owner hangs
// up after those) or a transport error the connection is unusable.
func (c *Conn) Fetch(ctx context.Context, req Request) (Grant, error) {
	if c.dead {
		return Grant{}, errors.New("keyx: fetch on a failed connection")
	}
	var body [requestLen]byte
	if err := req.marshal(&body); err != nil {
		return Grant{}, err
	}
	g, err := c.exchange(ctx, body[:])
	if err != nil {
		var re *RefusedError
		if !errors.As(err, &re) || re.Code == CodeBadRequest || re.Code == CodeRevoked || re.Code == CodeInternal {
			c.dead = true
		}
		return Grant{}, err
	}
	if g.Region != req.Region || g.Op != req.Op {
		c.dead = true
		clear(g.Key[:])
		return Grant{}, fmt.Errorf("keyx: grant for region %#x op %v, asked for region %#x op %v", uint32(g.Region), g.Op, uint32(req.Region), req.Op)
	}
	return g, nil
}

// exchange sends a raw request body and reads the reply.
func (c *Conn) exchange(ctx context.Context, body []byte) (Grant, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(30 * time.Second)
	}
	c.c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	defer clear(c.in[:])
	if err := writeFrame(c.c, c.out[:], body); err != nil {
		return Grant{}, fmt.Errorf("keyx: send request: %w", c.explainAlert(err))
	}
	reply, err := readFrame(c.c, c.in[:], maxFrameLen)
	if err == errFrameEOF {
		return Grant{}, errors.New("keyx: server closed the connection without a reply")
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return Grant{}, fmt.Errorf("keyx: read reply: %w", c.explainAlert(err))
	}
	c.answered = true
	return parseReply(reply)
}

// Close ends the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Fetch dials addr, fetches req's K_d and closes the connection. It retries
// a refused TCP connection (the owner still starting) until ctx ends.
func Fetch(ctx context.Context, addr string, creds *Credentials, req Request) (Grant, error) {
	for {
		c, err := Dial(ctx, addr, creds)
		if err == nil {
			defer c.Close()
			return c.Fetch(ctx, req)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" {
			return Grant{}, err
		}
		select {
		case <-ctx.Done():
			return Grant{}, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
