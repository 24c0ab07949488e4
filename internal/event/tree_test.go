package event_test

import (
	"errors"
	"testing"

	"github.com/proxops/proxops/internal/event"
)

func TestTreeNameDependsOnEveryPathAndContentButNotOnOrderOrCommit(t *testing.T) {
	a := event.TreeSnapshot{Commit: "c1", Files: []event.File{{Path: "vm/a.yaml", Content: []byte("a")}, {Path: "clusters/lab/config.yaml", Content: []byte("c")}}}
	a.Named()
	b := event.TreeSnapshot{Commit: "c2", Files: []event.File{{Path: "clusters/lab/config.yaml", Content: []byte("c")}, {Path: "vm/a.yaml", Content: []byte("a")}}}
	if got := event.TreeName(b.Files); got != a.Tree || !event.ValidTreeName(got) {
		t.Fatalf("the same files in another order under another commit: %s, want %s", got, a.Tree)
	}
	for _, other := range [][]event.File{
		{{Path: "vm/a.yaml", Content: []byte("b")}, {Path: "clusters/lab/config.yaml", Content: []byte("c")}},
		{{Path: "vm/b.yaml", Content: []byte("a")}, {Path: "clusters/lab/config.yaml", Content: []byte("c")}},
		// Moving bytes between a path and its content changes the name.
		{{Path: "vm/a.yamla", Content: nil}, {Path: "clusters/lab/config.yaml", Content: []byte("c")}},
		{{Path: "clusters/lab/config.yaml", Content: []byte("c")}},
	} {
		if event.TreeName(other) == a.Tree {
			t.Errorf("files %v share the name of other files", other)
		}
	}
}

func TestVerifyRefusesContentThatDoesNotHashToTheName(t *testing.T) {
	snap := event.TreeSnapshot{Files: []event.File{{Path: "vm/a.yaml", Content: []byte("a")}}}
	snap.Named()
	if err := snap.Verify(snap.Tree); err != nil {
		t.Fatalf("an honest snapshot: %v", err)
	}
	forged := snap
	forged.Files = []event.File{{Path: "vm/a.yaml", Content: []byte("memory: 64GiB")}}
	twice := snap
	twice.Files = append(twice.Files, twice.Files[0])
	for name, c := range map[string]struct {
		snap event.TreeSnapshot
		name string
	}{
		"other content":  {forged, snap.Tree},
		"duplicate path": {twice, event.TreeName(twice.Files)},
		"git tree hash":  {snap, "4b825dc642cb6eb9a060e54bf8d69288fbee4904"},
	} {
		if err := c.snap.Verify(c.name); !errors.Is(err, event.ErrTreeMismatch) {
			t.Errorf("%s: %v, want ErrTreeMismatch", name, err)
		}
	}
}
