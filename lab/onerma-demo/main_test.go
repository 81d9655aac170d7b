package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// TestFlagAliases: each old spelling parses to what its canonical flag
// does.
func TestFlagAliases(t *testing.T) {
	for _, tc := range []struct {
		alias, canonical []string
	}{
		{[]string{"-role", "owner", "-ctl", "/b.sock", "-creds-fd", "3"}, []string{"-role", "owner", "-socket", "/b.sock", "-creds-fd", "3"}},
		{[]string{"-role", "reader", "-ctl", "/a.sock", "-region", "0x10001", "-keyx", "127.0.0.1:5", "-creds-fd", "4"},
			[]string{"-role", "reader", "-socket", "/a.sock", "-region", "0x10001", "-server", "127.0.0.1:5", "-creds-fd", "4"}},
	} {
		a, err := parse(tc.alias, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", tc.alias, err)
		}
		c, err := parse(tc.canonical, &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", tc.canonical, err)
		}
		if !reflect.DeepEqual(a, c) {
			t.Errorf("%q: %+v\n%q: %+v", tc.alias, a, tc.canonical, c)
		}
	}
}

// TestUsage: -h prints a synopsis after "usage:", an example invocation,
// the flags and each alias once.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if _, err := parse([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	got := out.String()
	for _, want := range []string{"usage: onerma-demo ", "\nexamples:\n  onerma-demo -rmad bin/rmad\n", "\nflags:\n", "  -ctl: alias of -socket\n", "  -keyx: alias of -server\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("usage lacks %q:\n%s", want, got)
		}
	}
}

// TestFlagErrors: a bad value is refused with an error naming its flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-role", "spectator"}, `-role "spectator": want orchestrate, owner or reader`},
		{[]string{"-role", "owner"}, "-role owner needs -creds-fd"},
		{[]string{"-role", "reader", "-creds-fd", "3"}, "-role reader needs -region and -server"},
		{[]string{"-creds-fd", "three"}, "-creds-fd"},
	} {
		if _, err := parse(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
