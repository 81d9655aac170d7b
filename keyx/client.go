package keyx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"
)

// Conn is a reader's TLS connection to an owner's Server.
type Conn struct {
	c    *tls.Conn
	in   [2 + maxFrameLen]byte
	out  [2 + maxFrameLen]byte
	dead bool
}

// Dial connects to the Server at addr (host:port) with creds (from
// CA.IssueClient) and completes the TLS 1.3 handshake, verifying that the
// server's certificate is from creds' CA, is a server certificate and
// names ServerName. With TLS 1.3 the server checks the client's
// certificate after the client's handshake is done: a refusal shows on
// the first Fetch.
func Dial(ctx context.Context, addr string, creds *Credentials) (*Conn, error) {
	if creds == nil {
		return nil, errors.New("keyx: dial: no credentials")
	}
	if !hasUsage(creds.cert.Leaf, x509.ExtKeyUsageClientAuth) {
		return nil, fmt.Errorf("keyx: dial: certificate %q is not a client certificate (use CA.IssueClient)", creds.Name())
	}
	d := tls.Dialer{Config: &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{creds.cert},
		RootCAs:      creds.pool(),
		ServerName:   ServerName,
	}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("keyx: dial %s: %w", addr, err)
	}
	return &Conn{c: c.(*tls.Conn)}, nil
}

// Peer is the server's certificate.
func (c *Conn) Peer() *x509.Certificate { return c.c.ConnectionState().PeerCertificates[0] }

// Fetch asks for req's K_d. A refusal is a *RefusedError (errors.Is with
// ErrUnknownRegion, ...); after a malformed exchange, a bad-request refusal
// or a transport error the connection is unusable.
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
		if !errors.As(err, &re) || re.Code == CodeBadRequest {
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
		return Grant{}, fmt.Errorf("keyx: send request: %w", err)
	}
	reply, err := readFrame(c.c, c.in[:], maxFrameLen)
	if err == errFrameEOF {
		return Grant{}, errors.New("keyx: server closed the connection without a reply")
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return Grant{}, fmt.Errorf("keyx: read reply: %w", err)
	}
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
