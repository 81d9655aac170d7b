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
	for _, want := range []string{"usage: rmatop ", "\nexamples:\n  rmatop", "\nflags:\n", "  -interval duration"} {
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
		{[]string{"-interval", "0s"}, "-interval 0s: want a positive duration"},
		{[]string{"-interval", "often"}, "-interval"},
		{[]string{"-count", "-1"}, "-count -1: want"},
		{[]string{"-pid", "-3"}, "-pid -3: want"},
		{[]string{"-delays", "total,queue"}, `-delays: unknown delay "queue"`},
	} {
		if _, err := parse(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
