package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// FlagSet is a flag.FlagSet (ContinueOnError) with a usage text and aliases.
type FlagSet struct {
	*flag.FlagSet
	synopsis []string
	examples []string
	notes    string
	aliasOf  map[string]string // alias -> canonical
	aliases  []string          // in registration order
}

// New returns a FlagSet for the command name (as typed: "rmaperf read_bw")
// whose synopsis lines follow "usage:". Parse returns errors rather than
// exiting; its output is os.Stderr until SetOutput.
func New(name string, synopsis ...string) *FlagSet {
	f := &FlagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), synopsis: synopsis,
		aliasOf: map[string]string{}}
	f.FlagSet.Usage = f.PrintUsage
	return f
}

// Example adds example invocations to the usage text, one a line.
func (f *FlagSet) Example(lines ...string) *FlagSet {
	f.examples = append(f.examples, lines...)
	return f
}

// Notes sets a paragraph printed between the synopsis and the examples.
func (f *FlagSet) Notes(text string) *FlagSet {
	f.notes = text
	return f
}

// Alias registers alias as another spelling of the canonical flag: both
// set the same flag.Value. The canonical flag must be defined already (a
// programming error panics, as flag's redefinition does).
func (f *FlagSet) Alias(alias, canonical string) {
	c := f.Lookup(canonical)
	if c == nil {
		panic(fmt.Sprintf("cli: alias -%s of undefined flag -%s", alias, canonical))
	}
	if _, ok := f.aliasOf[canonical]; ok {
		panic(fmt.Sprintf("cli: alias -%s of -%s, itself an alias", alias, canonical))
	}
	f.Var(c.Value, alias, "alias of -"+canonical)
	f.aliasOf[alias] = canonical
	f.aliases = append(f.aliases, alias)
}

// Canonical returns the canonical name of a flag name or alias.
func (f *FlagSet) Canonical(name string) string {
	if c, ok := f.aliasOf[name]; ok {
		return c
	}
	return name
}

// Aliases returns each alias and the flag it spells, in registration order.
func (f *FlagSet) Aliases() [][2]string {
	out := make([][2]string, len(f.aliases))
	for i, a := range f.aliases {
		out[i] = [2]string{a, f.aliasOf[a]}
	}
	return out
}

// Given reports whether the flag (canonical name) was set on the command
// line, under its name or an alias.
func (f *FlagSet) Given(name string) bool {
	given := false
	f.Visit(func(fl *flag.Flag) { given = given || f.Canonical(fl.Name) == name })
	return given
}

// ErrUsage marks an error Parse already printed together with the usage
// text: a tool exits 2 on it without printing it again.
var ErrUsage = errors.New("usage error")

// Parse parses args. -h and -help print the usage text and return
// flag.ErrHelp; a malformed flag prints its error and the usage text and
// returns an error wrapping ErrUsage.
func (f *FlagSet) Parse(args []string) error {
	err := f.FlagSet.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUsage, err)
}

// PrintUsage writes the usage text to the FlagSet's output: the synopsis,
// the notes, the examples, every flag but the aliases, then the aliases.
func (f *FlagSet) PrintUsage() {
	w := f.Output()
	PrintHeader(w, f.synopsis, f.notes, f.examples)
	// flag.PrintDefaults, less the aliases: a copy holding the canonical
	// flags, their defaults as registered.
	canon := flag.NewFlagSet(f.Name(), flag.ContinueOnError)
	n := 0
	f.VisitAll(func(fl *flag.Flag) {
		if _, ok := f.aliasOf[fl.Name]; ok {
			return
		}
		canon.Var(fl.Value, fl.Name, fl.Usage)
		canon.Lookup(fl.Name).DefValue = fl.DefValue
		n++
	})
	if n > 0 {
		fmt.Fprintln(w, "\nflags:")
		canon.SetOutput(w)
		canon.PrintDefaults()
	}
	if len(f.aliases) > 0 {
		fmt.Fprintln(w, "\naliases (old spellings, still accepted):")
		for _, a := range f.aliases {
			fmt.Fprintf(w, "  -%s: alias of -%s\n", a, f.aliasOf[a])
		}
	}
}

// PrintHeader writes a usage text's head: "usage:" and the synopsis lines,
// a paragraph of notes, and the example invocations. Tools whose first
// argument is a command print it for themselves; each command's FlagSet
// prints its own.
func PrintHeader(w io.Writer, synopsis []string, notes string, examples []string) {
	for i, s := range synopsis {
		if i == 0 {
			fmt.Fprintln(w, "usage:", s)
		} else {
			fmt.Fprintln(w, "      ", s)
		}
	}
	if notes != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(notes, "\n"))
	}
	if len(examples) > 0 {
		fmt.Fprintln(w, "\nexamples:")
		for _, e := range examples {
			fmt.Fprintln(w, " ", e)
		}
	}
}

// Field pairs a configuration field with the flag that sets it.
type Field struct{ Name, Flag string }

// NameFlag returns err prefixed with the flag that sets the field err
// names, as a package's Validate writes it ("Slots = 0: ..."), so that a
// tool's error names the flag; err itself if it names none of fields.
func NameFlag(err error, fields []Field) error {
	if err == nil {
		return nil
	}
	for _, f := range fields {
		if strings.Contains(err.Error(), " "+f.Name+" = ") {
			return fmt.Errorf("%s: %w", f.Flag, err)
		}
	}
	return err
}

// ExitCode is the exit status for a tool's error: 0 for none or -h, 2 for
// a usage error, 1 otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return 2
	}
	return 1
}

// Exit ends the process with ExitCode(err), first printing "name: err" to
// stderr unless the error is -h or was printed with the usage text already.
func Exit(name string, err error) {
	code := ExitCode(err)
	if code == 1 {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	}
	os.Exit(code)
}
