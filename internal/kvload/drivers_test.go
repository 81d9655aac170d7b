package kvload

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// needBin skips without bin outside CI (scripts/setup.sh installs it;
// in CI its absence fails the test).
func needBin(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed (scripts/setup.sh installs it): %v", bin, err)
		}
		t.Skipf("%s not installed and CI is not \"true\": run scripts/setup.sh as root", bin)
	}
}

// TestPeerDrivers runs each peer's real server and its driver: a load
// phase, the ErrNotFound of a key never written, a short closed-loop
// YCSB-B and open-loop YCSB-C run whose every GET returned its key's
// value, and the server's CPU time measured meanwhile.
func TestPeerDrivers(t *testing.T) {
	for _, p := range []struct {
		bin   string
		start func(t *testing.T) (*Server, Dialer)
	}{
		{MemcachedBin, func(t *testing.T) (*Server, Dialer) {
			s, err := StartMemcached(64, 2)
			if err != nil {
				t.Fatal(err)
			}
			return s, DialMemcached(s.Addr)
		}},
		{RedisBin, func(t *testing.T) (*Server, Dialer) {
			s, err := StartRedis(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			return s, DialRedis(s.Addr)
		}},
	} {
		t.Run(p.bin, func(t *testing.T) {
			needBin(t, p.bin)
			srv, dial := p.start(t)
			defer func() {
				if err := srv.Stop(); err != nil {
					t.Error(err)
				}
			}()
			w := Workload{Mix: YCSBB, Keys: 5000, ValueBytes: 1024, Seed: 9}
			if err := Load(dial, w, 4); err != nil {
				t.Fatal(err)
			}
			st, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			var key [KeyBytes]byte
			if _, err := st.Get(Key(key[:], w.Keys), nil); !errors.Is(err, ErrNotFound) {
				t.Errorf("GET of a key never written: %v, want ErrNotFound", err)
			}
			v, err := st.Get(Key(key[:], w.Keys-1), nil)
			if err != nil || !checkValue(v, w.Keys-1, w.ValueBytes) {
				t.Errorf("GET of the last key loaded: %d bytes, %v", len(v), err)
			}
			st.Close()

			cpu := NewCPUMeter(srv.Pid())
			r, err := Run(dial, Config{Workload: w, Clients: 4, Warmup: 50 * time.Millisecond, Duration: 300 * time.Millisecond, CPU: cpu})
			if err != nil {
				t.Fatal(err)
			}
			if r.Failed() != 0 || r.GetsDone == 0 || r.SetsDone == 0 {
				t.Fatalf("closed loop: %d failed (%v), %d GETs, %d SETs", r.Failed(), r.FirstError, r.GetsDone, r.SetsDone)
			}
			// The kernel counts CPU time in clock ticks (10 ms): a run
			// that a busy host slowed to a few thousand GETs may show none.
			if r.ServerCPU <= 0 && r.GetsDone >= 20000 {
				t.Errorf("server used %v of CPU for %d GETs", r.ServerCPU, r.GetsDone)
			}
			t.Logf("closed loop, 4 clients: %.0f GETs/s, p50 %v, server CPU %.1f s per M GETs", r.GetsPerSec(),
				time.Duration(r.GetLat.ValueAtQuantile(50)), r.CPUSecPerMGet())
			w.Mix = YCSBC
			r, err = Run(dial, Config{Workload: w, Clients: 4, Rate: 2000, Duration: 300 * time.Millisecond, Drain: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if r.Failed() != 0 || r.Unserved != 0 || r.GetsDone < 200 {
				t.Fatalf("open loop at 2000/s: %d failed (%v), %d unserved, %d GETs", r.Failed(), r.FirstError, r.Unserved, r.GetsDone)
			}
		})
	}
}

// TestProcessCPU compares ProcessCPU of this process with getrusage(2)'s
// account of the same spin (both every thread's user and system time):
// within two of /proc's 10 ms ticks.
func TestProcessCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, ruBefore := mustCPU(t), rusage()
	for start := rusage(); rusage()-start < 100*time.Millisecond; {
	}
	got, want := mustCPU(t)-before, rusage()-ruBefore
	if d := got - want; d < -20*time.Millisecond || d > 20*time.Millisecond {
		t.Errorf("ProcessCPU counted %v of CPU where getrusage counted %v", got, want)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func mustCPU(t *testing.T) time.Duration {
	t.Helper()
	d, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
