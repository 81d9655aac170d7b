// Package frontdoor keeps the repository's front door from rotting: the
// README, ARCHITECTURE.md, SECURITY.md and docs/ are what a newcomer
// reads first, so their links must resolve, the README and ARCHITECTURE
// must stay short, the README's Go application must compile against the
// API of the tree, and its tour must run (e2e/tour_test.go runs it with
// real engines; this package's tests need neither root nor DPDK).
//
// The README marks its two executable blocks with an HTML comment on the
// line before the fence, which renders as nothing:
//
//	<!-- tour: ... -->   the next ```sh block: the tour, run with bash -e
//	<!-- app: ... -->    the next ```go block: a main package that must compile
//
//	<!-- py-app: ... --> the next ```python block: "Using OneRMA from
//	                     Python", run by e2e's tour test against the tour's
//	                     engines (PyApp, Python)
//
// and docs/c.md ("Using OneRMA from C") marks its first program likewise:
//
//	<!-- c-app: ... -->  the next ```c block: examples/c/hello.c, byte for
//	                     byte; e2e builds it against an installed libonerma
//	                     with pkg-config (BuildCApp) and runs it
//
// In the tour, a line that starts "#   " (a hash and three spaces) is
// output the reader will see; "…" in it stands for anything (numbers that
// vary). Every other line is a command, or a comment.
//
// Headings are turned into anchors as GitHub does: lower case, every
// character but letters, digits, spaces, hyphens and underscores dropped,
// spaces turned into hyphens, and a repeated anchor suffixed -1, -2, ...
//
// Imports nothing of ours: the e2e tour test imports it.
package frontdoor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"unicode"
)

// Root is the module's root: the nearest directory at or above the working
// directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("frontdoor: no go.mod at or above the working directory")
		}
		dir = up
	}
}

// Line is one line of a Markdown document with its 1-based number and
// whether it lies inside a fenced code block (the fences included).
type Line struct {
	N      int
	Text   string
	InCode bool
}

// Lines splits doc into lines and marks those of fenced code blocks.
func Lines(doc []byte) []Line {
	var out []Line
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		trimmed := strings.TrimLeft(text, " ")
		in := fence != ""
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence, in = trimmed[:3], true
		case fence != "" && strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "":
			fence = ""
		}
		out = append(out, Line{N: n, Text: text, InCode: in})
	}
	return out
}

// Link is one inline Markdown link: its target as written and its line.
type Link struct {
	Target string
	Line   int
}

var (
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRE = regexp.MustCompile("`[^`]*`")
)

// Links returns the inline links of doc outside code blocks and code spans.
func Links(doc []byte) []Link {
	var out []Link
	for _, l := range Lines(doc) {
		if l.InCode {
			continue
		}
		text := codeRE.ReplaceAllString(l.Text, "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			out = append(out, Link{Target: m[1], Line: l.N})
		}
	}
	return out
}

// IsRelative reports whether a link target names a file of this
// repository (or an anchor of the same document), not a URL.
func IsRelative(target string) bool {
	if strings.HasPrefix(target, "//") {
		return false
	}
	if i := strings.IndexAny(target, ":/#"); i >= 0 && target[i] == ':' {
		return false // a scheme: https:, mailto:, ...
	}
	return true
}

// Slug is the anchor GitHub gives a heading's text.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of doc's headings (outside code blocks).
func Anchors(doc []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range Lines(doc) {
		if l.InCode || !strings.HasPrefix(l.Text, "#") {
			continue
		}
		level := len(l.Text) - len(strings.TrimLeft(l.Text, "#"))
		if level > 6 || !strings.HasPrefix(l.Text[level:], " ") {
			continue
		}
		s := Slug(strings.TrimRight(strings.TrimSpace(l.Text[level:]), "#"))
		if n := seen[s]; n > 0 {
			seen[s]++
			s = fmt.Sprintf("%s-%d", s, n)
		} else {
			seen[s] = 1
		}
		out[s] = true
	}
	return out
}

// Block returns the body of the first fenced code block after the line
// that starts "<!-- marker" (an HTML comment), and the block's language.
func Block(doc []byte, marker string) (lang, body string, err error) {
	lines := Lines(doc)
	start := -1
	for i, l := range lines {
		if !l.InCode && strings.HasPrefix(strings.TrimSpace(l.Text), "<!-- "+marker) {
			start = i
			break
		}
	}
	if start < 0 {
		return "", "", fmt.Errorf("frontdoor: no <!-- %s --> marker", marker)
	}
	i := start + 1
	for i < len(lines) && strings.TrimSpace(lines[i].Text) == "" {
		i++
	}
	if i == len(lines) || !lines[i].InCode {
		return "", "", fmt.Errorf("frontdoor: <!-- %s --> (line %d) is not followed by a code block", marker, lines[start].N)
	}
	lang = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(lines[i].Text), "`~"))
	var b strings.Builder
	for i++; i < len(lines); i++ {
		if t := strings.TrimSpace(lines[i].Text); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			return lang, b.String(), nil // the closing fence
		}
		b.WriteString(lines[i].Text)
		b.WriteByte('\n')
	}
	return "", "", fmt.Errorf("frontdoor: the code block after <!-- %s --> is not closed", marker)
}

// OutputPrefix starts a line of the tour that shows output, not a command.
const OutputPrefix = "#   "

// TourBin is how the tour names the directory of the built binaries (the
// clone's bin/, as make build leaves it); e2e substitutes the directory
// it tests.
const TourBin = "$PWD/bin"

