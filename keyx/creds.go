package keyx

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// DefaultLifetime is how long a CA's certificates are valid when NewCA is
// given no lifetime: a day, for a CA thrown away when its launcher exits.
const DefaultLifetime = 24 * time.Hour

// loopbackHosts are the names every server certificate carries, whatever
// else IssueServer is given, so that a reader on the owner's host can dial
// the Server on loopback.
var loopbackHosts = [...]string{"localhost", "127.0.0.1", "::1"}

// maxBundle bounds a PEM credentials bundle (about 1.8 KB in practice, a
// server certificate with many names more). It is at most one page so that
// Attach's write never blocks on a pipe, even one the kernel shrank to a
// page (pipe-user-pages-soft).
const maxBundle = 4096

// maxHosts bounds the names of one server certificate (its bundle must
// stay within maxBundle).
const maxHosts = 16

// CA is a certificate authority. One made by NewCA lives in its
// creator's memory and its private key is never serialized, so once the
// CA is dropped nobody can issue another certificate it signed; an
// Authority keeps one in a directory instead, to issue and revoke clients
// one at a time.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// until, if set, is when the certificates this CA value issues
	// expire (ValidFor); otherwise they expire with the CA.
	until time.Time
}

// NewCA makes a CA with a fresh ECDSA P-256 key, valid from now for
// lifetime (DefaultLifetime if 0); every certificate it issues expires with
// it, or sooner (ValidFor). name is its common name.
func NewCA(name string, lifetime time.Duration) (*CA, error) {
	return NewCAWithKey(name, lifetime, nil)
}

// NewCAWithKey is NewCA with the CA's private key the caller's (an
// operator's own, LoadCAKey), or a fresh one if key is nil.
func NewCAWithKey(name string, lifetime time.Duration, key *ecdsa.PrivateKey) (*CA, error) {
	if lifetime < 0 {
		return nil, fmt.Errorf("keyx: CA: lifetime %v is negative", lifetime)
	}
	if lifetime == 0 {
		lifetime = DefaultLifetime
	}
	if key != nil && key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("keyx: CA: key on curve %s, want P-256", key.Curve.Params().Name)
	}
	now := time.Now()
	cert, _, key, err := newCertKey(name, now.Add(lifetime), nil, nil, key, func(t *x509.Certificate) {
		t.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		t.BasicConstraintsValid, t.IsCA, t.MaxPathLenZero = true, true, true
	})
	if err != nil {
		return nil, fmt.Errorf("keyx: CA: %w", err)
	}
	return &CA{cert: cert, key: key}, nil
}

// Certificate is the CA's certificate (public).
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// ValidFor is ca issuing certificates valid for d from now (those it
// issues expire then, or with the CA if that is sooner): short-lived
// clients of a lasting CA.
func (ca *CA) ValidFor(d time.Duration) (*CA, error) {
	if d <= 0 {
		return nil, fmt.Errorf("keyx: CA: lifetime %v, want a positive one", d)
	}
	until := time.Now().Add(d)
	if until.After(ca.cert.NotAfter) {
		until = ca.cert.NotAfter
	}
	return &CA{cert: ca.cert, key: ca.key, until: until}, nil
}

// notAfter is when the certificates ca issues expire.
func (ca *CA) notAfter() time.Time {
	if !ca.until.IsZero() {
		return ca.until
	}
	return ca.cert.NotAfter
}

// newCert makes a fresh ECDSA P-256 key and a certificate for it named
// name, valid from a minute ago (clock skew) until notAfter, shaped by
// fill and signed by parent and parentKey (self-signed when parent is nil).
func newCert(name string, notAfter time.Time, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, fill func(*x509.Certificate)) (*x509.Certificate, []byte, *ecdsa.PrivateKey, error) {
	return newCertKey(name, notAfter, parent, parentKey, nil, fill)
}

// newCertKey is newCert for key, or a fresh key if key is nil.
func newCertKey(name string, notAfter time.Time, parent *x509.Certificate, parentKey, key *ecdsa.PrivateKey, fill func(*x509.Certificate)) (*x509.Certificate, []byte, *ecdsa.PrivateKey, error) {
	if key == nil {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, nil, nil, fmt.Errorf("key: %w", err)
		}
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(1)),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"OneRMA keyx"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     notAfter,
	}
	fill(tmpl)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, der, key, nil
}

