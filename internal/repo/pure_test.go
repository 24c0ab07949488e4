package repo_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// pure lists the packages of the functional core: they may import only the standard library, the YAML
// library and each other.
var pure = []string{"adopt", "diag", "event", "firewall", "graph", "inventory", "manifest", "plan", "pveformat", "pvewire", "render", "report", "repo", "yamldecode"}

// forbidden standard packages: network, processes, randomness, logging and the wall clock's sources.
var forbidden = []string{"net/http", "net/rpc", "os/exec", "os/signal", "math/rand", "math/rand/v2", "crypto/rand",
	"log", "log/slog", "syscall", "unsafe", "plugin"}

func TestPurePackagesImportOnlyTheStandardLibraryYAMLAndEachOther(t *testing.T) {
	const module = "github.com/proxops/proxops/internal/"
	root := filepath.Join("..", "..", "internal")
	for _, pkg := range pure {
		dir := filepath.Join(root, pkg)
		entries, err := os.ReadDir(dir)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				first, _, _ := strings.Cut(path, "/")
				switch {
				case path == "go.yaml.in/yaml/v3":
				case strings.HasPrefix(path, module):
					dep, _, _ := strings.Cut(strings.TrimPrefix(path, module), "/")
					if !slices.Contains(pure, dep) {
						t.Errorf("internal/%s/%s imports %s, which is not a pure package", pkg, name, path)
					}
				case strings.Contains(first, "."):
					t.Errorf("internal/%s/%s imports %s (only the standard library and YAML are allowed)", pkg, name, path)
				case slices.Contains(forbidden, path):
					t.Errorf("internal/%s/%s imports %s (no network, processes, randomness or logging in the core)", pkg, name, path)
				}
			}
		}
	}
}
