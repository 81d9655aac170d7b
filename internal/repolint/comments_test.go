package repolint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestComments fails on run ids, measurement claims and references to
// missing files in the comments of non-test Go files (package doc).
func TestComments(t *testing.T) {
	root := moduleRoot(t)
	files := repoFiles(t, root)
	allow := readAllow(t, filepath.Join(root, "internal", "repolint", "allow.txt"))

	var all []finding
	for _, f := range files.list {
		if !lintable(f) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, lintFile(f, src, files)...)
	}

	var bad []finding
	for _, f := range all {
		if !allow.permits(f) {
			bad = append(bad, f)
		}
	}
	for _, f := range bad {
		t.Errorf("%s", f)
	}
	if len(bad) > 0 {
		t.Errorf("%d comment(s) above: state the rule or the design reason and point to "+
			"bench/RESULTS.md (or the command that measures it) instead of quoting one "+
			"machine's numbers; name files that exist; or, for a real rule, add a line "+
			"with its reason to internal/repolint/allow.txt", len(bad))
	}
	for _, e := range allow.entries {
		if e.used == 0 {
			t.Errorf("allow.txt:%d: %q matches nothing any more: delete it", e.line, e.raw)
		}
	}
}

// finding is one comment the test objects to.
type finding struct {
	file string // slash-separated, relative to the module root
	line int
	kind string // "run id", "measurement", "missing file"
	text string // what allow.txt matches: the line, the sentence or the file name
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.file, f.line, f.kind, f.text)
}

// lintable reports whether the linter reads file f.
func lintable(f string) bool {
	if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
		return false
	}
	for _, dir := range strings.Split(path.Dir(f), "/") {
		if dir == "testdata" || dir == "vendor" {
			return false
		}
	}
	return true
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// fileSet is the repository's files (tracked, or untracked and not
// ignored) and the directories that hold them, slash-separated.
type fileSet struct {
	list []string
	has  map[string]bool // files and directories
}

func (s *fileSet) add(f string) {
	s.list = append(s.list, f)
	for p := f; p != "." && !s.has[p]; p = path.Dir(p) {
		s.has[p] = true
	}
}

// repoFiles lists the repository's files with git, or by walking the
// module when git or the .git directory is missing (a module download).
func repoFiles(t *testing.T, root string) *fileSet {
	t.Helper()
	s := &fileSet{has: map[string]bool{}}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			if f == "" {
				continue
			}
			// Tracked but deleted in the working tree: gone.
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err != nil {
				continue
			}
			s.add(f)
		}
		sort.Strings(s.list)
		return s
	}
	t.Logf("git ls-files: %v; walking %s", err, root)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			s.add(filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(s.list)
	return s
}

// commentLine is one line of a comment, without its // or /* */.
type commentLine struct {
	line int
	text string
}

// lintFile checks the comments of one Go file, named f in files.
func lintFile(f string, src []byte, files *fileSet) []finding {
	var out []finding
	for _, block := range commentBlocks(f, src) {
		// A bare name that the block also spells out as a path that
		// exists ("writes fig8.md (figures/fig8.md by default)") is that
		// file.
		spelled := map[string]bool{}
		for _, l := range block {
			for _, ref := range fileRefs(l.text) {
				if strings.Contains(ref, "/") && resolves(ref, path.Dir(f), files) {
					spelled[path.Base(ref)] = true
				}
			}
		}
		for _, l := range block {
			if runIDRe.MatchString(l.text) {
				out = append(out, finding{f, l.line, "run id", strings.TrimSpace(l.text)})
			}
			for _, ref := range fileRefs(l.text) {
				if !spelled[ref] && !resolves(ref, path.Dir(f), files) {
					out = append(out, finding{f, l.line, "missing file", ref})
				}
			}
		}
		out = append(out, measurements(f, block)...)
	}
	return out
}

// commentBlocks returns the file's comments: a run of // comments that
// each start their own line is one block, and so is a /* */ comment or a
// comment that follows code on its line. Directives (//go:build,
// //export, //line) and a cgo preamble's #include lines are left out.
func commentBlocks(name string, src []byte) [][]commentLine {
	fset := token.NewFileSet()
	file := fset.AddFile(name, fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, scanner.ScanComments)

	var blocks [][]commentLine
	var cur []commentLine
	lastCode, lastLine := 0, 0 // the last line with code, with a standalone // comment
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, cur)
			cur = nil
		}
	}
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		line := fset.Position(pos).Line
		if tok != token.COMMENT {
			lastCode = line
			continue
		}
		if strings.HasPrefix(lit, "/*") {
			flush()
			var b []commentLine
			for i, l := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(lit, "/*"), "*/"), "\n") {
				if strings.HasPrefix(strings.TrimSpace(l), "#include") {
					l = ""
				}
				b = append(b, commentLine{line + i, l})
			}
			blocks = append(blocks, b)
			continue
		}
		if directive(lit) {
			flush()
			continue
		}
		text := strings.TrimPrefix(lit, "//")
		if line == lastCode { // after code on its line
			flush()
			blocks = append(blocks, []commentLine{{line, text}})
			continue
		}
		if line != lastLine+1 {
			flush()
		}
		cur = append(cur, commentLine{line, text})
		lastLine = line
	}
	flush()
	return blocks
}

