package keyx

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The files an Authority adds to a credentials directory.
const (
	// CAKeyFile is the CA's private key (PKCS #8 PEM, mode 0600), unless
	// the operator keeps it elsewhere (CreateAuthority's keyPath). Whoever
	// reads it can issue clients every owner of the CA trusts: keep the
	// directory on an administrator's host, or the key apart from it.
	CAKeyFile = "ca-key.pem"
	// IssuedDir holds a copy of every certificate the CA issued (public;
	// one PEM file each, named by the time it was issued and its serial
	// number in hex): what revocation by name looks up.
	IssuedDir = "issued"
)

// maxKeyFile bounds a CA key file.
const maxKeyFile = 4096

// Authority is a CA kept in a credentials directory, so that clients can
// be issued one at a time, with names and lifetimes of their own, and
// revoked: the CA's certificate (CAFile), its private key (CAKeyFile, or
// a file of the operator's), its revocation list (RevocationFile) and a
// copy of each certificate it issued (IssuedDir). `rmactl creds DIR`
// creates one; `rmactl creds issue` and `rmactl creds revoke` open it.
type Authority struct {
	dir, keyPath string
	ca           *CA
}

// IssuedCert is a certificate an Authority issued, and when it was
// revoked (zero if it was not).
type IssuedCert struct {
	Cert    *x509.Certificate
	Revoked time.Time
}

// Client reports whether the certificate is a client's (client-auth).
func (ic *IssuedCert) Client() bool { return hasUsage(ic.Cert, x509.ExtKeyUsageClientAuth) }

// LoadCAKey reads an ECDSA P-256 private key (PEM: PKCS #8 "PRIVATE KEY",
// or SEC 1 "EC PRIVATE KEY" as `openssl ecparam -genkey` writes it) from
// path, refusing a file others may read or write as LoadFile does.
func LoadCAKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := readPrivate("CA key", path, maxKeyFile)
	defer clear(data)
	if err != nil {
		return nil, err
	}
	var key any
	b, rest := pem.Decode(bytes.TrimSpace(data))
	switch {
	case b == nil || len(bytes.TrimSpace(rest)) != 0:
		err = errors.New("want one PEM block")
	case b.Type == pemKey:
		key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case b.Type == "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		err = fmt.Errorf("PEM block %q, want %q or \"EC PRIVATE KEY\"", b.Type, pemKey)
	}
	if b != nil {
		clear(b.Bytes)
	}
	if err != nil {
		return nil, fmt.Errorf("keyx: CA key %s: %w", path, err)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("keyx: CA key %s: %T, want an ECDSA P-256 key", path, key)
	}
	return ek, nil
}

// CreateAuthority keeps ca in dir together with server's and client's
// credentials, as `rmactl creds DIR` does: WriteDir's files, ca's private
// key in keyPath (dir/CAKeyFile when ""), an empty revocation list and the
// two certificates in IssuedDir. A keyPath that exists already must hold
// ca's key (the operator's, NewCAWithKey) and is left as it is. Unless
// replace is set, it refuses, before writing anything, when any file of
// dir it would write exists, with an error errors.Is matches to
// fs.ErrExist.
func CreateAuthority(dir, keyPath string, ca *CA, server, client *Credentials, replace bool) (*Authority, error) {
	if keyPath == "" {
		keyPath = filepath.Join(dir, CAKeyFile)
	}
	if server == nil || client == nil || !server.ca.Equal(ca.cert) || !client.ca.Equal(ca.cert) {
		return nil, fmt.Errorf("keyx: write %s: want server and client credentials from the CA kept", dir)
	}
	operatorKey := false
	if _, err := os.Lstat(keyPath); err == nil && keyPath != filepath.Join(dir, CAKeyFile) {
		k, err := LoadCAKey(keyPath)
		if err != nil {
			return nil, err
		}
		if !k.PublicKey.Equal(&ca.key.PublicKey) {
			return nil, fmt.Errorf("keyx: CA key %s is not the key of CA %q", keyPath, ca.cert.Subject.CommonName)
		}
		operatorKey = true
	}
	if err := privateDir(dir); err != nil {
		return nil, err
	}
	if !replace {
		// Named as in dir, the key by its path when it is elsewhere.
		paths := map[string]string{}
		names := []string{CAFile, ServerFile, ClientFile, RevocationFile, IssuedDir}
		for _, n := range names {
			paths[n] = filepath.Join(dir, n)
		}
		if !operatorKey {
			n := keyPath
			if filepath.Dir(keyPath) == filepath.Clean(dir) {
				n = filepath.Base(keyPath)
			}
			names = append(names, n)
			paths[n] = keyPath
		}
		var exist []string
		for _, n := range names {
			if _, err := os.Lstat(paths[n]); err == nil {
				exist = append(exist, n)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("keyx: write %s: %w", dir, err)
			}
		}
		if len(exist) > 0 {
			return nil, fmt.Errorf("keyx: write %s: %s: %w; refusing to replace credentials", dir, strings.Join(exist, ", "), fs.ErrExist)
		}
	}
	if err := WriteDir(dir, server, client, replace); err != nil {
		return nil, err
	}
	a := &Authority{dir: dir, keyPath: keyPath, ca: ca}
	if !operatorKey {
		der, err := x509.MarshalPKCS8PrivateKey(ca.key)
		if err != nil {
			return nil, fmt.Errorf("keyx: CA key: %w", err)
		}
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: pemKey, Bytes: der})
		clear(der)
		err = writeFile(filepath.Dir(keyPath), filepath.Base(keyPath), keyPEM, replace)
		clear(keyPEM)
		if err != nil {
			return nil, err
		}
	}
	// The certificates of a CA replaced are no longer this CA's.
	if err := os.RemoveAll(filepath.Join(dir, IssuedDir)); err != nil {
		return nil, fmt.Errorf("keyx: write %s: %w", dir, err)
	}
	if err := a.writeRevocations(nil, big.NewInt(1), replace); err != nil {
		return nil, err
	}
	for _, c := range []*Credentials{server, client} {
		if err := a.record(c.cert.Leaf); err != nil {
			return nil, err
		}
	}
	return a, syncDir(dir)
}

