package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/onerma/onerma/keyx"
)

// rmaperfRun runs one rmaperf measurement, pinned to cpu when cpu != "".
// creds, if not nil, are handed to it over an inherited pipe (-creds-fd)
// for the key exchange with an rmaperf server.
func rmaperfRun(rmaperf, cpu string, s spec, dur time.Duration, setup string, creds *keyx.Credentials, args ...string) (Row, error) {
	cmd, closeAfter, err := rmaperfCmd(rmaperf, cpu, s, dur, setup, creds, args...)
	if err != nil {
		return Row{}, err
	}
	defer closeAfter()
	return rmaperfOutput(cmd, setup)
}

// rmaperfOutput runs cmd, an rmaperf measurement of rmaperfCmd's, and
// returns its row.
func rmaperfOutput(cmd *exec.Cmd, setup string) (Row, error) {
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	if err != nil {
		return Row{}, fmt.Errorf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	return rmaperfRow(cmd, outb, setup)
}

// rmaperfCmd builds the command of an rmaperf measurement (see
// rmaperfRun); call closeAfter once it has started (or will not start).
func rmaperfCmd(rmaperf, cpu string, s spec, dur time.Duration, setup string, creds *keyx.Credentials, args ...string) (cmd *exec.Cmd, closeAfter func(), err error) {
	a := append([]string{s.test}, args...)
	a = append(a, "-s", strconv.Itoa(s.size), "-O", strconv.Itoa(s.depth), "-D", dur.String(), "-json", "-setup", setup)
	name := rmaperf
	if cpu != "" {
		a = append([]string{"-c", cpu, rmaperf}, a...)
		name = "taskset"
	}
	cmd = exec.Command(name, a...)
	closeAfter = func() {}
	if creds != nil {
		fd, ca, err := keyx.Attach(cmd, creds)
		if err != nil {
			return nil, nil, err
		}
		closeAfter = ca
		cmd.Args = append(cmd.Args, "-creds-fd", strconv.Itoa(fd))
	}
	return cmd, closeAfter, nil
}

// rmaperfRow parses the -json line of rmaperf run as cmd.
func rmaperfRow(cmd *exec.Cmd, outb []byte, setup string) (Row, error) {
	var r Row
	if err := json.Unmarshal(outb, &r); err != nil {
		return Row{}, fmt.Errorf("rmaperf output %q: %v", outb, err)
	}
	r.Setup, r.Command = setup, strings.Join(cmd.Args, " ")
	return r, nil
}

func addNote(note, s string) string {
	if note == "" {
		return s
	}
	return s + "; " + note
}
