package treestore_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/bustest"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
)

func snapshot(content string) event.TreeSnapshot {
	s := event.TreeSnapshot{Commit: "c1", Files: []event.File{
		{Path: "clusters/lab/config.yaml", Content: []byte("pve: {}\n")},
		{Path: "vm/lab/web.yaml", Content: []byte(content)},
	}}
	s.Named()
	return s
}

func previewsLastSeq(t *testing.T, b *bus.Bus) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.JetStream().Stream(ctx, "OBJ_"+bus.ObjectPreviews)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// A snapshot stored once is found stored again by its digest: nothing is written the second time, and it
// reads back whole.
func TestPutPreviewOfAStoredSnapshotWritesNothing(t *testing.T) {
	env := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap := snapshot("kind: VM\n")
	if wrote, err := treestore.PutPreview(ctx, env.Bus, snap); err != nil || !wrote {
		t.Fatalf("first store: wrote %v, %v", wrote, err)
	}
	seq := previewsLastSeq(t, env.Bus)
	if wrote, err := treestore.PutPreview(ctx, env.Bus, snap); err != nil || wrote {
		t.Fatalf("second store: wrote %v, %v", wrote, err)
	}
	if got := previewsLastSeq(t, env.Bus); got != seq {
		t.Fatalf("the second store wrote %d records", got-seq)
	}
	got, err := treestore.Get(ctx, env.Bus, snap.Tree)
	if err != nil || len(got.Files) != 2 || string(got.Files[1].Content) != "kind: VM\n" {
		t.Fatalf("read back: %+v, %v", got, err)
	}
}

// Other content stored under a snapshot's name is reported, not taken for the snapshot.
func TestPutPreviewRefusesOtherContentUnderItsName(t *testing.T) {
	env := bustest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap := snapshot("kind: VM\n")
	other := snapshot("kind: VM\nspec: {}\n")
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(wire.TreeSnapshotToProto(other))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := env.Bus.JetStream().ObjectStore(ctx, bus.ObjectPreviews)
	if err != nil {
		t.Fatal(err)
	}
	meta := jetstream.ObjectMeta{Name: snap.Tree, Headers: map[string][]string{bus.HeaderType: {bus.TypeName(wire.TreeSnapshotToProto(other))}}}
	if _, err := obs.Put(ctx, meta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := treestore.PutPreview(ctx, env.Bus, snap); !errors.Is(err, event.ErrTreeMismatch) {
		t.Fatalf("store over other content: %v, want a tree mismatch", err)
	}
}
