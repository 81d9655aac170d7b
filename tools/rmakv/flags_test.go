package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// parse parses cmd's flags as rmakv would, its usage text to out.
func parse(cmd string, args []string, out *bytes.Buffer) (any, error) {
	switch cmd {
	case "server":
		return parseServer(args, out)
	case "bench":
		return parseBench(args, out)
	case "fig9":
		return parseFig9(args, out)
	}
	f, _, err := parseClient(cmd, args, out)
	return f, err
}

// client is what every client command needs.
var client = []string{"-creds", "/c", "-servers", "h:1"}

// TestFlagAliases: each old spelling parses to what its canonical flag
// does.
func TestFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		cmd              string
		alias, canonical []string
	}{
		{"server", []string{"-creds", "/c", "-quiet"}, []string{"-creds", "/c", "-q"}},
		{"get", append([]string{"-inflight", "9"}, append(client, "k")...), append([]string{"-O", "9"}, append(client, "k")...)},
		{"bench", append([]string{"-value", "100", "-d", "2s", "-inflight", "3"}, client...), append([]string{"-s", "100", "-D", "2s", "-O", "3"}, client...)},
		{"fig9", []string{"-inflight", "4"}, []string{"-O", "4"}},
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

// TestUsage: rmakv and each of its commands print, on -h, a synopsis
// after "usage:", an example invocation and the flags.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	if got := out.String(); !strings.HasPrefix(got, "usage: rmakv server") || !strings.Contains(got, "\nexamples:\n  rmakv ") {
		t.Errorf("rmakv usage:\n%s", got)
	}
	for _, cmd := range []string{"server", "get", "set", "del", "stats", "bench", "fig9"} {
		out.Reset()
		if _, err := parse(cmd, []string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%s -h: %v", cmd, err)
		}
		got := out.String()
		for _, want := range []string{"usage: rmakv " + cmd + " ", "\nexamples:\n  rmakv " + cmd + " ", "\nflags:\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s -h lacks %q:\n%s", cmd, want, got)
			}
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
		{"server", nil, "-creds is required"},
		{"server", []string{"-creds", "/c", "-ways", "x"}, "-ways"},
		{"server", []string{"-creds", "/c", "-grant", "ro=update"}, `-grant: permit "ro=update": op "update" unknown`},
		{"get", []string{"k"}, "-servers and -creds are required"},
		{"get", append([]string{"-O", "0"}, append(client, "k")...), "-O 0: want 1..4096"},
		{"stats", append([]string{"-replicas", "-1"}, client...), "-replicas -1: want"},
		{"stats", append([]string{"-max-value", "-1"}, client...), "-max-value -1: want"},
		{"bench", append([]string{"-keys", "0"}, client...), "-keys 0: want at least 1"},
		{"bench", append([]string{"-s", "-1"}, client...), "-s -1: want 0.."},
		{"bench", append([]string{"-value", "-1"}, client...), "-s -1: want 0.."},
		{"bench", append([]string{"-D", "0s"}, client...), "-D 0s: want a positive duration"},
		{"bench", append([]string{"-d", "later"}, client...), "-d"},
		{"fig9", []string{"-runs", "0"}, "-runs 0: want at least 1"},
		{"fig9", []string{"-O", "0"}, "-O 0: want 1..4096"},
		{"fig9", []string{"-cases", "fig9z"}, `-cases: unknown case "fig9z"`},
	} {
		_, err := parse(tc.cmd, tc.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want %q", tc.cmd, tc.args, err, tc.want)
		}
	}
}