// Tour returns the README's tour: the script (the sh block after
// <!-- tour), and a pattern for each output line it shows, to be matched
// against whole lines of the script's output whose runs of spaces are
// collapsed (Collapse).
func Tour(readme []byte) (script string, want []*regexp.Regexp, err error) {
	lang, body, err := Block(readme, "tour")
	if err != nil {
		return "", nil, err
	}
	if lang != "sh" && lang != "bash" {
		return "", nil, fmt.Errorf("frontdoor: the tour block is %q, want sh", lang)
	}
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, OutputPrefix) {
			continue
		}
		parts := strings.Split(Collapse(l[len(OutputPrefix):]), "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re, err := regexp.Compile("^" + strings.Join(parts, ".*") + "$")
		if err != nil {
			return "", nil, err
		}
		want = append(want, re)
	}
	if len(want) == 0 {
		return "", nil, errors.New("frontdoor: the tour shows no output (lines starting \"#   \")")
	}
	return body, want, nil
}

// BuildApp builds the README's Go application (the ```go block after
// <!-- app) as a main package inside the module at root, with the go
// command goBin, into the executable out (os.DevNull: only compile it).
func BuildApp(root, goBin, out string) error {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return err
	}
	lang, body, err := Block(readme, "app")
	if err != nil {
		return err
	}
	if lang != "go" || !strings.HasPrefix(body, "package main\n") {
		return fmt.Errorf("frontdoor: the application block is %q and starts %.20q, want a go block with package main", lang, body)
	}
	// A directory whose name starts with "." is left out of ./... but
	// builds when named.
	dir, err := os.MkdirTemp(filepath.Join(root, "internal", "frontdoor"), ".readme-app-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(body), 0o644); err != nil {
		return err
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return err
	}
	cmd := exec.Command(goBin, "build", "-o", out, "./"+filepath.ToSlash(rel))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("frontdoor: the README's Go application does not build against this tree: %v\n%s", err, b)
	}
	return nil
}

// The C application: where docs/c.md shows it, and the example file it
// must equal.
const (
	CAppDoc     = "docs/c.md"
	CAppExample = "examples/c/hello.c"
	// CAppBuild is how docs/c.md builds a C application against an
	// installed libonerma, in sh; $SRC and $OUT name the source and the
	// executable.
	CAppBuild = `cc -o "$OUT" "$SRC" $(pkg-config --cflags --libs onerma)`
)

// CApp returns the C application docs/c.md shows (the ```c block after
// <!-- c-app).
func CApp(root string) (string, error) {
	doc, err := os.ReadFile(filepath.Join(root, CAppDoc))
	if err != nil {
		return "", err
	}
	lang, body, err := Block(doc, "c-app")
	if err != nil {
		return "", err
	}
	if lang != "c" {
		return "", fmt.Errorf("frontdoor: %s's c-app block is %q, want c", CAppDoc, lang)
	}
	return body, nil
}

// BuildCApp installs libonerma (make -C libonerma install) under prefix and
// builds docs/c.md's C application against it into the executable out,
// as docs/c.md says (CAppBuild, with prefix's pkg-config directory first
// in PKG_CONFIG_PATH). The executable finds libonerma.so in prefix/lib
// when LD_LIBRARY_PATH names it.
func BuildCApp(root, prefix, out string) error {
	body, err := CApp(root)
	if err != nil {
		return err
	}
	if b, err := exec.Command("make", "-s", "-C", filepath.Join(root, "libonerma"), "install", "PREFIX="+prefix).CombinedOutput(); err != nil {
		return fmt.Errorf("frontdoor: make -C libonerma install PREFIX=%s: %v\n%s", prefix, err, b)
	}
	src := out + ".c"
	if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
		return err
	}
	cmd := exec.Command("sh", "-c", CAppBuild)
	pc := filepath.Join(prefix, "lib", "pkgconfig")
	if old := os.Getenv("PKG_CONFIG_PATH"); old != "" {
		pc += ":" + old
	}
	cmd.Env = append(os.Environ(), "SRC="+src, "OUT="+out, "PKG_CONFIG_PATH="+pc)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("frontdoor: %s's C application does not build against an installed libonerma (%s): %v\n%s", CAppDoc, CAppBuild, err, b)
	}
	return nil
}

// PyApp returns the README's Python application (the ```python block
// after <!-- py-app): a script taking the tour's credentials directory as
// its argument, run from the clone with PYTHONPATH=python.
func PyApp(readme []byte) (string, error) {
	lang, body, err := Block(readme, "py-app")
	if err != nil {
		return "", err
	}
	if lang != "python" {
		return "", fmt.Errorf("frontdoor: the py-app block is %q, want python", lang)
	}
	return body, nil
}

// Python is the interpreter the Python package is tested with: Debian's
// /usr/bin/python3 (its python3-pytest and python3-numpy), else python3
// in PATH.
func Python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p
	}
	return "python3"
}

// GoBin is the go command: the one in PATH, else the running toolchain's.
func GoBin() string {
	if g, err := exec.LookPath("go"); err == nil {
		return g
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// Collapse trims s and turns each run of spaces and tabs into one space.
func Collapse(s string) string { return strings.Join(strings.Fields(s), " ") }

// Commands are the command words the tour's lines start with (after
// "export", "until", ... the shell's own words are not commands of ours):
// the first word of every line that is not a comment, an output line or a
// continuation of the line before.
func Commands(script string) []string {
	var out []string
	cont := false
	for _, l := range strings.Split(script, "\n") {
		t := strings.TrimSpace(l)
		wasCont := cont
		cont = strings.HasSuffix(t, "\\")
		if wasCont || t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		out = append(out, strings.Fields(t)[0])
	}
	return out
}