// IssueServer issues credentials for an owner (a Server): server-auth
// usage only, and the subject alternative names localhost, 127.0.0.1 and
// ::1 plus hosts,
// each a DNS name or an IP address. A reader verifies that the certificate
// names the host it dials (Dial), so hosts must hold every name or address
// readers on other hosts reach the owner by.
func (ca *CA) IssueServer(name string, hosts ...string) (*Credentials, error) {
	if len(hosts) > maxHosts {
		return nil, fmt.Errorf("keyx: server certificate %q: %d hosts, want at most %d", name, len(hosts), maxHosts)
	}
	var dns []string
	var ips []net.IP
	for _, h := range append(loopbackHosts[:], hosts...) {
		if a, err := netip.ParseAddr(h); err == nil {
			if a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
				return nil, fmt.Errorf("keyx: server certificate %q: host %s is not an address a reader can dial", name, h)
			}
			if ip := net.IP(a.AsSlice()); !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		if err := checkDNSName(h); err != nil {
			return nil, fmt.Errorf("keyx: server certificate %q: host %q: %w", name, h, err)
		}
		if h = strings.ToLower(h); !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	return ca.issue(name, func(t *x509.Certificate) {
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		t.DNSNames, t.IPAddresses = dns, ips
	})
}

// checkDNSName accepts a host name as a certificate may carry it: labels
// of letters, digits and inner hyphens, at most 253 bytes, no wildcard.
func checkDNSName(h string) error {
	const want = "not an IP address, nor a DNS name of at most 253 bytes in labels of 1 to 63 letters, digits or inner hyphens"
	if h == "" || len(h) > 253 {
		return errors.New(want)
	}
	for _, l := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q: %s", l, want)
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return fmt.Errorf("label %q: %s", l, want)
			}
		}
	}
	return nil
}

// NewPair makes a CA named name, valid for lifetime (NewCA's default
// for 0), and issues from it one owner's credentials (IssueServer with
// hosts, named name+" server") and one reader's (name+" client"): the
// pair a single owner and its readers need, as tests, benchmarks and
// tools that start both sides use.
func NewPair(name string, lifetime time.Duration, hosts ...string) (server, client *Credentials, err error) {
	ca, err := NewCA(name, lifetime)
	if err != nil {
		return nil, nil, err
	}
	if server, err = ca.IssueServer(name+" server", hosts...); err != nil {
		return nil, nil, err
	}
	if client, err = ca.IssueClient(name + " client"); err != nil {
		return nil, nil, err
	}
	return server, client, nil
}

// IssueClient issues credentials for a reader (Fetch, Dial): client-auth
// usage only, so they cannot serve. addrs, IPv4 engine addresses, become
// the certificate's IP addresses: the initiator addresses the reader may
// ask K_d for under any Permit of its name (Permit.Addrs grants more).
// name is what owners name the reader by in their Permits.
func (ca *CA) IssueClient(name string, addrs ...netip.Addr) (*Credentials, error) {
	if name == "" {
		return nil, errors.New("keyx: client certificate: no name")
	}
	if len(addrs) > maxHosts {
		return nil, fmt.Errorf("keyx: client certificate %q: %d addresses, want at most %d", name, len(addrs), maxHosts)
	}
	var ips []net.IP
	for _, a := range addrs {
		if !unicast4(a) {
			return nil, fmt.Errorf("keyx: client certificate %q: address %v is not a unicast IPv4 address (an engine's)", name, a)
		}
		if ip := net.IP(a.AsSlice()); !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	return ca.issue(name, func(t *x509.Certificate) {
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		t.IPAddresses = ips
	})
}

func (ca *CA) issue(name string, fill func(*x509.Certificate)) (*Credentials, error) {
	leaf, der, key, err := newCert(name, ca.notAfter(), ca.cert, ca.key, func(t *x509.Certificate) {
		t.KeyUsage = x509.KeyUsageDigitalSignature
		fill(t)
	})
	if err != nil {
		return nil, fmt.Errorf("keyx: certificate for %q: %w", name, err)
	}
	return &Credentials{ca: ca.cert, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, nil
}

// Credentials are one party's: the CA certificate it trusts, its own
// certificate and private key. They reach another process over a pipe
// (Attach, Inherited) or in a directory (WriteDir, LoadServer,
// LoadClient); nothing here formats the private key.
type Credentials struct {
	ca   *x509.Certificate
	cert tls.Certificate
	rev  *revocations // server credentials: the CA's revocation list, if any
}

// Name is the common name of the credentials' certificate.
func (c *Credentials) Name() string { return c.cert.Leaf.Subject.CommonName }

// CA is the certificate of the authority the credentials trust.
func (c *Credentials) CA() *x509.Certificate { return c.ca }

// Certificate is the credentials' own certificate (its names, usage and
// expiry).
func (c *Credentials) Certificate() *x509.Certificate { return c.cert.Leaf }

// String names the credentials without their key.
func (c *Credentials) String() string {
	return fmt.Sprintf("keyx credentials %q from CA %q", c.Name(), c.ca.Subject.CommonName)
}

// GoString is String, so that %#v does not print the private key either.
func (c *Credentials) GoString() string { return c.String() }

func (c *Credentials) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.ca)
	return p
}