func directive(lit string) bool {
	for _, p := range []string{"//go:", "//export ", "//line ", "//extern ", "//nolint"} {
		if strings.HasPrefix(lit, p) {
			return true
		}
	}
	return false
}

// runIDRe is a run id as rmabench names runs (UTC, to the second).
var runIDRe = regexp.MustCompile(`\b\d{8}T\d{6}Z\b`)

// Measurements.
//
// A claim of what was measured is a sentence that holds both wording of
// measurement (measWordRe) and a number with a unit of time, rate, share or
// ratio (quantityRe), or a quantity followed by "here" ("3 M ops/s here").
// A quantity alone is a rule ("TIMEOUT 2 ms by default"), and so is
// wording alone ("measured with `rmaperf read_bw`"); sizes (KB, MB) are
// not quantities. Sentences end at . ! or ? before a space, and at a blank
// comment line unless the text before it ends in a colon.
var (
	measWordRe = regexp.MustCompile(`(?i)\b(?:measured|observed|` +
		`we (?:saw|see|measured|measure|observed|got|get|found)|here we saw|` +
		`on (?:this|our|a|the) (?:vm|virtual machine|machine|host|box|laptop|computer)|` +
		`(?:this|our) (?:vm|host|machine)|` +
		`in our (?:runs|tests|measurements|benchmarks)|our runs|by hand)\b`)

	// quantityRe: a number (or a range of two) and a unit; the characters
	// on either side are checked by quantities.
	quantityRe = regexp.MustCompile(`(\d+(?:[.,]\d+)*)(?:\s?(?:-|–|to)\s?\d+(?:[.,]\d+)*)?\s?` +
		`(M ops/s|Mops/s|Mops|Mpps|kpps|pps|[kKMG]?\s?[A-Za-z]*/s|ns|µs|μs|us|ms|s|cycles|%|×|x)`)

	hereRe     = regexp.MustCompile(`^\s*\(?here\b`)
	sentenceRe = regexp.MustCompile(`[.!?]+(?:\s+|$)`)
)

// quantities returns the byte offsets in s just past each number with a
// unit.
func quantities(s string) []int {
	var ends []int
	for _, m := range quantityRe.FindAllStringSubmatchIndex(s, -1) {
		if m[0] > 0 {
			r, _ := utf8.DecodeLastRuneInString(s[:m[0]])
			if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '.' {
				continue // part of a word, a name or a version
			}
		}
		if m[1] < len(s) {
			r, _ := utf8.DecodeRuneInString(s[m[1]:])
			if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' {
				continue // 2 slots, 0x1f
			}
		}
		ends = append(ends, m[1])
	}
	return ends
}

// presentPassive reports whether word, after before, says what the code
// does ("each is measured alone", "a slow op is measured, not failed")
// rather than what was measured.
func presentPassive(before, word string) bool {
	switch strings.ToLower(word) {
	case "measured", "observed":
	default:
		return false
	}
	f := strings.Fields(before)
	if len(f) == 0 {
		return false
	}
	switch strings.ToLower(f[len(f)-1]) {
	case "is", "are", "be", "get", "gets":
		return true
	}
	return false
}

// measurements returns the sentences of block that claim a measurement.
func measurements(f string, block []commentLine) []finding {
	var out []finding
	// Paragraphs: joined lines, with each line's offset in the join.
	var para strings.Builder
	var starts, lines []int
	check := func() {
		text := para.String()
		lineAt := func(off int) int {
			i := sort.SearchInts(starts, off+1) - 1
			return lines[i]
		}
		prev := 0
		for _, cut := range append(sentenceRe.FindAllStringIndex(text, -1), []int{len(text), len(text)}) {
			sent := text[prev:cut[1]]
			base := prev
			prev = cut[1]
			if strings.TrimSpace(sent) == "" {
				continue
			}
			qs := quantities(sent)
			if len(qs) == 0 {
				continue
			}
			at := -1
			for _, w := range measWordRe.FindAllStringIndex(sent, -1) {
				if !presentPassive(sent[:w[0]], sent[w[0]:w[1]]) {
					at = w[0]
					break
				}
			}
			for _, q := range qs {
				if hereRe.MatchString(sent[q:]) && (at < 0 || q < at) {
					at = q
				}
			}
			if at >= 0 {
				out = append(out, finding{f, lineAt(base + at), "measurement", strings.Join(strings.Fields(sent), " ")})
			}
		}
		para.Reset()
		starts, lines = starts[:0], lines[:0]
	}
	for _, l := range block {
		if strings.TrimSpace(l.text) == "" {
			// A paragraph that ends in a colon goes on into the next
			// (a table of numbers, introduced by how they were taken).
			if !strings.HasSuffix(para.String(), ":") {
				check()
			}
			continue
		}
		if para.Len() > 0 {
			para.WriteByte(' ')
		}
		starts = append(starts, para.Len())
		lines = append(lines, l.line)
		para.WriteString(strings.TrimSpace(l.text))
	}
	check()
	return out
}

