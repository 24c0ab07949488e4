package adopt_test

import (
	"testing"

	"github.com/proxops/proxops/internal/adopt"
)

const compFile = "clusters/lab/resources.yaml"

func TestAppendingToACompositionKeepsItsCommentsAndOrder(t *testing.T) {
	add := []string{"../../vm/lab/web.yaml", "../../lxc/lab/db.yaml"}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"no file", "", "resources:\n  - ../../vm/lab/web.yaml\n  - ../../lxc/lab/db.yaml\n"},
		{"block list with comments",
			"# lab cluster\nresources:\n    # shared\n    - ../../iso/base/a.yaml # the installer\n    - ../../vm/base/b.yaml\n# trailing note\n",
			"# lab cluster\nresources:\n    # shared\n    - ../../iso/base/a.yaml # the installer\n    - ../../vm/base/b.yaml\n    - ../../vm/lab/web.yaml\n    - ../../lxc/lab/db.yaml\n# trailing note\n"},
		{"bare list", "- ../../vm/base/b.yaml\n", "- ../../vm/base/b.yaml\n- ../../vm/lab/web.yaml\n- ../../lxc/lab/db.yaml\n"},
		{"empty flow list", "resources: [] # nothing yet\n", "resources: # nothing yet\n  - ../../vm/lab/web.yaml\n  - ../../lxc/lab/db.yaml\n"},
		{"null list", "resources:\n", "resources:\n  - ../../vm/lab/web.yaml\n  - ../../lxc/lab/db.yaml\n"},
		{"comments only", "# nothing composed yet\n", "# nothing composed yet\nresources:\n  - ../../vm/lab/web.yaml\n  - ../../lxc/lab/db.yaml\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := adopt.AppendComposition(compFile, []byte(tc.in), add)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
	if _, err := adopt.AppendComposition(compFile, []byte("resources: [../../vm/base/b.yaml]\n"), add); err == nil {
		t.Error("a non-empty flow list was rewritten")
	}
}

func TestMissingEntriesCompareResolvedPaths(t *testing.T) {
	got, err := adopt.MissingEntries(compFile, []byte("resources:\n  - ../lab/../../vm/lab/web.yaml\n"),
		[]string{"../../vm/lab/web.yaml", "../../lxc/lab/db.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "../../lxc/lab/db.yaml" {
		t.Errorf("missing = %v", got)
	}
}
