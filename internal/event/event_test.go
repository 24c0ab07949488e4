package event_test

import (
	"testing"

	"github.com/proxops/proxops/internal/event"
)

func TestEventIDsShareTheCommitPrefix(t *testing.T) {
	cases := []struct{ got, want string }{
		{event.CommitEventID("git@host:infra.git", "abc"), "git@host:infra.git@abc"},
		{event.DriftEventID("/srv/repo", "abc", 5772), "/srv/repo@abc#drift-5772"},
		{event.ManualEventID("/srv/repo", "abc", "r-1"), "/srv/repo@abc#manual-r-1"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestValidateRefusesIncompleteEvents(t *testing.T) {
	ok := event.RepoChanged{Repo: "r", Tree: "t", EventID: "r@c", Trigger: event.TriggerPoll}
	if err := ok.Validate(); err != nil {
		t.Fatalf("complete event: %v", err)
	}
	bad := ok
	bad.Trigger = "cron"
	if err := bad.Validate(); err == nil {
		t.Error("unknown trigger accepted")
	}
	bad = ok
	bad.Tree, bad.EventID = "", ""
	if err := bad.Validate(); err == nil || err.Error() != "repo changed: missing tree, event id" {
		t.Errorf("missing fields: %v", err)
	}
}

func TestSnapshotSortsAndFindsFiles(t *testing.T) {
	s := event.TreeSnapshot{Files: []event.File{{Path: "vm/b.yaml", Content: []byte("b")}, {Path: "clusters/lab/config.yaml", Content: []byte("c")}}}
	s.Sort()
	if s.Files[0].Path != "clusters/lab/config.yaml" {
		t.Fatalf("files not sorted: %v", s.Files)
	}
	if got, ok := s.File("vm/b.yaml"); !ok || string(got) != "b" {
		t.Fatalf("File = %q, %v", got, ok)
	}
	if _, ok := s.File("missing"); ok {
		t.Fatal("found a missing file")
	}
}