// File references.
//
// A reference is a token that ends in a file extension the repository
// uses: with a slash (engine/sim/figures.go, scripts/setup.sh) any of
// refExts; bare (open.go, SECURITY.md) only .go and .md, since bare C
// headers and the like name system files. Tokens that are globs (*.go,
// _test.go), URLs, import paths (github.com/...), absolute paths or
// #include <...> are not references.
var (
	refRe   = regexp.MustCompile(`[\w./-]*\.(jsonl|json|yaml|yml|toml|conf|csv|png|txt|go|md|mk|sh|py|c|h|s)`)
	bareExt = map[string]bool{"go": true, "md": true, "c": true}
)

func fileRefs(line string) []string {
	var refs []string
	for _, m := range refRe.FindAllStringSubmatchIndex(line, -1) {
		tok, ext := line[m[0]:m[1]], line[m[2]:m[3]]
		if m[0] > 0 && strings.ContainsRune("*%$<{:@\\", rune(line[m[0]-1])) {
			continue
		}
		if m[1] < len(line) {
			r, _ := utf8.DecodeRuneInString(line[m[1]:])
			if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '/' || r == '-' {
				continue // foo.gob, x.md5, a directory
			}
			if r == '.' && m[1]+1 < len(line) {
				if r2, _ := utf8.DecodeRuneInString(line[m[1]+1:]); unicode.IsLetter(r2) || unicode.IsDigit(r2) {
					continue // x.go.tmpl, abi.Go...
				}
			}
		}
		tok = strings.TrimPrefix(tok, "./")
		base := path.Base(tok)
		if strings.HasPrefix(tok, "/") || strings.HasPrefix(base, "_") || strings.HasPrefix(base, ".") ||
			strings.HasPrefix(tok, "-") || !strings.ContainsAny(strings.TrimSuffix(base, "."+ext), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			continue
		}
		if strings.Contains(tok, "/") {
			first := tok[:strings.Index(tok, "/")]
			if strings.Contains(first, ".") && first != ".." {
				continue // a host name: github.com/..., golang.org/...
			}
		} else if !bareExt[ext] {
			continue
		}
		refs = append(refs, tok)
	}
	return refs
}

// resolves reports whether ref names a file or directory of the
// repository, seen from directory dir.
func resolves(ref, dir string, files *fileSet) bool {
	if !strings.Contains(ref, "/") {
		return files.has[path.Join(dir, ref)] || files.has[ref]
	}
	if files.has[path.Clean(ref)] {
		return true
	}
	for d := dir; ; d = path.Dir(d) {
		if files.has[path.Join(d, ref)] {
			return true
		}
		if d == "." {
			return false
		}
	}
}

// The allowlist.
//
// Each line of allow.txt is one of
//
//	PATH:SUBSTRING   # reason
//	re:REGEXP        # reason
//
// PATH is a file, a directory ending in / or *; SUBSTRING is looked for
// in the finding's text (the sentence, the line, or the file name; empty
// matches all). REGEXP is matched against "file: kind: text". Blank lines
// and lines starting with # are comments; every entry needs its reason.
type allowEntry struct {
	line int
	raw  string
	path string
	sub  string
	re   *regexp.Regexp
	used int
}

type allowList struct{ entries []*allowEntry }

func readAllow(t *testing.T, name string) *allowList {
	t.Helper()
	data, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return &allowList{}
	}
	if err != nil {
		t.Fatal(err)
	}
	var a allowList
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		raw := strings.TrimSpace(sc.Text())
		if raw == "" || strings.HasPrefix(raw, "#") {
			continue
		}
		spec, reason, ok := strings.Cut(raw, " #")
		if !ok || strings.TrimSpace(reason) == "" {
			t.Fatalf("allow.txt:%d: %q: give the reason after \" # \"", n, raw)
		}
		spec = strings.TrimSpace(spec)
		e := &allowEntry{line: n, raw: spec}
		if re, ok := strings.CutPrefix(spec, "re:"); ok {
			if e.re, err = regexp.Compile(re); err != nil {
				t.Fatalf("allow.txt:%d: %v", n, err)
			}
		} else if e.path, e.sub, ok = strings.Cut(spec, ":"); !ok || e.path == "" {
			t.Fatalf("allow.txt:%d: %q: want PATH:SUBSTRING or re:REGEXP", n, spec)
		}
		a.entries = append(a.entries, e)
	}
	return &a
}

