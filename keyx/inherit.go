package keyx

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

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
// regular file (files go through LoadFile, which checks their modes), and
// the credentials must be valid now.
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
	c, err := parseCredentials(data)
	if err != nil {
		return nil, fmt.Errorf("keyx: credentials fd %d: %w", fd, err)
	}
	if err := c.checkValid(time.Now()); err != nil {
		return nil, fmt.Errorf("keyx: credentials fd %d: %w", fd, err)
	}
	return c, nil
}
