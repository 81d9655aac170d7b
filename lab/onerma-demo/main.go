// Command onerma-demo is what `make demo` runs: two rmad engines as separate
// processes on the two ends of a net_memif wire, with rmad's embedded
// default configuration (only addresses, sockets and the port differ), an
// owner application on engine B that registers a region with a random
// region key K_r and fills it, and a reader application on engine A that
// fetches its derived key K_d from the owner over mutually authenticated
// TLS 1.3 (package keyx; paper §4.2, Fig. 5), reads the region at several
// sizes and offsets, checks every byte and prints every completion. It
// then shows the keys at work: a read with a wrong K_d fails with
// REMOTE_AUTHENTICATION_FAILURE; the owner rekeys the region locally; the
// reader's next read with its old K_d fails the same way; the reader
// fetches the new K_d and reads again. Then the reader fetches its WRITE
// K_d and writes (paper §5.1: four hops, the owner's engine pulls the data
// and commits it only once all of it authenticated) at several sizes and
// offsets, reads every range back and checks it, and shows a write with
// its READ K_d refused. Then it stops everything and checks
// that no process, socket or hugepage file is left. Its last line is
// "demo: ok" only when every check passed.
//
// The owner and reader are this same binary re-executed with -role, so the
// region's owner, its reader and both engines are four processes. This
// process (the orchestrator) makes a throwaway CA in memory and hands the
// owner and the reader their certificates and private keys over inherited
// pipes (keyx.Attach): no key is ever on a command line, in the
// environment, in a file or in the output.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/cli"
	"github.com/onerma/onerma/internal/testbed"
	"github.com/onerma/onerma/keyx"
	"github.com/onerma/onerma/portal"
)

const (
	ipA         = "10.77.0.1"
	ipB         = "10.77.0.2"
	regionBytes = 64 << 10
)

// Lines of the little protocol between the orchestrator and its children.
const (
	askRekey  = "demo: reader: holding the old K_d; asking the owner to rekey"
	rekeyCmd  = "rekey"
	goCmd     = "go"
	rekeyedOK = "rekeyed "
)

// pattern is the owner's region content: byte i of the region.
func pattern(i uint64) byte { return byte(i*131 + i>>8 + 17) }

// options are onerma-demo's flags; all but -rmad are for the owner and
// reader processes the orchestrator starts.
type options struct {
	role, rmad, socket, region, server string
	credsFD                            int
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := cli.New("onerma-demo", "onerma-demo [-rmad PATH]",
		"onerma-demo -role owner -socket PATH -creds-fd FD (internal)",
		"onerma-demo -role reader -socket PATH -region ID -server HOST:PORT -creds-fd FD (internal)")
	fs.Notes("Runs two engines, an owner and a reader; needs root. Its last line is \"demo: ok\"\nonly when every check passed. The orchestrator starts the owner and the reader itself.")
	fs.Example("onerma-demo -rmad bin/rmad")
	fs.SetOutput(stderr)
	fs.StringVar(&o.role, "role", "orchestrate", "orchestrate | owner | reader (internal)")
	fs.StringVar(&o.rmad, "rmad", "", "path to rmad (default: next to this binary)")
	fs.StringVar(&o.socket, "socket", ctlmsg.DefaultSocket, "engine control socket (owner, reader)")
	fs.StringVar(&o.region, "region", "", "remote region id (reader)")
	fs.StringVar(&o.server, "server", "", "owner's key service HOST:PORT (reader)")
	fs.IntVar(&o.credsFD, "creds-fd", -1, "inherited descriptor carrying this process's TLS credentials (owner, reader)")
	fs.Alias("ctl", "socket")
	fs.Alias("keyx", "server")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.PrintUsage()
		return nil, fmt.Errorf("%w: unexpected arguments %q", cli.ErrUsage, fs.Args())
	}
	switch o.role {
	case "orchestrate":
	case "owner", "reader":
		if o.credsFD < 0 {
			return nil, fmt.Errorf("-role %s needs -creds-fd", o.role)
		}
		if o.role == "reader" && (o.region == "" || o.server == "") {
			return nil, errors.New("-role reader needs -region and -server")
		}
	default:
		return nil, fmt.Errorf("-role %q: want orchestrate, owner or reader", o.role)
	}
	return o, nil
}

