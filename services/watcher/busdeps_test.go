package watcher_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/bustest"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/watcher"
)

// repoEvents reads every RepoChanged stored on the PROXOPS_REPO stream.
func repoEvents(t *testing.T, b *bus.Bus) []event.RepoChanged {
	t.Helper()
	var out []event.RepoChanged
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := b.ReadStream(ctx, bus.StreamRepo, bus.SubjectRepoChanged, 1, func(m *bus.Message) error {
		ev, err := wire.DecodeRepoChanged(ctx, m.Decode)
		if err != nil {
			return err
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		t.Fatalf("read repo events: %v", err)
	}
	return out
}

func TestWatcherAnnouncesTreesOverNATS(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	env := bustest.Start(t)
	work := newWorkRepo(t, t.TempDir())
	work.write("clusters/lab/resources.yaml", "resources: []\n")
	first := work.commitAndPush("first")

	cfg := watcher.Config{Path: work.bare, DataDir: t.TempDir(), PollInterval: time.Hour, DriftInterval: -1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- watcher.Run(ctx, cfg, watcher.BusDeps(env.Connect(t), nil, nil)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})

	var startup event.RepoChanged
	testkit.Eventually(t, waitTimeout, "the startup event on the stream", func() bool {
		for _, ev := range repoEvents(t, env.Bus) {
			if ev.Commit == first && ev.Trigger == event.TriggerStartup {
				startup = ev
				return true
			}
		}
		return false
	})
	if startup.EventID != event.CommitEventID(startup.Repo, first) {
		t.Fatalf("startup event id = %q", startup.EventID)
	}
	snap, err := watcher.GetTree(context.Background(), env.Bus, startup.Tree)
	if err != nil {
		t.Fatalf("tree snapshot: %v", err)
	}
	if content, ok := snap.File("clusters/lab/resources.yaml"); !ok || string(content) != "resources: []\n" {
		t.Fatalf("snapshot lacks the composition: %+v", snap.Files)
	}

	// A reconcile request published on the stream is answered with a manual event for the same tree.
	req := event.ReconcileRequest{RequestID: "req-1", RequestedBy: "test"}
	if _, err := env.Bus.Publish(context.Background(), bus.SubjectReconcileRequest, wire.ReconcileRequestToProto(req)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, waitTimeout, "the manual event", func() bool {
		for _, ev := range repoEvents(t, env.Bus) {
			if ev.RequestID == "req-1" && ev.Trigger == event.TriggerManual && ev.Tree == startup.Tree {
				return ev.EventID == event.ManualEventID(startup.Repo, first, "req-1")
			}
		}
		return false
	})
}
