package cli

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func testSet(out *bytes.Buffer) (*FlagSet, *string, *time.Duration, *bool) {
	f := New("tool cmd", "tool cmd [-socket PATH] [-D DURATION]", "tool cmd -h")
	f.Example("tool cmd -socket /tmp/x.sock -D 2s")
	f.SetOutput(out)
	sock := f.String("socket", "/run/x.sock", "engine control socket")
	d := f.Duration("D", 5*time.Second, "measured duration")
	q := f.Bool("q", false, "quiet")
	f.Alias("ctl", "socket")
	f.Alias("d", "D")
	f.Alias("quiet", "q")
	return f, sock, d, q
}

// TestAlias: an alias sets its canonical flag's value, and Given and
// Canonical see through it.
func TestAlias(t *testing.T) {
	for _, tc := range []struct {
		alias, canonical []string
	}{
		{[]string{"-ctl", "/a"}, []string{"-socket", "/a"}},
		{[]string{"-d", "3s"}, []string{"-D", "3s"}},
		{[]string{"-quiet"}, []string{"-q"}},
		{[]string{"-quiet=false"}, []string{"-q=false"}},
	} {
		var o1, o2 bytes.Buffer
		f1, s1, d1, q1 := testSet(&o1)
		f2, s2, d2, q2 := testSet(&o2)
		if err := f1.Parse(tc.alias); err != nil {
			t.Fatalf("%q: %v", tc.alias, err)
		}
		if err := f2.Parse(tc.canonical); err != nil {
			t.Fatalf("%q: %v", tc.canonical, err)
		}
		if *s1 != *s2 || *d1 != *d2 || *q1 != *q2 {
			t.Errorf("%q: %q %v %v, %q: %q %v %v", tc.alias, *s1, *d1, *q1, tc.canonical, *s2, *d2, *q2)
		}
		name := strings.TrimLeft(strings.SplitN(tc.canonical[0], "=", 2)[0], "-")
		if !f1.Given(name) || !f2.Given(name) {
			t.Errorf("%q: Given(%q) false", tc.alias, name)
		}
		alias := strings.TrimLeft(strings.SplitN(tc.alias[0], "=", 2)[0], "-")
		if got := f1.Canonical(alias); got != name {
			t.Errorf("Canonical(%q) = %q, want %q", alias, got, name)
		}
	}
}

// TestUsage: -h prints the synopsis after "usage:", the examples, each
// canonical flag once and each alias once, as "-ctl: alias of -socket".
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	f, _, _, _ := testSet(&out)
	if err := f.Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	got := out.String()
	for _, want := range []string{
		"usage: tool cmd [-socket PATH] [-D DURATION]\n       tool cmd -h\n",
		"\nexamples:\n  tool cmd -socket /tmp/x.sock -D 2s\n",
		"\nflags:\n",
		"  -socket string\n",
		"(default \"/run/x.sock\")",
		"  -ctl: alias of -socket\n",
		"  -d: alias of -D\n",
		"  -quiet: alias of -q\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("usage lacks %q:\n%s", want, got)
		}
	}
	for _, once := range []string{"-ctl", "-quiet", "-socket string"} {
		if n := strings.Count(got, once); n != 1 {
			t.Errorf("%q %d times:\n%s", once, n, got)
		}
	}
}

// TestUsageDefaults: the usage text shows the registered defaults, not
// values parsed before -h.
func TestUsageDefaults(t *testing.T) {
	var out bytes.Buffer
	f, _, _, _ := testSet(&out)
	f.Parse([]string{"-ctl", "/other", "-h"})
	if got := out.String(); !strings.Contains(got, `(default "/run/x.sock")`) || strings.Contains(got, "/other") {
		t.Errorf("usage:\n%s", got)
	}
}

// TestErrors: a malformed value names the flag and is a usage error
// (exit 2); -h exits 0; any other error 1.
func TestErrors(t *testing.T) {
	var out bytes.Buffer
	f, _, _, _ := testSet(&out)
	err := f.Parse([]string{"-d", "soon"})
	if err == nil || !strings.Contains(err.Error(), "-d") || ExitCode(err) != 2 {
		t.Errorf("-d soon: %v (exit %d)", err, ExitCode(err))
	}
	if !strings.Contains(out.String(), "usage:") {
		t.Errorf("no usage after a bad flag:\n%s", out.String())
	}
	if c := ExitCode(flag.ErrHelp); c != 0 {
		t.Errorf("ErrHelp: exit %d", c)
	}
	if c := ExitCode(errors.New("x")); c != 1 {
		t.Errorf("other: exit %d", c)
	}
}

// TestAliasPanics: an alias of a flag not defined, or of an alias, is a
// programming error.
func TestAliasPanics(t *testing.T) {
	for _, tc := range [][2]string{{"x", "nope"}, {"y", "ctl"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Alias(%q, %q) did not panic", tc[0], tc[1])
				}
			}()
			var out bytes.Buffer
			f, _, _, _ := testSet(&out)
			f.Alias(tc[0], tc[1])
		}()
	}
}

// TestNameFlag: a config error is prefixed with the flag that sets the
// field it names, the longest match not confused with a prefix of it.
func TestNameFlag(t *testing.T) {
	fields := []Field{{"Hold", "-hold"}, {"HoldMax", "-hold-max"}}
	for _, tc := range []struct{ err, want string }{
		{"pkg: config: HoldMax = 2s: want 0..1s", "-hold-max: pkg: config: HoldMax = 2s: want 0..1s"},
		{"pkg: config: Hold = 2s: want 0..1s", "-hold: pkg: config: Hold = 2s: want 0..1s"},
		{"pkg: config: Other = 1", "pkg: config: Other = 1"},
	} {
		if got := NameFlag(errors.New(tc.err), fields).Error(); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.err, got, tc.want)
		}
	}
	if NameFlag(nil, fields) != nil {
		t.Error("nil error named")
	}
}
