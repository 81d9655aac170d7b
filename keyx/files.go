package keyx

import (
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The files of a credentials directory (WriteDir writes them, `rmactl
// creds DIR` calls it). Each holds PEM; each is mode 0600 in a directory
// of mode 0700.
const (
	// CAFile is the CA's certificate alone (public; for inspection, e.g.
	// `openssl verify -CAfile ca.pem`). The CA's private key is in no
	// file.
	CAFile = "ca.pem"
	// ServerFile is the owner's bundle (LoadServer): the CA's
	// certificate, the server certificate, its private key. It stays on
	// the owner's host.
	ServerFile = "server.pem"
	// ClientFile is a reader's bundle (LoadClient): the CA's
	// certificate, the client certificate, its private key. Copy it to
	// every reader's host.
	ClientFile = "client.pem"
	// RevocationFile is the CA's revocation list (an X.509 CRL, PEM):
	// `rmactl creds revoke` writes it, servers loading the directory
	// (LoadServer) refuse the clients it names. Public; copy it to every
	// server's directory when it changes.
	RevocationFile = "crl.pem"
)

// WriteDir writes server's and client's credentials (from one CA) into
// dir as ServerFile and ClientFile, and their CA's certificate as CAFile,
// each mode 0600. dir is created mode 0700 if missing (with any missing
// parents, mode 0700 less the umask); an existing dir
// must be a directory of this user's that group and others cannot enter
// (mode 0700 or stricter). Unless replace is set, WriteDir refuses, before
// writing anything, when any of the three files exists, with an error
// that errors.Is matches to fs.ErrExist. Each file appears
// whole or not at all (written aside, then linked or renamed into place).
func WriteDir(dir string, server, client *Credentials, replace bool) error {
	if server == nil || client == nil {
		return fmt.Errorf("keyx: write %s: want server and client credentials", dir)
	}
	if err := server.checkRole(true); err != nil {
		return fmt.Errorf("keyx: write %s: server credentials: %w", dir, err)
	}
	if err := client.checkRole(false); err != nil {
		return fmt.Errorf("keyx: write %s: client credentials: %w", dir, err)
	}
	if !server.ca.Equal(client.ca) {
		return fmt.Errorf("keyx: write %s: server credentials are from CA %q, client credentials from another, %q", dir, server.ca.Subject.CommonName, client.ca.Subject.CommonName)
	}
	if err := privateDir(dir); err != nil {
		return err
	}
	names := []string{CAFile, ServerFile, ClientFile}
	if !replace {
		var exist []string
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
				exist = append(exist, n)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("keyx: write %s: %w", dir, err)
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("keyx: write %s: %s: %w; refusing to replace credentials", dir, strings.Join(exist, ", "), fs.ErrExist)
		}
	}
	srvPEM, err := server.marshalPEM()
	if err != nil {
		return err
	}
	defer clear(srvPEM)
	cliPEM, err := client.marshalPEM()
	if err != nil {
		return err
	}
	defer clear(cliPEM)
	for _, b := range [][]byte{srvPEM, cliPEM} {
		if len(b) > maxBundle {
			return fmt.Errorf("keyx: write %s: credentials bundle of %d bytes, want at most %d (fewer server hosts)", dir, len(b), maxBundle)
		}
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: pemCert, Bytes: server.ca.Raw})
	for i, b := range [][]byte{caPEM, srvPEM, cliPEM} {
		if err := writeFile(dir, names[i], b, replace); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// privateDir makes sure dir is a directory of this user's with no access
// for group or others, creating it (mode 0700) if missing.
func privateDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("keyx: write %s: %w", dir, err)
		}
		// The umask may have taken bits away; set exactly 0700.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("keyx: write %s: %w", dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("keyx: write %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("keyx: write %s: not a directory", dir)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		return fmt.Errorf("keyx: write %s: directory owned by uid %d, not by this user (uid %d)", dir, uid, os.Geteuid())
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("keyx: write %s: directory mode %04o lets group or others in; want 0700 (chmod 700 %s, or name a new directory)", dir, m, dir)
	}
	return nil
}

// writeFile writes data to dir/name, mode 0600: into a temporary file
// first, then renamed over name (replace) or linked to it (fails if name
// exists).
func writeFile(dir, name string, data []byte, replace bool) (err error) {
	path := filepath.Join(dir, name)
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("keyx: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("keyx: write %s: %w", path, err)
	}
	if replace {
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("keyx: write %s: %w", path, err)
		}
		return nil
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("keyx: write %s: %w (it appeared meanwhile); refusing to replace credentials", path, fs.ErrExist)
		}
		return fmt.Errorf("keyx: write %s: %w", path, err)
	}
	return os.Remove(tmp)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("keyx: write %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("keyx: write %s: %w", dir, err)
	}
	return nil
}

