package event_test

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/proxops/proxops/internal/event"
)

func TestSnapshotFSServesFilesAndImpliedDirectories(t *testing.T) {
	snap := event.TreeSnapshot{Files: []event.File{
		{Path: "proxops.yaml", Content: []byte("log: {level: info}\n")},
		{Path: "clusters/lab/config.yaml", Content: []byte("pve: {}\n")},
		{Path: "clusters/lab/resources.yaml", Content: []byte("resources: []\n")},
		{Path: "vm/base/web.yaml", Content: []byte("kind: VM\n")},
		{Path: "../escape.yaml", Content: []byte("x")},
	}}
	fsys := snap.FS()
	if err := fstest.TestFS(fsys, "proxops.yaml", "clusters/lab/config.yaml", "clusters/lab/resources.yaml", "vm/base/web.yaml"); err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := len(names); got != 3 || names[0] != "clusters" || names[1] != "proxops.yaml" || names[2] != "vm" {
		t.Fatalf("root entries %v", names)
	}
	if _, err := fs.ReadFile(fsys, "../escape.yaml"); err == nil {
		t.Fatal("a path escaping the root was served")
	}
}
