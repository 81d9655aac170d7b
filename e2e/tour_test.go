package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onerma/onerma/internal/frontdoor"
	"github.com/onerma/onerma/internal/testbed"
)

// The README's tour: its engines' control sockets and memif socket, and
// their EAL file prefixes (onerma-a, onerma-b).
var (
	tourSockets = []string{"/run/onerma/a.sock", "/run/onerma/b.sock"}
	tourMemif   = "/run/onerma/tour.memif"
	tourEngines = []string{"a", "b"}
)

// TestREADMETour runs the README's tour as a reader pastes it: the ```sh
// block after <!-- tour, with bash -e, from the module's root, with the
// one substitution the reader does not need (the directory of the built
// binaries for the tour's "$PWD/bin"). The tour starts two engines over
// memif, an rmaperf server on engine B, a verified READ and a WRITE from
// engine A, and rmactl stats, and (as the README says, before the tour's
// last line) the README's Go application and its Python application
// ("Using OneRMA from Python", with the package from the clone) read
// through engine A; the tour stops everything it started. Every line
// the README shows as output ("#   ...", "…" for numbers) must be a line
// of what the tour printed, and no socket of the tour may be left.
func TestREADMETour(t *testing.T) {
	needEngines(t)
	binDir := filepath.Dir(rmadBin)
	for _, bin := range []string{"rmad", "rmactl", "rmaperf"} {
		if _, err := os.Stat(filepath.Join(binDir, bin)); err != nil {
			t.Fatalf("%v (make build)", err)
		}
	}
	root, err := frontdoor.Root()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script, want, err := frontdoor.Tour(readme)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(script, frontdoor.TourBin) != 1 {
		t.Fatalf("the tour does not name %s once:\n%s", frontdoor.TourBin, script)
	}
	script = strings.Replace(script, frontdoor.TourBin, binDir, 1)
	// The README's application runs where the README says to run it:
	// against the tour's engines, before the tour's last line, with the
	// tour's credentials. It prints its READ's completion.
	app := filepath.Join(t.TempDir(), "hello")
	if err := frontdoor.BuildApp(root, frontdoor.GoBin(), app); err != nil {
		t.Fatal(err)
	}
	py, err := frontdoor.PyApp(readme)
	if err != nil {
		t.Fatal(err)
	}
	pyApp := filepath.Join(t.TempDir(), "hello.py")
	if err := os.WriteFile(pyApp, []byte(py), 0o644); err != nil {
		t.Fatal(err)
	}
	runPy := fmt.Sprintf("PYTHONPATH=%s %s %s creds\n", filepath.Join(root, "python"), frontdoor.Python(), pyApp)
	script = strings.TrimRight(script, "\n")
	last := strings.LastIndex(script, "\n")
	script = script[:last+1] + app + " creds\n" + runPy + script[last+1:] + "\n"
	goLine, pyLine := regexp.MustCompile(`^OK [0-9]+ ns \[([0-9 ]+)\]$`), regexp.MustCompile(`^read 64 bytes: ([0-9a-f]{16})$`)
	want = append(want, goLine, pyLine)
	for _, s := range append(tourSockets, tourMemif) {
		if c, err := net.Dial("unixpacket", s); err == nil {
			c.Close()
			t.Fatalf("%s answers: another tour (or an engine) is running; stop it first", s)
		}
		os.Remove(s) // left by an engine that was killed
	}

	// The tour's own directory (mktemp -d) goes under the test's.
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	// Its own process group: on a timeout or a failure, the engines and
	// the key service it left in the background go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing, if the tour stopped all it started
	}
	if err != nil {
		t.Fatalf("the tour failed: %v\n%s\n%s", err, out.String(), tourLogs(tmp))
	}

	var got []string
	for _, l := range strings.Split(out.String(), "\n") {
		got = append(got, frontdoor.Collapse(l))
	}
	for _, re := range want {
		found := false
		for _, l := range got {
			if re.MatchString(l) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("the README says the tour prints a line matching %s; it did not", re)
		}
	}
	// The Go and the Python application read the same bytes (what the
	// tour's write_lat left at the region's start).
	var goBytes, pyBytes string
	for _, l := range got {
		if m := goLine.FindStringSubmatch(l); m != nil {
			for _, f := range strings.Fields(m[1]) {
				n, _ := strconv.Atoi(f)
				goBytes += fmt.Sprintf("%02x", n)
			}
		}
		if m := pyLine.FindStringSubmatch(l); m != nil {
			pyBytes = m[1]
		}
	}
	if goBytes != pyBytes {
		t.Errorf("the Go application read %s, the Python application %s", goBytes, pyBytes)
	}
	// Stopped engines leave nothing but their IV and identity state.
	var left []string
	for _, s := range tourSockets {
		if _, err := os.Stat(s); !errors.Is(err, os.ErrNotExist) {
			left = append(left, s)
			os.Remove(s)
		}
	}
	for _, n := range tourEngines {
		// DPDK names its huge page files PREFIXmap_N.
		m, _ := filepath.Glob("/dev/hugepages/onerma-" + n + "map_*")
		left = append(left, m...)
		if _, err := os.Stat(testbed.RuntimeDir(n)); err == nil {
			left = append(left, testbed.RuntimeDir(n))
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind after the tour: %s", strings.Join(left, " "))
	}
	if t.Failed() {
		t.Logf("the tour printed:\n%s\n%s", out.String(), tourLogs(tmp))
	}
}

// tourLogs returns the engines' logs the tour wrote into its directory.
func tourLogs(tmp string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(tmp, "*", "?.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		b.WriteString("== " + l + "\n")
		b.Write(data)
	}
	return b.String()
}