func main() {
	o, err := parse(os.Args[1:], os.Stderr)
	if err != nil {
		cli.Exit("demo", err)
	}
	switch o.role {
	case "orchestrate":
		err = orchestrate(o.rmad)
	case "owner":
		err = owner(o.socket, o.credsFD)
	case "reader":
		err = reader(o.socket, o.region, o.server, o.credsFD)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		fmt.Println("demo: FAILED")
		os.Exit(1)
	}
	if o.role == "orchestrate" {
		fmt.Println("demo: ok")
	}
}

func orchestrate(rmad string) (err error) {
	self, _ := os.Executable()
	if rmad == "" {
		rmad = filepath.Join(filepath.Dir(self), "rmad")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (DPDK, hugepages): run `make demo` as root")
	}
	dir, err := os.MkdirTemp("", "onerma-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	free, mounted := testbed.HugepagesFree()
	fmt.Printf("demo: hugepages free %d (hugetlbfs mounted: %v); engines use %q\n", free, mounted, strings.Join(testbed.EALArgs("demo"), " "))

	optA, optB := testbed.MemifPair(rmad, dir, "demo-a", "demo-b", ipA, ipB)
	a, err := testbed.Start(optA)
	if err != nil {
		return err
	}
	var b *testbed.Engine
	defer func() {
		for _, e := range []*testbed.Engine{b, a} {
			if e == nil {
				continue
			}
			if serr := e.Stop(10 * time.Second); serr != nil && err == nil {
				err = serr
			}
		}
		if err == nil {
			err = checkClean(dir)
		}
	}()
	if b, err = testbed.Start(optB); err != nil {
		return err
	}
	fmt.Printf("demo: engine A %s (memif server) pid %d, engine B %s (memif client) pid %d\n", ipA, a.Pid(), ipB, b.Pid())

	// Credentials: a CA that lives only in this process's memory, one
	// certificate for the owner (server) and one for the reader (client).
	ca, err := keyx.NewCA("onerma-demo CA", 0)
	if err != nil {
		return err
	}
	ownerCreds, err := ca.IssueServer("demo-owner")
	if err != nil {
		return err
	}
	// The reader's certificate names engine A's address: the owner hands
	// it K_d for that address alone.
	readerCreds, err := ca.IssueClient("demo-reader", netip.MustParseAddr(ipA))
	if err != nil {
		return err
	}
	fmt.Println("demo: throwaway CA (ECDSA P-256) made in memory; owner and reader get their certificate and private key over an inherited pipe")

	// The owner application on engine B.
	own := exec.Command(self, "-role", "owner", "-socket", b.Socket)
	fd, closeOwn, err := keyx.Attach(own, ownerCreds)
	if err != nil {
		return err
	}
	own.Args = append(own.Args, "-creds-fd", strconv.Itoa(fd))
	own.Stderr = os.Stderr
	ownIn, _ := own.StdinPipe()
	ownOut, _ := own.StdoutPipe()
	err = own.Start()
	closeOwn()
	if err != nil {
		return err
	}
	// Every owner line is shown; the protocol lines also go to ownerSays.
	ownerSays := make(chan string, 16)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		defer close(ownerSays)
		sc := bufio.NewScanner(ownOut)
		for sc.Scan() {
			l := sc.Text()
			fmt.Println("demo: owner:", l)
			if strings.HasPrefix(l, "region ") || strings.HasPrefix(l, rekeyedOK) {
				ownerSays <- l
			}
		}
		io.Copy(io.Discard, ownOut)
	}()
	defer func() {
		ownIn.Close() // the owner exits at EOF
		select {
		case <-pumped:
		case <-time.After(10 * time.Second):
			own.Process.Kill()
			<-pumped
		}
		if werr := own.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("owner: %v", werr)
		}
	}()
	fromOwner := func(prefix string) (string, error) {
		select {
		case l, ok := <-ownerSays:
			if !ok {
				return "", errors.New("owner exited")
			}
			if !strings.HasPrefix(l, prefix) {
				return "", fmt.Errorf("owner said %q, want %q...", l, prefix)
			}
			return l, nil
		case <-time.After(30 * time.Second):
			return "", fmt.Errorf("owner silent for 30 s (waiting for %q)", prefix)
		}
	}
	line, err := fromOwner("region ")
	if err != nil {
		return err
	}
	f := strings.Fields(line)
	rid, kxAddr := f[1], f[len(f)-1]

	// The reader application on engine A.
	rd := exec.Command(self, "-role", "reader", "-socket", a.Socket, "-region", rid, "-server", kxAddr)
	fd, closeRd, err := keyx.Attach(rd, readerCreds)
	if err != nil {
		return err
	}
	rd.Args = append(rd.Args, "-creds-fd", strconv.Itoa(fd))
	rd.Stderr = os.Stderr
	rdIn, _ := rd.StdinPipe()
	rdOut, _ := rd.StdoutPipe()
	err = rd.Start()
	closeRd()
	if err != nil {
		return err
	}
	waited := false
	defer func() {
		if !waited {
			rd.Process.Kill()
			rd.Wait()
		}
	}()
	sc := bufio.NewScanner(rdOut)
	for sc.Scan() {
		l := sc.Text()
		fmt.Println(l)
		if l != askRekey {
			continue
		}
		if _, err := fmt.Fprintln(ownIn, rekeyCmd); err != nil {
			return fmt.Errorf("owner: %v", err)
		}
		if _, err := fromOwner(rekeyedOK); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(rdIn, goCmd); err != nil {
			return fmt.Errorf("reader: %v", err)
		}
	}
	rdIn.Close()
	waited = true
	if err := rd.Wait(); err != nil {
		return fmt.Errorf("reader: %v", err)
	}
	return nil
}

