package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/onerma/onerma/ctlmsg"
)

// TestDefaultSocket: the embedded default config listens on the socket
// every tool dials by default.
func TestDefaultSocket(t *testing.T) {
	if got := defaultConfig().Ctl.Socket; got != ctlmsg.DefaultSocket {
		t.Errorf("default.json ctl.socket %q, ctlmsg.DefaultSocket %q", got, ctlmsg.DefaultSocket)
	}
}

// TestFlagAliases: each old spelling of a -selftest flag parses to what
// its canonical flag does.
func TestFlagAliases(t *testing.T) {
	peer := []string{"-selftest", "read_bw", "-selftest-peer", "h:1", "-selftest-region", "0x10001"}
	for _, tc := range []struct {
		alias, canonical []string
	}{
		{[]string{"-selftest", "read_bw", "-selftest-json"}, []string{"-selftest", "read_bw", "-json"}},
		{[]string{"-selftest", "read_bw", "-selftest-warmup", "1s"}, []string{"-selftest", "read_bw", "-warmup", "1s"}},
		{append([]string{"-selftest-creds", "/c"}, peer...), append([]string{"-creds", "/c"}, peer...)},
		{append([]string{"-selftest-creds-fd", "3"}, peer...), append([]string{"-creds-fd", "3"}, peer...)},
	} {
		ca, oa, err := loadConfig(tc.alias, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", tc.alias, err)
		}
		cc, oc, err := loadConfig(tc.canonical, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", tc.canonical, err)
		}
		if !reflect.DeepEqual(ca, cc) || !reflect.DeepEqual(oa, oc) {
			t.Errorf("%q: %+v\n%q: %+v", tc.alias, oa.selftest, tc.canonical, oc.selftest)
		}
	}
}

// TestUsage: -h prints a synopsis after "usage:", example invocations,
// the flags, and each alias once.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if _, _, err := loadConfig([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	got := out.String()
	for _, want := range []string{"usage: rmad ", "\nexamples:\n  rmad ", "\nflags:\n", "  -socket value", "  -selftest-json: alias of -json\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("usage lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "-selftest-json"); n != 1 {
		t.Errorf("-selftest-json %d times in the usage", n)
	}
}

// TestFlagErrors: a bad value is refused with an error naming its flag
// as it was typed.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-selftest", "read_bw", "-s", "5000"}, "-s 5000: want 1..4096"},
		{[]string{"-selftest", "read_bw", "-warmup", "-1s"}, "-warmup -1s"},
		{[]string{"-selftest-json"}, "-selftest-json need -selftest"},
		{[]string{"-json", "-warmup", "1s"}, "-json, -warmup need -selftest"},
		{[]string{"-selftest", "read_bw", "-creds", "/c"}, "-creds and -creds-fd need -selftest-peer"},
		{[]string{"-slots", "many"}, "-slots"},
		{[]string{"-udp-port", "70000"}, "-udp-port"},
	} {
		_, _, err := loadConfig(tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestConfigErrorNamesFlag: a config the flags made invalid is refused
// with the flag that did it, as typed; one the file made invalid names
// the key alone.
func TestConfigErrorNamesFlag(t *testing.T) {
	file := writeFile(t, `{"engine": {"mtu": 20}}`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-udp-port", "0"}, "rmad: -udp-port 0: invalid config: "},
		{[]string{"-slots", "64", "-poll-mode", "fast", "-mtu", "1500"}, "rmad: -poll-mode fast: invalid config: poll.mode \"fast\""},
		{[]string{"-ip", "300.1.1.1"}, "rmad: -ip 300.1.1.1: invalid config: engine.ip"},
		{[]string{"-config", file, "-slots", "64"}, "rmad: invalid config: engine: engine: invalid config: MTU = 20"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append(tc.args, "-print-config"), &stdout, &stderr, nil); code != 2 || !strings.HasPrefix(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, %q, want %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// heapSink keeps allocForProfile's allocations from being optimised away.
var heapSink [][]byte

// allocForProfile allocates 64 MB in 1 MB objects: at the runtime's
// default rate (a sample per 512 KB on average) most are sampled.
//
//go:noinline
func allocForProfile() {
	for range 64 {
		heapSink = append(heapSink, make([]byte, 1<<20))
	}
	heapSink = nil
}

// TestHeapProfile: without metrics.pprof the runtime records none of the
// engine's allocations (its records are never freed); with it, it does.
func TestHeapProfile(t *testing.T) {
	fn := reflect.ValueOf(allocForProfile).Pointer()
	sampled := func() (bytes int64) {
		for range 3 { // a profile shows the allocations of cycles completed since
			runtime.GC()
		}
		n, _ := runtime.MemProfile(nil, true)
		recs := make([]runtime.MemProfileRecord, n+16)
		n, _ = runtime.MemProfile(recs, true)
		for _, r := range recs[:n] {
			for _, pc := range r.Stack() {
				if f := runtime.FuncForPC(pc); f != nil && f.Entry() == fn {
					bytes += r.AllocBytes
					break
				}
			}
		}
		return bytes
	}
	// Each P's allocation cache samples one allocation when the rate
	// changes (runtime.profilealloc), then none at rate 0: at most one
	// 1 MB object per P; at the default rate most of the 64.
	for _, on := range []bool{false, true} {
		restore := heapProfile(on)
		before := sampled()
		allocForProfile()
		grew := sampled() - before
		restore()
		if on && grew < 16<<20 || !on && grew > int64(runtime.GOMAXPROCS(0))<<20 {
			t.Errorf("metrics.pprof %v: %d bytes more sampled at the allocation site", on, grew)
		}
	}
}