// OpenAuthority opens the CA kept in dir (CreateAuthority): its
// certificate dir/CAFile and its key in keyPath (dir/CAKeyFile when ""),
// which must match, the CA still valid.
func OpenAuthority(dir, keyPath string) (*Authority, error) {
	if keyPath == "" {
		keyPath = filepath.Join(dir, CAKeyFile)
	}
	if err := checkPrivateDir(dir); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("keyx: CA: %w", err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != pemCert {
		return nil, fmt.Errorf("keyx: CA %s: want a PEM certificate", filepath.Join(dir, CAFile))
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("keyx: CA %s: %w", filepath.Join(dir, CAFile), err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("keyx: CA %s: not a CA certificate", filepath.Join(dir, CAFile))
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("keyx: CA %q expired at %s: run rmactl creds again (a new CA)", cert.Subject.CommonName, cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := LoadCAKey(keyPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (the CA's key: %s holds no kept CA; -ca-key names a key kept elsewhere)", err, dir)
		}
		return nil, err
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("keyx: CA key %s is not the key of the CA in %s", keyPath, filepath.Join(dir, CAFile))
	}
	return &Authority{dir: dir, keyPath: keyPath, ca: &CA{cert: cert, key: key}}, nil
}

// checkPrivateDir is privateDir for a directory that must exist.
func checkPrivateDir(dir string) error {
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("keyx: %w", err)
	}
	return privateDir(dir)
}

// CA is the authority's CA.
func (a *Authority) CA() *CA { return a.ca }

// Dir is the authority's directory.
func (a *Authority) Dir() string { return a.dir }

// IssueClient issues a client's credentials (CA.IssueClient: its name,
// its engines' addresses) valid for lifetime from now (or until the CA
// expires, if sooner), and records the certificate in IssuedDir.
func (a *Authority) IssueClient(name string, lifetime time.Duration, addrs ...netip.Addr) (*Credentials, error) {
	ca, err := a.ca.ValidFor(lifetime)
	if err != nil {
		return nil, err
	}
	c, err := ca.IssueClient(name, addrs...)
	if err != nil {
		return nil, err
	}
	if err := a.record(c.cert.Leaf); err != nil {
		return nil, err
	}
	return c, nil
}

// record writes cert into IssuedDir, named by the time it is written
// (to the nanosecond: names sort in the order issued, which the
// certificates' own times, to the second, do not tell) and its serial.
func (a *Authority) record(cert *x509.Certificate) error {
	d := filepath.Join(a.dir, IssuedDir)
	if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("keyx: write %s: %w", d, err)
	}
	name := time.Now().UTC().Format("20060102T150405.000000000Z") + "-" + cert.SerialNumber.Text(16) + ".pem"
	return writeFile(d, name, pem.EncodeToMemory(&pem.Block{Type: pemCert, Bytes: cert.Raw}), false)
}

// Issued lists the certificates the authority issued, oldest first, with
// their revocation times.
func (a *Authority) Issued() ([]IssuedCert, error) {
	d := filepath.Join(a.dir, IssuedDir)
	ents, err := os.ReadDir(d)
	if err != nil {
		return nil, fmt.Errorf("keyx: %w", err)
	}
	rl, err := readRevocationList(filepath.Join(a.dir, RevocationFile), a.ca.cert)
	if err != nil {
		return nil, fmt.Errorf("keyx: %w", err)
	}
	revoked := map[string]time.Time{}
	for _, e := range rl.RevokedCertificateEntries {
		revoked[e.SerialNumber.Text(16)] = e.RevocationTime
	}
	// ReadDir sorts by name: in the order issued.
	var out []IssuedCert
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".pem") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(d, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("keyx: %w", err)
		}
		b, _ := pem.Decode(data)
		if b == nil || b.Type != pemCert {
			return nil, fmt.Errorf("keyx: %s: want a PEM certificate", filepath.Join(d, e.Name()))
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("keyx: %s: %w", filepath.Join(d, e.Name()), err)
		}
		if cert.CheckSignatureFrom(a.ca.cert) != nil {
			return nil, fmt.Errorf("keyx: %s: not issued by the CA", filepath.Join(d, e.Name()))
		}
		out = append(out, IssuedCert{Cert: cert, Revoked: revoked[cert.SerialNumber.Text(16)]})
	}
	return out, nil
}

