package portal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestTypesCoverABI: every op type, permission, class and status the ABI
// defines has its alias in portal, so an application never needs abi for
// them.
func TestTypesCoverABI(t *testing.T) {
	mine := consts(t, "types.go")
	for _, f := range []string{"../abi/command.go", "../abi/perm.go", "../abi/status.go"} {
		for name := range consts(t, f) {
			for _, prefix := range []string{"Op", "Perm", "Class", "Status"} {
				if strings.HasPrefix(name, prefix) && name != "NumClass" && !mine[name] {
					t.Errorf("abi.%s (%s) has no alias in portal/types.go", name, f)
				}
			}
		}
	}
}

// consts returns the exported constants the file declares.
func consts(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				if n.IsExported() {
					out[n.Name] = true
				}
			}
		}
	}
	return out
}
