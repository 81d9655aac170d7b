package keyx

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"sync"
	"syscall"
	"time"
)

// maxRevocationList bounds a revocation list file (an entry is about 40
// bytes: some 25,000 revoked certificates).
const maxRevocationList = 1 << 20

// pemCRL is the PEM block type of a revocation list.
const pemCRL = "X509 CRL"

// RevokedError says that the CA revoked a client's certificate: a Server
// refuses it with CodeRevoked, kv's update RPC with its own refusal.
type RevokedError struct {
	Name   string    // the certificate's subject common name
	Serial *big.Int  // its serial number
	At     time.Time // when the CA revoked it
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("certificate %q (serial %#x) was revoked by the CA at %s", e.Name, e.Serial, e.At.UTC().Format(time.RFC3339))
}

// fileStamp tells whether a file changed since it was read: another
// inode (a rename over it), size or modification time.
type fileStamp struct {
	dev, ino uint64
	size     int64
	mtime    syscall.Timespec
}

func stampOf(st fs.FileInfo) fileStamp {
	s := st.Sys().(*syscall.Stat_t)
	return fileStamp{dev: uint64(s.Dev), ino: s.Ino, size: s.Size, mtime: s.Mtim}
}

// revocations is a CA's revocation list (an X.509 CRL) in a file, read
// again whenever the file changes. A list that cannot be read, is not
// signed by the CA, has passed its NextUpdate, is older (a lower CRL
// number) than one read before, or has been removed after it was read,
// refuses every client until it is fixed: a server never serves a client
// it cannot tell is not revoked. A file that has never existed revokes
// nothing (a directory of an older rmactl).
type revocations struct {
	path string
	ca   *x509.Certificate

	mu      sync.Mutex
	seen    bool // a list was read from path
	stamp   fileStamp
	serials map[string]time.Time // serial (hex) -> revocation time
	number  *big.Int             // the CRL number of the list read
	next    time.Time            // its NextUpdate
	err     error                // why the file as it is cannot be used
}

func newRevocations(path string, ca *x509.Certificate) *revocations {
	return &revocations{path: path, ca: ca}
}

// check reports whether cert is revoked (a *RevokedError), or why the
// list cannot tell.
func (r *revocations) check(cert *x509.Certificate, now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := os.Stat(r.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !r.seen:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("revocation list %s was removed after it was read: refusing every client until it is back", r.path)
	case err != nil:
		return fmt.Errorf("revocation list: %w", err)
	}
	if stamp := stampOf(st); !r.seen || stamp != r.stamp || r.err != nil {
		r.load(stamp)
	}
	if r.err != nil {
		return r.err
	}
	if !r.next.IsZero() && now.After(r.next) {
		return fmt.Errorf("revocation list %s expired at %s: the CA must issue a new one", r.path, r.next.UTC().Format(time.RFC3339))
	}
	if at, ok := r.serials[cert.SerialNumber.Text(16)]; ok {
		return &RevokedError{Name: cert.Subject.CommonName, Serial: cert.SerialNumber, At: at}
	}
	return nil
}

// load reads the list whose file has stamp, keeping the last good one's
// number to refuse an older list.
func (r *revocations) load(stamp fileStamp) {
	rl, err := readRevocationList(r.path, r.ca)
	if err == nil && r.number != nil && rl.Number != nil && rl.Number.Cmp(r.number) < 0 {
		err = fmt.Errorf("revocation list %s: number %v is older than number %v read before", r.path, rl.Number, r.number)
	}
	r.seen, r.stamp, r.err = true, stamp, err
	if err != nil {
		return
	}
	serials := make(map[string]time.Time, len(rl.RevokedCertificateEntries))
	for _, e := range rl.RevokedCertificateEntries {
		serials[e.SerialNumber.Text(16)] = e.RevocationTime
	}
	r.serials, r.number, r.next = serials, rl.Number, rl.NextUpdate
}

// readRevocationList reads and verifies the CRL in path: one PEM block,
// signed by ca.
func readRevocationList(path string, ca *x509.Certificate) (*x509.RevocationList, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("revocation list: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRevocationList+1))
	if err != nil {
		return nil, fmt.Errorf("revocation list %s: %w", path, err)
	}
	if len(data) > maxRevocationList {
		return nil, fmt.Errorf("revocation list %s: more than %d bytes", path, maxRevocationList)
	}
	b, rest := pem.Decode(data)
	if b == nil || b.Type != pemCRL || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("revocation list %s: want one PEM block of type %q", path, pemCRL)
	}
	rl, err := x509.ParseRevocationList(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("revocation list %s: %w", path, err)
	}
	if err := rl.CheckSignatureFrom(ca); err != nil {
		return nil, fmt.Errorf("revocation list %s is not signed by the CA %q: %w", path, ca.Subject.CommonName, err)
	}
	return rl, nil
}

// WithRevocationFile is c (server credentials) refusing the clients whose
// certificates the CA revoked in the list at path (an X.509 CRL in PEM,
// `rmactl creds revoke` writes it): ServerTLS, and CheckClient. The file
// is read again whenever it changes. LoadServer gives credentials of the
// RevocationFile beside ServerFile.
func (c *Credentials) WithRevocationFile(path string) *Credentials {
	cc := *c
	cc.rev = newRevocations(path, c.ca)
	return &cc
}

// RevocationPath is the revocation list c checks clients against ("" if
// none).
func (c *Credentials) RevocationPath() string {
	if c.rev == nil {
		return ""
	}
	return c.rev.path
}

// CheckClient says why the holder of a client certificate that completed
// a handshake with these (server) credentials must not be served: its
// certificate was revoked (a *RevokedError), or the revocation list
// cannot be read (then every client is refused). nil when it may be
// served, or when the credentials have no revocation list.
func (c *Credentials) CheckClient(cert *x509.Certificate) error {
	if c.rev == nil {
		return nil
	}
	return c.rev.check(cert, time.Now())
}
