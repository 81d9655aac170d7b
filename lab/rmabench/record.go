package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// emitFunc records one measured row. Every setup hands each row to it as
// soon as the row is measured, so a run killed or failed later keeps it.
type emitFunc func(Row)

// recorder appends a run's rows to its -out file as they are measured:
// one write of one JSON line per row on a file opened O_APPEND, then
// fdatasync (rows are seconds apart, the sync costs milliseconds), so a
// row is on disk before the next measurement starts. It keeps the run's
// rows for the table and ratios printed at the end, and the setups that
// failed.
type recorder struct {
	run  string // the run id each row gets
	path string
	mu   sync.Mutex
	f    *os.File
	rows []Row
	err  error // the first error writing f; later rows are kept in rows only

	failed []setupFailure
}

// setupFailure is a setup that returned an error.
type setupFailure struct {
	setup string
	err   error
}

// openRecorder opens (creating it and its directory if need be) the file
// rows of run are appended to.
func openRecorder(path, run string) (*recorder, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	return &recorder{run: run, path: path, f: f}, nil
}

// emit sets r's run id and appends it to the file and to the run's rows.
func (rec *recorder) emit(r Row) {
	r.Run = rec.run
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.rows = append(rec.rows, r)
	if rec.err != nil {
		return
	}
	if err := writeRow(rec.f, r); err != nil {
		rec.err = fmt.Errorf("appending a row to %s: %w", rec.path, err)
		fmt.Fprintln(os.Stderr, "rmabench:", rec.err)
		return
	}
	if err := unix.Fdatasync(int(rec.f.Fd())); err != nil && err != unix.EINVAL { // EINVAL: a file that cannot sync (a pipe)
		rec.err = fmt.Errorf("syncing %s: %w", rec.path, err)
		fmt.Fprintln(os.Stderr, "rmabench:", rec.err)
	}
}

// writeRow writes r as one JSON line in one write.
func writeRow(w io.Writer, r Row) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// setup runs one setup, which emits its rows as it measures them. A setup
// that fails, or whose rows could not all be written, is reported and
// remembered, and the run goes on with the next; once rows can no longer
// be written, no further setup runs.
func (rec *recorder) setup(name string, run func() error) {
	if werr := rec.writeErr(); werr != nil {
		rec.fail(name, fmt.Errorf("not run: %w", werr), 0)
		return
	}
	n := rec.count()
	err := run()
	if werr := rec.writeErr(); err == nil && werr != nil {
		err = werr // its rows measured, not all written
	}
	if err != nil {
		rec.fail(name, err, rec.count()-n)
		return
	}
	fmt.Fprintf(os.Stderr, "rmabench: %s: %d rows\n", name, rec.count()-n)
}

// fail reports that setup name failed after measuring kept rows.
func (rec *recorder) fail(name string, err error, kept int) {
	fmt.Fprintf(os.Stderr, "rmabench: setup %s failed (%d rows of it measured): %v\n", name, kept, err)
	rec.mu.Lock()
	rec.failed = append(rec.failed, setupFailure{name, err})
	rec.mu.Unlock()
}

func (rec *recorder) writeErr() error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.err
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.rows)
}

// close closes the file and returns the first error writing it.
func (rec *recorder) close() error {
	cerr := rec.f.Close()
	if rec.err != nil {
		return rec.err
	}
	return cerr
}

// summary prints, if any setup failed, each failed setup and its error,
// and reports whether every setup succeeded.
func (rec *recorder) summary(w io.Writer) bool {
	if len(rec.failed) == 0 {
		return true
	}
	fmt.Fprintf(w, "rmabench: %d setup(s) failed:\n", len(rec.failed))
	for _, f := range rec.failed {
		fmt.Fprintf(w, "  %s: %v\n", f.setup, f.err)
	}
	return false
}