// checkClean verifies nothing of the demo is left behind.
func checkClean(dir string) error {
	var left []string
	if m, _ := filepath.Glob(filepath.Join(dir, "*.sock")); len(m) > 0 {
		left = append(left, m...)
	}
	left = append(left, testbed.HugepageFiles("demo")...)
	for _, n := range []string{"demo-a", "demo-b"} {
		if _, err := os.Stat(testbed.RuntimeDir(n)); err == nil {
			left = append(left, testbed.RuntimeDir(n))
		}
	}
	if out, _ := exec.Command("pgrep", "-f", "onerma-demo-[ab]").Output(); len(out) > 0 {
		left = append(left, "processes "+strings.Join(strings.Fields(string(out)), ","))
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, " "))
	}
	fmt.Println("demo: engines stopped; no processes, sockets, hugepage files or EAL runtime files left")
	return nil
}

func owner(ctl string, credsFD int) error {
	creds, err := keyx.Inherited(credsFD)
	if err != nil {
		return err
	}
	p, err := portal.Dial(ctl, "demo-owner")
	if err != nil {
		return err
	}
	defer p.Close()
	// RegisterRegion draws a random K_r; it stays in this process.
	r, err := p.RegisterRegion(regionBytes, portal.PermRemoteRead|portal.PermRemoteWrite|portal.PermLocalRead|portal.PermLocalWrite)
	if err != nil {
		return err
	}
	b := r.Bytes()
	for i := range b {
		b[i] = pattern(uint64(i))
	}
	id := p.Identity()
	srv, err := keyx.NewServer(keyx.Config{Credentials: creds, Owner: id.Addr,
		Permits: []keyx.Permit{{Client: "demo-reader", Ops: keyx.Read | keyx.Write}},
		Logf:    func(format string, args ...any) { fmt.Printf(format+"\n", args...) }})
	if err != nil {
		return err
	}
	srv.Add(r)
	ap, err := srv.Start("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("region %#x of %d bytes registered on %s by identity %d (hugetlb %v, random K_r); K_d served over TLS 1.3 on %s\n",
		uint32(r.ID()), len(b), id.Addr, id.PID, r.Hugetlb(), ap)
	// Serve until the orchestrator closes stdin; rekey when told.
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := sc.Text(); cmd {
		case rekeyCmd:
			var kr portal.Key
			rand.Read(kr[:])
			// Under Update: no K_d of the old K_r is handed out once
			// Rekey has returned.
			err := srv.Update(func() error { return p.Rekey(r, kr) })
			clear(kr[:])
			if err != nil {
				return fmt.Errorf("rekey: %w", err)
			}
			fmt.Printf("%sregion %#x with a new random K_r (local Rekey)\n", rekeyedOK, uint32(r.ID()))
		default:
			return fmt.Errorf("unknown command %q", cmd)
		}
	}
	return sc.Err()
}

type readCase struct {
	size         uint32
	remOff, lOff uint64
}