// permits reports whether an entry allows f, and counts the entries'
// uses.
func (a *allowList) permits(f finding) bool {
	ok := false
	for _, e := range a.entries {
		var m bool
		if e.re != nil {
			m = e.re.MatchString(f.file + ": " + f.kind + ": " + f.text)
		} else {
			m = (e.path == "*" || e.path == f.file || strings.HasSuffix(e.path, "/") && strings.HasPrefix(f.file, e.path)) &&
				strings.Contains(f.text, e.sub)
		}
		if m {
			e.used++
			ok = true
		}
	}
	return ok
}

// TestHeuristics pins what the checks take for a claim, a rule and a file
// reference.
func TestHeuristics(t *testing.T) {
	claims := []string{
		"The loop reaches 3.2 M ops/s here.",
		"A seal costs 31-42 ns on this VM.",
		"Here we saw p99 of 12 µs at 16 in flight.",
		"We measured 2.5 GB/s at 4 KB.",
		"In our runs the ratio was 1.4x.",
		"Tuned by hand: 5 % of the CPU.",
		"Measured with `rmabench -only rtt`: net_memif 245 µs, net_tap 1532 µs.",
		"A 1 ms poll, as measured, cost 2-4 % of the throughput.",
	}
	rules := []string{
		"A default stated in ms is fine: TIMEOUT 2 ms by default.",
		"Each run moves a 4 KB chunk.",
		"The RTT is measured with `rmaperf read_lat -s 4096`.",
		"A slow op is measured, not failed, with TIMEOUT 1 s.",
		"Peers on this host are identified by SO_PEERCRED.",
		"Sleeps from 1µs to 200µs; the preemption period is 10 ms.",
		"Goodput is computed over windows of 10 RTTs (1.4% per op).",
		"We keep 2 slots per key.",
	}
	check := func(s string) bool {
		var b []commentLine
		for i, l := range strings.Split(s, "\n") {
			b = append(b, commentLine{i + 1, " " + l})
		}
		return len(measurements("x.go", b)) > 0
	}
	for _, s := range claims {
		if !check(s) {
			t.Errorf("not taken for a claim: %q", s)
		}
	}
	for _, s := range rules {
		if check(s) {
			t.Errorf("taken for a claim: %q", s)
		}
	}
	// A paragraph ending in a colon runs on into the table below it.
	if !check("Measured with `rmabench -only rtt`:\n\n\tnet_memif 245 µs\n") {
		t.Errorf("a table after a colon is not its sentence's")
	}
	if !runIDRe.MatchString("run 20261126T070417Z") || runIDRe.MatchString("20060102150405") {
		t.Errorf("runIDRe")
	}

	files := &fileSet{has: map[string]bool{}}
	for _, f := range []string{"engine/pull.go", "engine/sim/write.go", "bench/RESULTS.md", "SECURITY.md", "figures/fig8.md"} {
		files.add(f)
	}
	for _, c := range []struct {
		dir, line string
		missing   []string
	}{
		{"engine/sim", "four hops (engine/write.go), as write.go models them", []string{"engine/write.go"}},
		{"engine", "see open.go and pull.go", []string{"open.go"}},
		{"engine/sim", "see engine/pull.go, ../pull.go, sim/write.go and SECURITY.md", nil},
		{"tools/x", "bench/RESULTS.md, docs/hosts.md and foo/bar.c", []string{"docs/hosts.md", "foo/bar.c"}},
		{"tools/x", "bench/out.jsonl, scripts/x.sh, a/b.csv", []string{"bench/out.jsonl", "scripts/x.sh", "a/b.csv"}},
		{"tools/x", "not files: *.go, _test.go, github.com/a/b.go, /etc/x.conf, <linux/if_link.h>, p.h, abi.Go, x.go.tmpl", nil},
	} {
		var missing []string
		for _, ref := range fileRefs(c.line) {
			if !resolves(ref, c.dir, files) {
				missing = append(missing, ref)
			}
		}
		if fmt.Sprint(missing) != fmt.Sprint(c.missing) {
			t.Errorf("%s: %q: missing %q, want %q", c.dir, c.line, missing, c.missing)
		}
	}
}
