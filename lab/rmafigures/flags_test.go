package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestUsage: -h prints a synopsis after "usage:", an example invocation
// and the flags.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	if _, err := parse([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"usage: rmafigures ", "\nexamples:\n  rmafigures -out figures\n", "\nflags:\n", "  -kv string"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFlagErrors: a bad value is refused with an error naming its flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-jobs", "0"}, "-jobs 0: want at least 1"},
		{[]string{"-jobs", "many"}, "-jobs"},
		{[]string{"-out", ""}, "-out"},
		{[]string{"figures"}, `unexpected arguments ["figures"]`},
	} {
		if _, err := parse(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	if o, err := parse([]string{"-out", "f", "-kv", "b.jsonl", "-jobs", "2"}, &bytes.Buffer{}); err != nil || *o != (options{out: "f", kv: "b.jsonl", jobs: 2}) {
		t.Errorf("%+v, %v", o, err)
	}
}