func reader(ctl, rid, kxAddr string, credsFD int) error {
	creds, err := keyx.Inherited(credsFD)
	if err != nil {
		return err
	}
	v, err := strconv.ParseUint(rid, 0, 32)
	if err != nil {
		return fmt.Errorf("region %q: %v", rid, err)
	}
	remote := portal.RegionID(v)
	p, err := portal.Dial(ctl, "demo-reader")
	if err != nil {
		return err
	}
	defer p.Close()
	slots, err := p.AllocSlots(4)
	if err != nil {
		return err
	}
	sink, err := p.RegisterRegion(16<<10, portal.PermLocalWrite|portal.PermLocalRead)
	if err != nil {
		return err
	}
	id := p.Identity()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// fetch asks the owner for this process's K_d for op (paper Fig. 5).
	fetch := func(what string, op portal.OpType) (keyx.Grant, error) {
		c, err := keyx.Dial(ctx, kxAddr, creds)
		if err != nil {
			return keyx.Grant{}, err
		}
		defer c.Close()
		g, err := c.Fetch(ctx, keyx.RequestFor(id, remote, op))
		if err != nil {
			return g, err
		}
		if g.Owner != netip.MustParseAddr(ipB) || g.Bytes != regionBytes {
			return g, fmt.Errorf("grant %v: want region of %d bytes on %s", g, regionBytes, ipB)
		}
		fmt.Printf("demo: reader: %sK_d for %s identity %d fetched over TLS 1.3 from %s (server certificate %q from the demo CA): %v\n",
			what, id.Addr, id.PID, kxAddr, c.Peer().Subject.CommonName, g)
		return g, nil
	}
	g, err := fetch("", portal.OpRead)
	if err != nil {
		return err
	}
	peer := g.Owner

	cpl := make([]portal.Completion, 1)
	var cookie uint64
	reads, failed := 0, 0
	// post runs one op of type typ over c's ranges under key and returns
	// its completion, and whether it is the op's (its cookie).
	post := func(typ portal.OpType, c readCase, key portal.Key) (portal.Completion, bool, error) {
		cookie++
		if err := p.Submit(&portal.Op{
			Type: typ, Slot: slots[cookie%uint64(len(slots))], Cookie: cookie,
			Remote: peer, RemoteRegion: remote, RemoteOffset: c.remOff, Key: key,
			Local: sink, LocalOffset: c.lOff, Length: c.size,
		}); err != nil {
			return portal.Completion{}, false, err
		}
		if _, err := p.Wait(ctx, cpl); err != nil {
			return portal.Completion{}, false, err
		}
		return cpl[0], cpl[0].Cookie == cookie, nil
	}
	// read reads c with key and checks the outcome: for OK every byte, for
	// a failure that the sink was not touched.
	// expect gives the byte an OK read must find at offset i of its range.
	var expect func(c readCase, i int) byte
	read := func(c readCase, key portal.Key, want portal.Status, why string) error {
		const marker = 0xa5
		dst := sink.Bytes()[c.lOff : c.lOff+uint64(c.size)]
		for i := range dst {
			dst[i] = marker
		}
		got, ours, err := post(portal.OpRead, c, key)
		if err != nil {
			return err
		}
		verdict := "verified"
		switch {
		case got.Status != want || !ours:
			verdict = fmt.Sprintf("FAILED: want %v", want)
		case want == portal.StatusOK:
			for i, b := range dst {
				if b != expect(c, i) {
					verdict = fmt.Sprintf("MISMATCH at byte %d", i)
					break
				}
			}
		default:
			verdict = "expected (" + why + "); sink untouched"
			for _, b := range dst {
				if b != marker {
					verdict = "FAILED: sink written by a refused read"
					break
				}
			}
		}
		reads++
		if !strings.HasPrefix(verdict, "verified") && !strings.HasPrefix(verdict, "expected") {
			failed++
		}
		fmt.Printf("%-6s %8d %8d %8d  %-29s %11.1f us %11.1f us  %s\n", got.Op, c.size, c.remOff, c.lOff, got.Status,
			float64(got.IssueDelayNs)/1e3, float64(got.TotalDelayNs)/1e3, verdict)
		return nil
	}

	expect = func(c readCase, i int) byte { return pattern(c.remOff + uint64(i)) }
	cases := []readCase{
		{1, 0, 0}, {64, 64, 0}, {100, 4097, 3}, {1408, 12345, 77}, {1409, 999, 1000},
		{2048, 32768, 2048}, {3000, 7, 11}, {4095, 60001, 5}, {4096, regionBytes - 4096, 4096},
	}
	fmt.Printf("demo: reader pid %d (engine identity %d) on %s reads region %#x on %s\n", os.Getpid(), id.PID, id.Addr, uint32(remote), peer)
	fmt.Printf("%-6s %8s %8s %8s  %-29s %14s %14s\n", "op", "size", "r_off", "l_off", "status", "issue_delay", "total_delay")
	for _, c := range cases {
		if err := read(c, g.Key, portal.StatusOK, ""); err != nil {
			return err
		}
	}

	// A wrong K_d: one bit off.
	fmt.Println("demo: reader: a read with a wrong K_d (one bit flipped)")
	wrong := g.Key
	wrong[15] ^= 1
	if err := read(cases[8], wrong, portal.StatusRemoteAuthFailure, "wrong K_d"); err != nil {
		return err
	}
	clear(wrong[:])

	// The owner rekeys; the old K_d stops working.
	fmt.Println(askRekey)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != goCmd {
		return fmt.Errorf("orchestrator: want %q, got %q (%v)", goCmd, in.Text(), in.Err())
	}
	fmt.Println("demo: reader: owner rekeyed; reading with the old K_d")
	if err := read(cases[4], g.Key, portal.StatusRemoteAuthFailure, "stale K_d after Rekey"); err != nil {
		return err
	}
	g2, err := fetch("new ", portal.OpRead)
	if err != nil {
		return err
	}
	if g2.Key == g.Key {
		return errors.New("the K_d after Rekey is the old one")
	}
	for _, c := range []readCase{cases[0], cases[4], cases[8]} {
		if err := read(c, g2.Key, portal.StatusOK, ""); err != nil {
			return err
		}
	}
	clear(g.Key[:])

	// Writes: each range gets bytes of its own (stamp), then is read back.
	gw, err := fetch("WRITE ", portal.OpWrite)
	if err != nil {
		return err
	}
	stamp := func(c readCase, i int) byte { return byte(int(c.size)*7+i*13) ^ 0x5c }
	write := func(c readCase, key portal.Key, want portal.Status, why string) error {
		src := sink.Bytes()[c.lOff : c.lOff+uint64(c.size)]
		for i := range src {
			src[i] = stamp(c, i)
		}
		got, ours, err := post(portal.OpWrite, c, key)
		if err != nil {
			return err
		}
		verdict := "committed; read back below"
		switch {
		case got.Status != want || !ours:
			verdict = fmt.Sprintf("FAILED: want %v", want)
			failed++
		case want != portal.StatusOK:
			verdict = "expected (" + why + "); read back below"
		}
		reads++
		fmt.Printf("%-6s %8d %8d %8d  %-29s %11.1f us %11.1f us  %s\n", got.Op, c.size, c.remOff, c.lOff, got.Status,
			float64(got.IssueDelayNs)/1e3, float64(got.TotalDelayNs)/1e3, verdict)
		return nil
	}
	// readBack reads c's remote range into the other half of the sink and
	// checks it holds what was written (or, after a refused write, the
	// owner's original pattern).
	readBack := func(c readCase, written bool) error {
		if written {
			expect = func(b readCase, i int) byte { return stamp(c, i) }
		}
		err := read(readCase{c.size, c.remOff, 8192 + c.lOff%4096}, g2.Key, portal.StatusOK, "")
		expect = func(c readCase, i int) byte { return pattern(c.remOff + uint64(i)) }
		return err
	}
	fmt.Println("demo: reader: writes (four hops: request, pull, data, ack), each read back and compared")
	wcases := []readCase{{1, 3, 0}, {100, 4097, 3}, {1409, 20001, 1000}, {4096, regionBytes - 4096, 4096}}
	for _, c := range wcases {
		if err := write(c, gw.Key, portal.StatusOK, ""); err != nil {
			return err
		}
		if err := readBack(c, true); err != nil {
			return err
		}
	}
	fmt.Println("demo: reader: a write with the READ K_d (keys are per op)")
	c := readCase{64, 40000, 0}
	if err := write(c, g2.Key, portal.StatusRemoteAuthFailure, "READ K_d on a WRITE"); err != nil {
		return err
	}
	if err := readBack(c, false); err != nil {
		return err
	}
	clear(g2.Key[:])
	clear(gw.Key[:])
	if failed > 0 {
		return fmt.Errorf("%d of %d ops failed their check", failed, reads)
	}
	fmt.Printf("demo: reader: %d ops checked: every OK read verified byte for byte, every OK write read back; wrong and stale K_d refused with REMOTE_AUTHENTICATION_FAILURE\n", reads)
	return nil
}
