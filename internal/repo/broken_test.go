package repo_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/repo"
)

var update = flag.Bool("update", false, "rewrite the expected.txt golden files of testdata/broken")

// positionless are the cases whose problem has no line in any file: a file or directory that should not be
// there, or is missing.
var positionless = map[string]bool{
	"legacy-flat-file":          true,
	"invalid-cluster-directory": true,
	"no-clusters":               true,
}

// TestBrokenRepositoriesReportEveryProblemWithItsPosition loads each repository under testdata/broken (one
// problem each) and compares the rendered diagnostics with the case's expected.txt, byte for byte.
func TestBrokenRepositoriesReportEveryProblemWithItsPosition(t *testing.T) {
	dirs, err := os.ReadDir("testdata/broken")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 40 {
		t.Fatalf("only %d broken repositories; the corpus must have at least 40", len(dirs))
	}
	for _, d := range dirs {
		name := d.Name()
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "broken", name)
			r := repo.Load(os.DirFS(dir))
			diags := r.AllDiagnostics()
			got := render(diags)
			golden := filepath.Join(dir, "expected.txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/repo -run Broken -update)", err)
			}
			if got != string(want) {
				t.Errorf("diagnostics differ from %s\n--- got\n%s--- want\n%s", golden, got, want)
			}
			if len(diags) == 0 {
				t.Fatal("a broken repository loaded without a diagnostic")
			}
			if !strings.HasPrefix(name, "unknown-field") && !strings.HasPrefix(name, "warn-") && !diags.HasErrors() {
				t.Error("a broken repository loaded without an error")
			}
			if !positionless[name] && !hasPosition(diags) {
				t.Error("no diagnostic carries a file:line:col position")
			}
		})
	}
}

func render(l diag.List) string {
	var b strings.Builder
	for _, d := range l {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func hasPosition(l diag.List) bool {
	for _, d := range l {
		if d.File != "" && d.Line > 0 && d.Column > 0 {
			return true
		}
	}
	return false
}
