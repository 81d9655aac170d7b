// Package repolint holds tests that keep the repository's own text honest.
// It has no code of its own: its test, comments_test.go, reads every
// non-test Go file of the module (git ls-files, or a walk from the
// directory of go.mod where git is missing; testdata/ and _test.go files
// are skipped) and fails, naming file:line, on three things in comments:
//
//   - run ids (a UTC timestamp, date T time Z, as rmabench names runs): a
//     comment names the benchmark or command that measures a number, never
//     one run of it;
//   - measurement wording ("measured", "on this VM", "we saw", "in our
//     runs", a rate followed by "here") in a sentence that also holds a
//     number with a unit of time, rate, share or ratio. A comment states
//     the rule or the design reason and points to bench/RESULTS.md, or to
//     the command that measures it, for what one machine measured. A
//     number that is a rule ("TIMEOUT 2 ms by default", "a 4 KB chunk")
//     passes;
//   - references to files that do not exist. A bare Go or Markdown file
//     name is looked up in the comment's own directory and at the module
//     root; a path with a slash (engine/sim/figures.go, bench/RESULTS.md)
//     at the module root, in the comment's directory and in the
//     directories above it.
//
// allow.txt lists the exceptions, one per line with the reason; an entry
// that no longer matches anything fails the test too, so the list shrinks
// as comments are reworded. The test needs no root and reads only the
// working tree, so `go test ./...` always runs it.
package repolint
