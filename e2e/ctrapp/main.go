// Command ctrapp is the OneRMA application of the container test (e2e
// TestContainers). It runs in a container of its own, in PID, mount,
// network, IPC and UTS namespaces of its own, and reaches its engine only
// through the control socket its tenant's directory holds. The test drives
// it line by line on stdin; it answers each line with one line on stdout.
//
//	ctrapp [-socket /run/onerma/rmad.sock] [-name ctrapp]
//
// At start it opens a portal and prints
//
//	identity ADDR ID PID        the engine's address, the identity the engine gave this
//	                            process, and its PID in its own namespace
//
// then answers
//
//	own SIZE SEED                        region ID huge|plain   a region open to remote READ and WRITE, holding
//	                                                   pattern SEED, on huge pages or not
//	key REGION ADDR ID read|write        key HEX      K_d of its region for the process ID of the engine at ADDR
//	read ADDR REGION OFF LEN HEX SEED    ok | STATUS  READ LEN bytes at OFF; ok only when each is pattern SEED's
//	write ADDR REGION OFF LEN HEX SEED   ok | STATUS  WRITE LEN bytes of pattern SEED to OFF
//	check REGION OFF LEN SEED            ok | bad N   its own region holds pattern SEED at OFF (N: first differing byte)
//	hog SIZE                             refused N QUOTA MESSAGE   regions of SIZE until one is refused
//	release                              released N   deregister the hog's regions
//
// An answer that cannot be given is "error MESSAGE". Reads and writes go
// through a portal.Executor (ops of at most 4 KB, pipelined); STATUS is
// the first failed op's completion status. It exits when stdin closes.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/portal"
)

// pattern is the byte at offset off of a region holding pattern seed.
func pattern(seed, off uint64) byte { return byte(off*167 + off>>9 + seed*31 + 3) }

// maxTransfer bounds one read or write (the size of the local buffer).
const maxTransfer = 1 << 20

type app struct {
	p       *portal.Portal
	ex      *portal.Executor
	buf     *portal.Region // source of writes and sink of reads
	regions map[portal.RegionID]*portal.Region
	hogs    []*portal.Region
}

func main() {
	sock := flag.String("socket", portal.DefaultSocket, "the engine's control socket")
	name := flag.String("name", "ctrapp", "application name presented to the engine")
	flag.Parse()
	if err := run(*sock, *name); err != nil {
		fmt.Fprintln(os.Stderr, "ctrapp:", err)
		os.Exit(1)
	}
}

func run(sock, name string) error {
	// The application shares two CPUs with its engine: it sleeps on the
	// doorbell rather than spin.
	p, err := portal.DialOptions(sock, name, portal.Options{WaitSpins: -1})
	if err != nil {
		return err
	}
	defer p.Close()
	buf, err := p.RegisterRegion(maxTransfer, portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		return err
	}
	// Its engines idle in backoff mode on shared cores: the congestion
	// control targets of such engines (the paper's µs targets would keep
	// every window at its floor).
	ex, err := portal.NewExecutor(p, portal.ExecutorConfig{Slots: 8, CC: testbed.BackoffCC()})
	if err != nil {
		return err
	}
	defer ex.Close()
	a := &app{p: p, ex: ex, buf: buf, regions: map[portal.RegionID]*portal.Region{}}
	id := p.Identity()
	fmt.Printf("identity %s %d %d\n", id.Addr, id.PID, os.Getpid())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		out, err := a.do(strings.Fields(sc.Text()))
		if err != nil {
			out = "error " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		fmt.Println(out)
	}
	return sc.Err()
}

// args parses the fields of a request: uints, addresses and keys by the
// letters of kinds (u, a, k).
func args(f []string, kinds string) (u []uint64, addr netip.Addr, key portal.Key, err error) {
	if len(f) != len(kinds) {
		return nil, addr, key, fmt.Errorf("%d arguments, want %d", len(f), len(kinds))
	}
	for i, k := range kinds {
		switch k {
		case 'u':
			n, err := strconv.ParseUint(f[i], 0, 64)
			if err != nil {
				return nil, addr, key, err
			}
			u = append(u, n)
		case 'a':
			if addr, err = netip.ParseAddr(f[i]); err != nil {
				return nil, addr, key, err
			}
		case 'k':
			b, err := hex.DecodeString(f[i])
			if err != nil || len(b) != len(key) {
				return nil, addr, key, fmt.Errorf("key %q: want %d hex bytes", f[i], len(key))
			}
			copy(key[:], b)
		}
	}
	return u, addr, key, nil
}

