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
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

// ServerName is the name every owner's certificate carries and every
// reader verifies (the server listens on loopback; the name, not the
// address, is what is checked).
const ServerName = "keyx.onerma.internal"

// certLifetime bounds every certificate: the CA is thrown away when its
// launcher exits, so a day is plenty.
const certLifetime = 24 * time.Hour

// maxBundle bounds a PEM credentials bundle (about 1.7 KB in practice). It
// is at most one page so that Attach's write never blocks on a pipe, even
// one the kernel shrank to a page (pipe-user-pages-soft).
const maxBundle = 4096

// CA is a throwaway certificate authority that lives in its launcher's
// memory: its private key is never serialized.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA with a fresh ECDSA P-256 key. name is its common name.
func NewCA(name string) (*CA, error) {
	cert, _, key, err := newCert(name, nil, nil, func(t *x509.Certificate) {
		t.KeyUsage = x509.KeyUsageCertSign
		t.BasicConstraintsValid, t.IsCA, t.MaxPathLenZero = true, true, true
	})
	if err != nil {
		return nil, fmt.Errorf("keyx: CA: %w", err)
	}
	return &CA{cert: cert, key: key}, nil
}

// newCert makes a fresh ECDSA P-256 key and a certificate for it named
// name, valid for certLifetime, shaped by fill and signed by parent and
// parentKey (self-signed when parent is nil).
func newCert(name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, fill func(*x509.Certificate)) (*x509.Certificate, []byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial.Add(serial, big.NewInt(1)),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"OneRMA keyx"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certLifetime),
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
// usage, DNS name ServerName and the loopback addresses.
func (ca *CA) IssueServer(name string) (*Credentials, error) { return ca.issue(name, true) }

// IssueClient issues credentials for a reader (Fetch, Dial): client-auth
// usage only, so they cannot serve.
func (ca *CA) IssueClient(name string) (*Credentials, error) { return ca.issue(name, false) }

func (ca *CA) issue(name string, server bool) (*Credentials, error) {
	leaf, der, key, err := newCert(name, ca.cert, ca.key, func(t *x509.Certificate) {
		t.KeyUsage = x509.KeyUsageDigitalSignature
		t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		if server {
			t.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
			t.DNSNames = []string{ServerName}
			t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("keyx: certificate for %q: %w", name, err)
	}
	return &Credentials{ca: ca.cert, cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}, nil
}

// Credentials are one party's: the CA certificate it trusts, its own
// certificate and private key. They never reach a file: Attach hands them
// to a child over a pipe, Inherited reads them there.
type Credentials struct {
	ca   *x509.Certificate
	cert tls.Certificate
}

// Name is the common name of the credentials' certificate.
func (c *Credentials) Name() string { return c.cert.Leaf.Subject.CommonName }

// CA is the certificate of the authority the credentials trust.
func (c *Credentials) CA() *x509.Certificate { return c.ca }

func (c *Credentials) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.ca)
	return p
}

// PEM block types of a bundle, in order.
const (
	pemCert = "CERTIFICATE"
	pemKey  = "PRIVATE KEY"
)

// marshalPEM is the bundle: CA certificate, leaf certificate, PKCS #8
// private key. It holds a private key: callers zero it after use and never
// write it to a file.
func (c *Credentials) marshalPEM() ([]byte, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.cert.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("keyx: private key: %w", err)
	}
	defer clear(keyDER)
	var b bytes.Buffer
	b.Grow(2048)
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: c.ca.Raw})
	pem.Encode(&b, &pem.Block{Type: pemCert, Bytes: c.cert.Certificate[0]})
	pem.Encode(&b, &pem.Block{Type: pemKey, Bytes: keyDER})
	return b.Bytes(), nil
}

// parseCredentials reads a bundle written by marshalPEM: exactly a CA
// certificate, a leaf it signed and the leaf's private key.
func parseCredentials(data []byte) (*Credentials, error) {
	var blocks []*pem.Block
	for rest := bytes.TrimSpace(data); len(rest) > 0; rest = bytes.TrimSpace(rest) {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, fmt.Errorf("keyx: credentials: block %d is not PEM", len(blocks)+1)
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
		return nil, fmt.Errorf("keyx: credentials: %d PEM blocks, want 3 (CA certificate, certificate, private key)", len(blocks))
	}
	for i, b := range blocks {
		if b.Type != want[i] {
			return nil, fmt.Errorf("keyx: credentials: PEM block %d is %q, want %q", i+1, b.Type, want[i])
		}
	}
	ca, err := x509.ParseCertificate(bytes.Clone(blocks[0].Bytes))
	if err != nil {
		return nil, fmt.Errorf("keyx: credentials: CA certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, errors.New("keyx: credentials: first certificate is not a CA")
	}
	leaf, err := x509.ParseCertificate(bytes.Clone(blocks[1].Bytes))
	if err != nil {
		return nil, fmt.Errorf("keyx: credentials: certificate: %w", err)
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("keyx: credentials: certificate not signed by the CA: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(blocks[2].Bytes)
	if err != nil {
		return nil, fmt.Errorf("keyx: credentials: private key: %w", err)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("keyx: credentials: private key is %T, want ECDSA P-256", key)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&ek.PublicKey) {
		return nil, errors.New("keyx: credentials: private key does not match the certificate")
	}
	return &Credentials{ca: ca, cert: tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: ek, Leaf: leaf}}, nil
}

// Attach arranges for cmd's process to inherit c over a pipe: it writes
// the PEM bundle into a new pipe, closes the write end and adds the read
// end to cmd.ExtraFiles. It returns the descriptor number the child sees
// (pass it on the child's command line; the number is not a secret) and a
// function to call once cmd has started (or failed to), which closes the
// parent's copy of the read end. Call it before cmd.Start.
func Attach(cmd *exec.Cmd, c *Credentials) (fd int, closeAfterStart func(), err error) {
	data, err := c.marshalPEM()
	if err != nil {
		return -1, nil, err
	}
	defer clear(data)
	if len(data) > maxBundle {
		return -1, nil, fmt.Errorf("keyx: credentials bundle of %d bytes, want at most %d", len(data), maxBundle)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, nil, fmt.Errorf("keyx: credentials pipe: %w", err)
	}
	_, err = w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return -1, nil, fmt.Errorf("keyx: credentials pipe: %w", err)
	}
	fd = 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	return fd, func() { r.Close() }, nil
}

// Inherited reads the credentials a launcher passed with Attach on
// descriptor fd, then closes it. fd must be a pipe or a socket, never a
// regular file.
func Inherited(fd int) (*Credentials, error) {
	if fd < 3 {
		return nil, fmt.Errorf("keyx: credentials fd %d: want an inherited descriptor (3 or more)", fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("keyx: credentials fd %d: %w", fd, err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFIFO && t != unix.S_IFSOCK {
		unix.Close(fd)
		return nil, fmt.Errorf("keyx: credentials fd %d is not a pipe or socket (mode %#o)", fd, st.Mode)
	}
	f := os.NewFile(uintptr(fd), "keyx-credentials")
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
	defer clear(data)
	if err != nil {
		return nil, fmt.Errorf("keyx: credentials fd %d: %w", fd, err)
	}
	if len(data) > maxBundle {
		return nil, fmt.Errorf("keyx: credentials fd %d: more than %d bytes", fd, maxBundle)
	}
	return parseCredentials(data)
}
