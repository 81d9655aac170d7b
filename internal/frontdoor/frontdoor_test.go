package frontdoor_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onerma/onerma/internal/frontdoor"
)

// The documents a newcomer reads, and their line budgets (README ≤ ~250
// and ARCHITECTURE ≤ ~400 lines, with a little slack).
const (
	maxREADMELines       = 260
	maxArchitectureLines = 420
)

func root(t *testing.T) string {
	t.Helper()
	r, err := frontdoor.Root()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// documents are README.md, ARCHITECTURE.md, SECURITY.md and docs/*.md,
// relative to the root.
func documents(t *testing.T, r string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(r, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md", "ARCHITECTURE.md", "SECURITY.md"}
	for _, d := range docs {
		out = append(out, filepath.Join("docs", filepath.Base(d)))
	}
	return out
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLinks: every relative link of the front-door documents names a file
// or directory of the tree, and a heading of it when it has an anchor.
func TestLinks(t *testing.T) {
	r := root(t)
	anchors := map[string]map[string]bool{} // by path from the root
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		a := frontdoor.Anchors(read(t, filepath.Join(r, rel)))
		anchors[rel] = a
		return a
	}
	checked := 0
	for _, doc := range documents(t, r) {
		for _, l := range frontdoor.Links(read(t, filepath.Join(r, doc))) {
			if !frontdoor.IsRelative(l.Target) {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(l.Target, "#")
			target := doc // an anchor of the same document
			if path != "" {
				target = filepath.Clean(filepath.Join(filepath.Dir(doc), path))
				if strings.HasPrefix(target, "..") {
					t.Errorf("%s:%d: %s leaves the repository", doc, l.Line, l.Target)
					continue
				}
				if _, err := os.Stat(filepath.Join(r, target)); err != nil {
					t.Errorf("%s:%d: %s: no such file (%s)", doc, l.Line, l.Target, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", doc, l.Line, l.Target)
				continue
			}
			if !anchorsOf(target)[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading #%s", doc, l.Line, l.Target, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link parser is broken")
	}
}

// TestLength: the README and ARCHITECTURE.md stay short; detail goes to
// docs/ and to the package documentation.
func TestLength(t *testing.T) {
	r := root(t)
	for _, c := range []struct {
		doc string
		max int
	}{{"README.md", maxREADMELines}, {"ARCHITECTURE.md", maxArchitectureLines}} {
		if n := len(frontdoor.Lines(read(t, filepath.Join(r, c.doc)))); n > c.max {
			t.Errorf("%s has %d lines, at most %d: move detail to docs/ or to a package's doc.go", c.doc, n, c.max)
		}
	}
}

// TestDocsReachable: every file of docs/ is linked from the README.
func TestDocsReachable(t *testing.T) {
	r := root(t)
	linked := map[string]bool{}
	for _, l := range frontdoor.Links(read(t, filepath.Join(r, "README.md"))) {
		path, _, _ := strings.Cut(l.Target, "#")
		linked[filepath.Clean(path)] = true
	}
	for _, doc := range documents(t, r)[3:] {
		if !linked[doc] {
			t.Errorf("README.md does not link %s", doc)
		}
	}
}

// TestTourBlock checks the README's tour without running it (e2e
// TestREADMETour runs it with real engines): it has output lines to
// check, puts the built binaries on PATH the way the test substitutes,
// and every tool it runs is one of the tree's.
func TestTourBlock(t *testing.T) {
	r := root(t)
	script, want, err := frontdoor.Tour(read(t, filepath.Join(r, "README.md")))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(script, frontdoor.TourBin); n != 1 {
		t.Errorf("the tour names %s %d times, want once (e2e substitutes the built binaries' directory)", frontdoor.TourBin, n)
	}
	if len(want) < 3 {
		t.Errorf("the tour shows %d output lines, want a few", len(want))
	}
	tools := 0
	for _, c := range frontdoor.Commands(script) {
		if !strings.HasPrefix(c, "rma") {
			continue
		}
		tools++
		_, e1 := os.Stat(filepath.Join(r, "tools", c))
		_, e2 := os.Stat(filepath.Join(r, "lab", c))
		if e1 != nil && e2 != nil {
			t.Errorf("the tour runs %s, which is neither in tools/ nor in lab/", c)
		}
	}
	if tools == 0 {
		t.Error("the tour runs none of the tree's tools")
	}
}

// TestREADMEApplicationCompiles builds the README's Go application (the
// ```go block after <!-- app) as a main package inside this module, so it
// compiles against the tree's API as it is.
func TestREADMEApplicationCompiles(t *testing.T) {
	if err := frontdoor.BuildApp(root(t), frontdoor.GoBin(), os.DevNull); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEPythonBlock: the README's Python application (the ```python
// block after <!-- py-app) reads through the tour's engine A with a K_d
// from the tour's rmaperf server, as e2e TestREADMETour runs it (pytest
// compiles it: python/tests/test_unit.py).
func TestREADMEPythonBlock(t *testing.T) {
	r := root(t)
	readme := read(t, filepath.Join(r, "README.md"))
	body, err := frontdoor.PyApp(readme)
	if err != nil {
		t.Fatal(err)
	}
	script, _, err := frontdoor.Tour(readme)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"import onerma", "sys.argv[1]", tourSocketA, tourKeyService} {
		if !strings.Contains(body, want) {
			t.Errorf("the README's Python application does not name %q", want)
		}
	}
	for _, want := range []string{tourSocketA, tourKeyService} {
		if !strings.Contains(script, want) {
			t.Errorf("the tour does not name %q, which the README's Python application uses", want)
		}
	}
}

// The tour's engine A and key service, as the README's applications name them.
const (
	tourSocketA    = "/run/onerma/a.sock"
	tourKeyService = "127.0.0.1:18515"
)

// TestCApplicationIsExample: the C program docs/c.md shows (the ```c
// block after <!-- c-app) is examples/c/hello.c, which make build compiles
// with -Werror and e2e TestCApplication builds from the block with
// pkg-config and runs against an engine; and docs/c.md builds it with
// CAppBuild's command.
func TestCApplicationIsExample(t *testing.T) {
	r := root(t)
	body, err := frontdoor.CApp(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(read(t, filepath.Join(r, frontdoor.CAppExample))); body != want {
		t.Errorf("%s's c-app block is not %s: copy the file into the block", frontdoor.CAppDoc, frontdoor.CAppExample)
	}
	if doc := string(read(t, filepath.Join(r, frontdoor.CAppDoc))); !strings.Contains(doc, "$(pkg-config --cflags --libs onerma)") {
		t.Errorf("%s does not show the build with pkg-config --cflags --libs onerma", frontdoor.CAppDoc)
	}
}

func TestSlug(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"Engines of several cores", "engines-of-several-cores"},
		{"AF_XDP: sharing an interface with the kernel", "af_xdp-sharing-an-interface-with-the-kernel"},
		{"The engine alone: `rmad -selftest`", "the-engine-alone-rmad--selftest"},
		{"The key/value setups", "the-keyvalue-setups"},
		{"Statuses and timing (§4.5, Table 3)", "statuses-and-timing-45-table-3"},
	} {
		if got := frontdoor.Slug(c.in); got != c.want {
			t.Errorf("Slug(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLinksAndAnchors(t *testing.T) {
	doc := []byte("# Title\n\nSee [a](docs/a.md#x), [b](https://example.com) and `[c](not/a/link)`.\n\n" +
		"```sh\n# not a heading\n[d](in/code)\n```\n\n## Title\n")
	links := frontdoor.Links(doc)
	if len(links) != 2 || links[0].Target != "docs/a.md#x" || links[1].Target != "https://example.com" || links[0].Line != 3 {
		t.Fatalf("Links = %+v", links)
	}
	if frontdoor.IsRelative(links[1].Target) || !frontdoor.IsRelative(links[0].Target) || !frontdoor.IsRelative("#x") {
		t.Error("IsRelative")
	}
	a := frontdoor.Anchors(doc)
	if len(a) != 2 || !a["title"] || !a["title-1"] {
		t.Fatalf("Anchors = %v", a)
	}
}

func TestTourParse(t *testing.T) {
	readme := []byte("x\n<!-- tour: run -->\n```sh\nrmad -a \\\n   -b &\n#   hello   world … 0\n# a comment\nrmactl stats\n```\n")
	script, want, err := frontdoor.Tour(readme)
	if err != nil {
		t.Fatal(err)
	}
	if got := frontdoor.Commands(script); strings.Join(got, " ") != "rmad rmactl" {
		t.Errorf("Commands = %q", got)
	}
	if len(want) != 1 || !want[0].MatchString(frontdoor.Collapse("  hello world  12 3.5   0 ")) || want[0].MatchString("hello world 1") {
		t.Errorf("want = %v", want)
	}
}