func (a *app) do(f []string) (string, error) {
	if len(f) == 0 {
		return "", errors.New("empty line")
	}
	switch cmd, rest := f[0], f[1:]; cmd {
	case "own":
		u, _, _, err := args(rest, "uu")
		if err != nil {
			return "", err
		}
		r, err := a.p.RegisterRegion(u[0], portal.PermRemoteRead|portal.PermRemoteWrite|portal.PermLocalRead|portal.PermLocalWrite)
		if err != nil {
			return "", err
		}
		b := r.Bytes()
		for i := range b {
			b[i] = pattern(u[1], uint64(i))
		}
		a.regions[r.ID()] = r
		kind := "plain"
		if r.Hugetlb() {
			kind = "huge"
		}
		return fmt.Sprintf("region %d %s", r.ID(), kind), nil
	case "key":
		if len(rest) != 4 {
			return "", errors.New("key REGION ADDR ID read|write")
		}
		u, addr, _, err := args(rest[:3], "uau")
		if err != nil {
			return "", err
		}
		r := a.regions[portal.RegionID(u[0])]
		op := map[string]portal.OpType{"read": portal.OpRead, "write": portal.OpWrite}[rest[3]]
		if r == nil || op == 0 {
			return "", fmt.Errorf("no region %d of this application, or op %q", u[0], rest[3])
		}
		kd := r.DeriveKey(addr, uint32(u[1]), op)
		return "key " + hex.EncodeToString(kd[:]), nil
	case "read", "write":
		u, addr, kd, err := args(rest, "auuuku")
		if err != nil {
			return "", err
		}
		region, off, n, seed := portal.RegionID(u[0]), u[1], u[2], u[3]
		if n == 0 || n > maxTransfer {
			return "", fmt.Errorf("length %d: want 1..%d", n, maxTransfer)
		}
		b := a.buf.Bytes()[:n]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if cmd == "write" {
			for i := range b {
				b[i] = pattern(seed, off+uint64(i))
			}
			return status(a.ex.Write(ctx, portal.Transfer{
				Remote: addr, RemoteRegion: region, RemoteOffset: off, Key: kd,
				Local: a.buf, Length: n,
			}))
		}
		clear(b)
		if err := a.ex.Read(ctx, portal.Transfer{Remote: addr, RemoteRegion: region, RemoteOffset: off, Key: kd, Local: a.buf, Length: n}); err != nil {
			return status(err)
		}
		for i := range b {
			if b[i] != pattern(seed, off+uint64(i)) {
				return fmt.Sprintf("bad %d", i), nil
			}
		}
		return "ok", nil
	case "check":
		u, _, _, err := args(rest, "uuuu")
		if err != nil {
			return "", err
		}
		r := a.regions[portal.RegionID(u[0])]
		if r == nil || u[1]+u[2] > r.Size() {
			return "", fmt.Errorf("no region %d of this application, or %d+%d beyond it", u[0], u[1], u[2])
		}
		for i, c := range r.Bytes()[u[1] : u[1]+u[2]] {
			if c != pattern(u[3], u[1]+uint64(i)) {
				return fmt.Sprintf("bad %d", i), nil
			}
		}
		return "ok", nil
	case "hog":
		u, _, _, err := args(rest, "u")
		if err != nil {
			return "", err
		}
		for {
			r, err := a.p.RegisterRegion(u[0], portal.PermLocalRead|portal.PermLocalWrite)
			var pe *portal.Error
			switch {
			case errors.As(err, &pe) && pe.Quota != "":
				return fmt.Sprintf("refused %d %s %s", len(a.hogs), pe.Quota, pe.Msg), nil
			case err != nil:
				return "", err
			}
			a.hogs = append(a.hogs, r)
		}
	case "release":
		n := len(a.hogs)
		for _, r := range a.hogs {
			if err := a.p.DeregisterRegion(r); err != nil {
				return "", err
			}
		}
		a.hogs = nil
		return fmt.Sprintf("released %d", n), nil
	}
	return "", fmt.Errorf("unknown request %q", f[0])
}

// status is the answer to a transfer that ended with err.
func status(err error) (string, error) {
	var ce *portal.ChunkError
	switch {
	case err == nil:
		return "ok", nil
	case errors.As(err, &ce):
		return ce.Status.String(), nil
	}
	return "", err
}
