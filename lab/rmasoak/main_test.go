package main

import (
	"bytes"
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// TestFlagAliases: -d, the old spelling, parses to what -D does.
func TestFlagAliases(t *testing.T) {
	a, err := parse([]string{"-d", "1m", "-bin", "b"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := parse([]string{"-D", "1m", "-bin", "b"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, c) {
		t.Errorf("-d: %+v, -D: %+v", a, c)
	}
}

// TestUsage: -h prints a synopsis after "usage:", an example invocation,
// the flags and the alias once.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if _, err := parse([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	got := out.String()
	for _, want := range []string{"usage: rmasoak ", "\nexamples:\n  rmasoak -bin bin -D 1m\n", "\nflags:\n", "  -d: alias of -D\n"} {
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
		{[]string{"-D", "10s"}, "-D 10s: want at least 30s"},
		{[]string{"-d", "10s"}, "-D 10s: want at least 30s"},
		{[]string{"-D", "long"}, "-D"},
		{[]string{"-rate", "fast"}, "-rate"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
		{[]string{"-profiles"}, "-profiles needs -dir"},
	} {
		if _, err := parse(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
