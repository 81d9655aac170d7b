package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/onerma/onerma/ctlmsg"
	"github.com/onerma/onerma/internal/cli"
)

// TestUsage: rmactl and each of its commands print, on -h, a synopsis
// after "usage:", an example invocation and the flags, and exit 0.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		synopsis string
	}{
		{[]string{"-h"}, statsUsage},
		{[]string{"stats", "-h"}, statsUsage},
		{[]string{"identity", "-h"}, identityUsage},
		{[]string{"creds", "-h"}, credsUsage},
		{[]string{"creds", "issue", "-h"}, credsIssueUsage},
		{[]string{"creds", "revoke", "-h"}, credsRevokeUsage},
		{[]string{"creds", "list", "-h"}, credsListUsage},
		{[]string{"-socket", "/x.sock", "stats", "-h"}, statsUsage},
	} {
		var out, errOut bytes.Buffer
		err := rmactl(tc.args, &out, &errOut)
		if !errors.Is(err, flag.ErrHelp) || cli.ExitCode(err) != 0 {
			t.Errorf("%q: %v", tc.args, err)
		}
		got := errOut.String()
		for _, want := range []string{"usage: " + tc.synopsis + "\n", "\nexamples:\n  rmactl ", "\nflags:\n"} {
			if !strings.Contains(got, want) {
				t.Errorf("%q lacks %q:\n%s", tc.args, want, got)
			}
		}
	}
	var out, errOut bytes.Buffer
	if err := rmactl(nil, &out, &errOut); cli.ExitCode(err) != 2 || !strings.HasPrefix(errOut.String(), "usage: rmactl ") {
		t.Errorf("no command: %v\n%s", err, errOut.String())
	}
}

// TestSocket: stats and identity take -socket before or after the
// command, the default being ctlmsg.DefaultSocket.
func TestSocket(t *testing.T) {
	for _, tc := range []struct {
		global string
		args   []string
		want   string
	}{
		{ctlmsg.DefaultSocket, nil, ctlmsg.DefaultSocket},
		{"/a.sock", nil, "/a.sock"},
		{ctlmsg.DefaultSocket, []string{"-socket", "/b.sock"}, "/b.sock"},
		{"/a.sock", []string{"-socket", "/b.sock"}, "/b.sock"},
	} {
		for name, parse := range map[string]func(string, []string, *bytes.Buffer) (*engineOptions, error){
			"stats":    func(s string, a []string, w *bytes.Buffer) (*engineOptions, error) { return parseStats(s, a, w) },
			"identity": func(s string, a []string, w *bytes.Buffer) (*engineOptions, error) { return parseIdentity(s, a, w) },
		} {
			o, err := parse(tc.global, tc.args, &bytes.Buffer{})
			if err != nil || o.socket != tc.want {
				t.Errorf("%s %s %q: %+v %v, want %s", tc.global, name, tc.args, o, err, tc.want)
			}
		}
	}
}

// TestFlagErrors: a bad value is refused with an error naming its flag.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "-json=maybe"}, "-json"},
		{[]string{"stats", "extra"}, `stats: unexpected arguments ["extra"]`},
		{[]string{"creds", "-valid", "soon", "d"}, "-valid"},
		{[]string{"creds", "issue", "-valid", "soon"}, "-valid"},
		{[]string{"frobnicate"}, "usage error"},
	} {
		var out, errOut bytes.Buffer
		err := rmactl(tc.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error()+errOut.String(), tc.want) {
			t.Errorf("%q: %v\n%s\nwant %q", tc.args, err, errOut.String(), tc.want)
		}
	}
}