// Revoke revokes the client certificates the authority issued that match:
// the one of serial (when not nil), or else every one issued to name not
// revoked yet. It writes the new revocation list (RevocationFile, its
// number one more) and returns the certificates it revoked. It refuses a
// server certificate (readers do not check revocation: make a new CA), a
// serial it did not issue, one already revoked, and a name with nothing
// left to revoke.
func (a *Authority) Revoke(name string, serial *big.Int) ([]*x509.Certificate, error) {
	// One revocation at a time: each rewrites the list it read.
	d, err := os.Open(a.dir)
	if err != nil {
		return nil, fmt.Errorf("keyx: %w", err)
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("keyx: lock %s: %w", a.dir, err)
	}
	issued, err := a.Issued()
	if err != nil {
		return nil, err
	}
	var pick []*x509.Certificate
	for _, ic := range issued {
		switch {
		case serial != nil && ic.Cert.SerialNumber.Cmp(serial) == 0:
			if !ic.Client() {
				return nil, fmt.Errorf("keyx: certificate %#x (%q) is a server certificate: readers do not check revocation; run rmactl creds again (a new CA) to replace it", serial, ic.Cert.Subject.CommonName)
			}
			if !ic.Revoked.IsZero() {
				return nil, fmt.Errorf("keyx: certificate %#x (%q) was revoked already, at %s", serial, ic.Cert.Subject.CommonName, ic.Revoked.UTC().Format(time.RFC3339))
			}
			pick = append(pick, ic.Cert)
		case serial == nil && ic.Cert.Subject.CommonName == name && ic.Client() && ic.Revoked.IsZero():
			pick = append(pick, ic.Cert)
		}
	}
	if len(pick) == 0 {
		if serial != nil {
			return nil, fmt.Errorf("keyx: no certificate of serial %#x was issued from %s", serial, a.dir)
		}
		return nil, fmt.Errorf("keyx: no client certificate issued to %q from %s is left to revoke", name, a.dir)
	}
	rl, err := readRevocationList(filepath.Join(a.dir, RevocationFile), a.ca.cert)
	if err != nil {
		return nil, fmt.Errorf("keyx: %w", err)
	}
	entries := slices.Clone(rl.RevokedCertificateEntries)
	now := time.Now().UTC().Truncate(time.Second)
	for _, c := range pick {
		entries = append(entries, x509.RevocationListEntry{SerialNumber: c.SerialNumber, RevocationTime: now})
	}
	number := big.NewInt(1)
	if rl.Number != nil {
		number.Add(rl.Number, number)
	}
	if err := a.writeRevocations(entries, number, true); err != nil {
		return nil, err
	}
	return pick, nil
}

// writeRevocations signs and writes the revocation list of entries, with
// number, valid until the CA expires.
func (a *Authority) writeRevocations(entries []x509.RevocationListEntry, number *big.Int, replace bool) error {
	now := time.Now().UTC()
	der, err := x509.CreateRevocationList(rand.Reader, &x509.RevocationList{
		Number: number, ThisUpdate: now.Add(-time.Minute), NextUpdate: a.ca.cert.NotAfter,
		RevokedCertificateEntries: entries,
	}, a.ca.cert, a.ca.key)
	if err != nil {
		return fmt.Errorf("keyx: revocation list: %w", err)
	}
	return writeFile(a.dir, RevocationFile, pem.EncodeToMemory(&pem.Block{Type: pemCRL, Bytes: der}), replace)
}

// WriteClientDir writes a client's credentials into dir as ClientFile
// (mode 0600; dir created mode 0700, or an existing one of this user's
// that group and others cannot enter): what a reader's host loads with
// LoadClient. Unless replace is set it refuses to replace an existing
// file (errors.Is fs.ErrExist).
func WriteClientDir(dir string, client *Credentials, replace bool) error {
	if err := client.checkRole(false); err != nil {
		return fmt.Errorf("keyx: write %s: %w", dir, err)
	}
	if err := privateDir(dir); err != nil {
		return err
	}
	data, err := client.marshalPEM()
	if err != nil {
		return err
	}
	defer clear(data)
	if err := writeFile(dir, ClientFile, data, replace); err != nil {
		return err
	}
	return syncDir(dir)
}