func hasUsage(c *x509.Certificate, u x509.ExtKeyUsage) bool {
	return slices.Contains(c.ExtKeyUsage, u)
}

// checkRole is what a Server (server true) or a reader requires of its own
// credentials before using them.
func (c *Credentials) checkRole(server bool) error {
	switch {
	case server && !hasUsage(c.cert.Leaf, x509.ExtKeyUsageServerAuth):
		return fmt.Errorf("certificate %q is not a server certificate (no server-auth usage; use server credentials, CA.IssueServer)", c.Name())
	case !server && !hasUsage(c.cert.Leaf, x509.ExtKeyUsageClientAuth):
		return fmt.Errorf("certificate %q is not a client certificate (no client-auth usage; use client credentials, CA.IssueClient)", c.Name())
	}
	return nil
}

// PEM block types of a bundle, in order.
const (
	pemCert = "CERTIFICATE"
	pemKey  = "PRIVATE KEY"
)

// marshalPEM is the bundle: CA certificate, leaf certificate, PKCS #8
// private key. It holds a private key: callers zero it after use.
func (c *Credentials) marshalPEM() ([]byte, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.cert.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("keyx: private key: %w", err)
	}
	defer clear(keyDER)
	var b bytes.Buffer
	b.Grow(maxBundle)
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: c.ca.Raw})
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: c.cert.Certificate[0]})
	pem.Encode(&b, &pem.Block{Type: pemKey, Bytes: keyDER})
	return b.Bytes(), nil
}

// parseCredentials reads a bundle written by marshalPEM: exactly a CA
// certificate, a leaf it signed and the leaf's private key.
// Its errors give the reason alone; callers say where the bundle came
// from.
func parseCredentials(data []byte) (*Credentials, error) {
	var blocks []*pem.Block
	for rest := bytes.TrimSpace(data); len(rest) > 0; rest = bytes.TrimSpace(rest) {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("block %d is not PEM", len(blocks)+1)
		}
		blocks = append(blocks, b)
	}
	defer func() {
		for _, b := range blocks {
			clear(b.Bytes)
		}
	}()
	want := []string{pemCert, pemCert, pemKey}
	if len(blocks) != len(want) {
		return nil, fmt.Errorf("%d PEM blocks, want 3 (CA certificate, certificate, private key)", len(blocks))
	}
	for i, b := range blocks {
		if b.Type != want[i] {
			return nil, fmt.Errorf("PEM block %d is %q, want %q", i+1, b.Type, want[i])
		}
	}
	ca, err := x509.ParseCertificate(bytes.Clone(blocks[0].Bytes))
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, errors.New("first certificate is not a CA")
	}
	leaf, err := x509.ParseCertificate(bytes.Clone(blocks[1].Bytes))
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("certificate not signed by the CA: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(blocks[2].Bytes)
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("private key is %T, want ECDSA P-256", key)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&ek.PublicKey) {
		return nil, errors.New("private key does not match the certificate")
	}
	return &Credentials{ca: ca, cert: tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: ek, Leaf: leaf}}, nil
}

// checkValid reports credentials that are expired or not yet valid at now.
func (c *Credentials) checkValid(now time.Time) error {
	for _, x := range []struct {
		what string
		cert *x509.Certificate
	}{{"CA certificate", c.ca}, {"certificate", c.cert.Leaf}} {
		if now.After(x.cert.NotAfter) {
			return fmt.Errorf("%s %q expired at %s", x.what, x.cert.Subject.CommonName, x.cert.NotAfter.UTC().Format(time.RFC3339))
		}
		if now.Before(x.cert.NotBefore) {
			return fmt.Errorf("%s %q is not valid before %s (check the clock)", x.what, x.cert.Subject.CommonName, x.cert.NotBefore.UTC().Format(time.RFC3339))
		}
	}
	return nil
}
