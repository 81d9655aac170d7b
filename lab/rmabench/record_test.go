package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestRecorder: each row is in the file once emitted, with the run's id;
// a failed setup is remembered and the next runs; once the file cannot be
// written, no further setup runs.
func TestRecorder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "out.jsonl")
	rec, err := openRecorder(path, "20261201T000000Z")
	if err != nil {
		t.Fatal(err)
	}
	rec.setup("one", func() error {
		rec.emit(Row{System: "a", Setup: "one", Run: "stale"})
		if rows := fileRows(t, path); len(rows) != 1 || rows[0].Run != "20261201T000000Z" {
			t.Errorf("in the file after one emit: %+v", rows)
		}
		rec.emit(Row{System: "b", Setup: "one"})
		return errors.New("broke")
	})
	ran := false
	rec.setup("two", func() error { ran = true; rec.emit(Row{System: "c", Setup: "two"}); return nil })
	if !ran || len(fileRows(t, path)) != 3 || len(rec.rows) != 3 {
		t.Fatalf("after a failed setup the next did not run or lost rows: ran %v, %d rows", ran, len(rec.rows))
	}
	var sum bytes.Buffer
	if rec.summary(&sum) || !strings.Contains(sum.String(), "one: broke") || strings.Contains(sum.String(), "two") {
		t.Errorf("summary %q", sum.String())
	}
	rec.f.Close() // the next write fails
	rec.setup("three", func() error { rec.emit(Row{System: "d"}); return nil })
	ran = false
	rec.setup("four", func() error { ran = true; return nil })
	if ran || rec.close() == nil || len(rec.failed) != 3 {
		t.Errorf("after a write error: four ran %v, %d failed", ran, len(rec.failed))
	}
}

// fileRows reads path's rows, each line of which must be a JSON row.
func fileRows(t *testing.T, path string) []Row {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rows []Row
	for i, l := range strings.SplitAfter(string(data), "\n") {
		if l == "" {
			continue
		}
		if !strings.HasSuffix(l, "\n") {
			t.Fatalf("%s: line %d unterminated: %q", path, i+1, l)
		}
		var r Row
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: line %d: %v", path, i+1, err)
		}
		rows = append(rows, r)
	}
	return rows
}

var built struct {
	once sync.Once
	path string
	err  error
}

// rmabenchBinary builds rmabench once for the tests that run it.
func rmabenchBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs rmabench")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("the aes setup pins a thread to CPU 1")
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "rmabench-test-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "rmabench")
		out, err := exec.Command("go", "build", "-o", built.path, ".").CombinedOutput()
		if err != nil {
			built.err = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "echo" { // socketFloor's child (TestSocketFloor)
		if err := echoChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// TestKilledMidRunKeepsRows SIGKILLs rmabench once its first row is in
// -out: the rows measured are there, whole JSON lines. The aes setup needs
// neither root nor an engine, and measures a row every -D.
func TestKilledMidRunKeepsRows(t *testing.T) {
	bin := rmabenchBinary(t)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	cmd := exec.Command(bin, "-only", "aes", "-D", "3s", "-out", out, "-bin", t.TempDir())
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if data, _ := os.ReadFile(out); bytes.Count(data, []byte("\n")) >= 1 {
			break
		}
		select {
		case <-done:
			t.Fatalf("rmabench exited before its first row: %v\n%s", cmd.ProcessState, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("no row after a minute\n%s", stderr.String())
		}
	}
	cmd.Process.Kill()
	<-done
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("rmabench ended before the kill (%v): nothing left to kill mid-run", cmd.ProcessState)
	}
	rows := fileRows(t, out)
	if len(rows) != 1 || rows[0].System != "aes-gcm-limit" || rows[0].Setup != "cpu" || rows[0].Run == "" || rows[0].OpsPerSec <= 0 {
		t.Errorf("rows left by the killed run: %+v; want the first aes-gcm-limit row, with its run id", rows)
	}
}

// TestFailedSetupKeepsOthers runs a setup whose engine binary is missing
// beside one that needs none: the failure is reported, the other's rows
// are kept, and the exit status is 1.
func TestFailedSetupKeepsOthers(t *testing.T) {
	bin := rmabenchBinary(t)
	out := filepath.Join(t.TempDir(), "out.jsonl")
	empty := t.TempDir() // -bin without rmad
	cmd := exec.Command(bin, "-only", "loopback,aes", "-D", "200ms", "-out", out, "-bin", empty)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
	}
	rmad := filepath.Join(empty, "rmad")
	for _, want := range []string{"setup loopback failed", "1 setup(s) failed:\n  loopback: ", rmad} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	rows := fileRows(t, out)
	if len(rows) != 2 || rows[0].Setup != "cpu" || rows[1].Setup != "cpu-ipsec-mb" || rows[0].Run == "" || rows[0].Run != rows[1].Run {
		t.Errorf("rows: %+v; want the aes setup's two, one run id", rows)
	}
	if !strings.Contains(stdout.String(), "aes-gcm-limit cpu-ipsec-mb") {
		t.Errorf("the final table lacks the aes rows:\n%s", stdout.String())
	}
}
