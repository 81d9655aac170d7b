package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// parse parses cmd's flags as rmaperf would, its usage text to out.
func parse(cmd string, args []string, out *bytes.Buffer) (any, error) {
	if cmd == "server" {
		return parseServer(args, out)
	}
	return parseClient(cmd, args, out)
}

// TestFlagAliases: each old spelling parses to what its canonical flag
// does.
func TestFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		cmd              string
		alias, canonical []string
	}{
		{"server", []string{"-ctl", "/x.sock"}, []string{"-socket", "/x.sock"}},
		{"read_bw", []string{"-self", "-ctl", "/x.sock"}, []string{"-self", "-socket", "/x.sock"}},
		{"write_lat", []string{"-ctl=/x.sock", "-server", "h:1", "-region", "0x10001"}, []string{"-socket=/x.sock", "-server", "h:1", "-region", "0x10001"}},
	} {
		var out bytes.Buffer
		a, err := parse(tc.cmd, tc.alias, &out)
		if err != nil {
			t.Fatalf("%s %q: %v", tc.cmd, tc.alias, err)
		}
		c, err := parse(tc.cmd, tc.canonical, &out)
		if err != nil {
			t.Fatalf("%s %q: %v", tc.cmd, tc.canonical, err)
		}
		if !reflect.DeepEqual(a, c) {
			t.Errorf("%s %q: %+v\n%q: %+v", tc.cmd, tc.alias, a, tc.canonical, c)
		}
	}
}

// TestUsage: rmaperf and each of its commands print, on -h, a synopsis
// after "usage:", an example invocation and the flags, each alias once.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	if got := out.String(); !strings.HasPrefix(got, "usage: rmaperf server") || !strings.Contains(got, "\nexamples:\n  rmaperf ") {
		t.Errorf("rmaperf usage:\n%s", got)
	}
	for _, cmd := range []string{"server", "read_bw", "read_lat", "write_bw", "write_lat"} {
		out.Reset()
		if _, err := parse(cmd, []string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: %v", cmd, err)
		}
		got := out.String()
		for _, want := range []string{"usage: rmaperf " + cmd + " ", "\nexamples:\n  rmaperf " + cmd + " ", "\nflags:\n", "  -socket string", "  -ctl: alias of -socket\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s -h lacks %q:\n%s", cmd, want, got)
			}
		}
		if n := strings.Count(got, "-ctl"); n != 1 {
			t.Errorf("%s -h: -ctl %d times", cmd, n)
		}
	}
}

// TestFlagErrors: a bad value is refused with an error naming its flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"server", []string{"-region-bytes", "0"}, "-region-bytes 0: want at least 1"},
		{"server", []string{"-region-bytes", "x"}, "-region-bytes"},
		{"server", []string{"-grant", "a=read+delete"}, `invalid value "a=read+delete" for flag -grant: permit "a=read+delete": op "delete" unknown`},
		{"server", []string{"-grant", "a@host"}, `-grant: permit "a@host": address "host": want an IPv4 address`},
		{"read_bw", []string{"-self", "-s", "0"}, "-s 0: want 1..4096"},
		{"read_bw", []string{"-self", "-s", "big"}, "-s"},
		{"read_bw", []string{"-self", "-O", "0"}, "-O 0: want at least 1"},
		{"read_bw", []string{"-self", "-D", "soon"}, "-D"},
		{"read_bw", []string{"-self", "-rate", "-1"}, "-rate -1: want 0 or more"},
		{"read_bw", []string{"-self", "-class", "mid"}, `-class "mid": want low or high`},
		{"read_bw", []string{"-self", "-exec", "-chunk", "5000"}, "-chunk: "},
		{"read_bw", []string{"-self", "-exec", "-cc-min", "0"}, "-cc-min: "},
		{"read_bw", []string{"-self", "-exec", "-short-hold-max", "2s"}, "-short-hold-max: "},
		{"read_bw", []string{"-self", "-local-bytes", "100"}, "-local-bytes 100: want a multiple of 4096"},
		{"read_bw", []string{"-self", "-region-bytes", "10"}, "-region-bytes 10: smaller than -s 64"},
		{"read_bw", []string{"-server", "h:1"}, "-server needs -region"},
		{"read_bw", []string{}, "need -server or -self"},
		{"write_bw", []string{"-server", "h:1", "-region", "1", "-verify"}, "-verify of a write test needs -self"},
		{"read_bw", []string{"-self", "-dst", "host"}, `-dst "host": want an IPv4 address`},
		{"read_bw", []string{"-self", "-dst", "::1"}, `-dst "::1": want an IPv4 address`},
		{"read_bw", []string{"-self", "-dst", "10.0.0.9", "-verify"}, "-dst 10.0.0.9: only for the raw tests"},
		{"read_bw", []string{"-self", "-dst", "10.0.0.9", "-s", "8192"}, "-dst 10.0.0.9: only for the raw tests"},
	} {
		_, err := parse(tc.cmd, tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want %q", tc.cmd, tc.args, err, tc.want)
		}
	}
}

// TestGrantFlag: -grant repeats, each a keyx permit.
func TestGrantFlag(t *testing.T) {
	o, err := parseServer([]string{"-grant", "alice", "-grant", "bob=read+write@10.0.0.0/24+any"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.grants.String(); got != "alice=read bob=read+write@10.0.0.0/24+any" {
		t.Fatalf("grants %q", got)
	}
}