// DefaultClient is the name of the client certificate `rmactl creds DIR`
// issues into DIR/ClientFile.
const DefaultClient = "onerma-client"

// DirPermit is the permit a tool serving with the credentials of dir
// grants when told nothing else (rmaperf server, rmakv server): the
// client whose credentials dir/ClientFile holds (DefaultClient when dir
// is "" or holds none) gets ops on every region, for any initiator
// address, since its readers' engine addresses were not known when
// `rmactl creds DIR` ran.
func DirPermit(dir string, ops Ops) (Permit, error) {
	p := Permit{Client: DefaultClient, Ops: ops, Addrs: []netip.Prefix{AnyAddress}}
	if dir == "" {
		return p, nil
	}
	c, err := LoadClient(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return p, nil
	case err != nil:
		return Permit{}, fmt.Errorf("%w (the client granted by default is the one of %s)", err, ClientFile)
	}
	p.Client = c.Name()
	return p, nil
}

// LoadServer reads an owner's credentials from dir/ServerFile (LoadFile)
// and checks that they are server credentials. They refuse the clients
// the CA revoked in dir/RevocationFile (WithRevocationFile), read again
// whenever it changes.
func LoadServer(dir string) (*Credentials, error) {
	c, err := loadRole(dir, ServerFile, true)
	if err != nil {
		return nil, err
	}
	return c.WithRevocationFile(filepath.Join(dir, RevocationFile)), nil
}

// LoadClient reads a reader's credentials from dir/ClientFile (LoadFile)
// and checks that they are client credentials.
func LoadClient(dir string) (*Credentials, error) { return loadRole(dir, ClientFile, false) }

func loadRole(dir, name string, server bool) (*Credentials, error) {
	path := filepath.Join(dir, name)
	c, err := LoadFile(path)
	if err != nil {
		return nil, err
	}
	if err := c.checkRole(server); err != nil {
		return nil, fmt.Errorf("keyx: credentials %s: %w", path, err)
	}
	return c, nil
}

// LoadFile reads a credentials bundle (PEM: the CA's certificate, a
// certificate it signed, that certificate's ECDSA P-256 private key in
// PKCS #8) from path. It refuses, with an error naming the reason, a file
// that is not a regular file, that group or others may read or write (want
// mode 0600 or stricter), that belongs to another user (root's are
// accepted), in a directory group or others may write to (without the
// sticky bit), larger than 4 KB, malformed, or whose certificates have
// expired or are not yet valid.
func LoadFile(path string) (*Credentials, error) {
	data, err := readPrivate("credentials", path, maxBundle)
	defer clear(data)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) (*Credentials, error) {
		return nil, fmt.Errorf("keyx: credentials %s: "+format, append([]any{path}, args...)...)
	}
	c, err := parseCredentials(data)
	if err != nil {
		return fail("%w", err)
	}
	if err := c.checkValid(time.Now()); err != nil {
		return fail("%w", err)
	}
	return c, nil
}

// readPrivate reads a file that holds a private key (what names it in
// errors, e.g. "credentials"), of at most limit bytes, refusing one that
// is not a regular file, that group or others may read or write, that
// belongs to another user (root's are accepted), or in a directory group
// or others may write to (without the sticky bit). Callers zero what it
// returns.
func readPrivate(what, path string, limit int) ([]byte, error) {
	fail := func(format string, args ...any) ([]byte, error) {
		return nil, fmt.Errorf("keyx: %s %s: "+format, append([]any{what, path}, args...)...)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("keyx: %s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail("%w", err)
	}
	if !st.Mode().IsRegular() {
		return fail("not a regular file (%v)", st.Mode().Type())
	}
	if m := st.Mode().Perm(); m&0o077 != 0 {
		return fail("mode %04o lets group or others read or write it; want 0600 (chmod 600 %s)", m, path)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() && uid != 0 {
		return fail("owned by uid %d, not by this user (uid %d) or root", uid, os.Geteuid())
	}
	dir := filepath.Dir(path)
	dst, err := os.Stat(dir)
	if err != nil {
		return fail("%w", err)
	}
	if m := dst.Mode(); m.Perm()&0o022 != 0 && m&fs.ModeSticky == 0 {
		return fail("directory %s is writable by group or others (mode %04o): they could replace the %s; want 0700", dir, m.Perm(), what)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		clear(data)
		return fail("%w", err)
	}
	if len(data) > limit {
		clear(data)
		return fail("more than %d bytes", limit)
	}
	return data, nil
}
