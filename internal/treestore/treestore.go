// Package treestore reads and stores manifest tree snapshots on the bus. Every snapshot is named by a hash of
// its own content (event.TreeName). The snapshots of the commits the watcher fetched live in proxops_trees,
// which only the watcher writes; the snapshots clients store to preview, or as an operator to apply, a work
// tree live in proxops_previews, which clients may add to. A reader never trusts either store: Get
// recomputes the name from the content and refuses a mismatch, so an object overwritten by whoever can
// write its store makes a plan fail, never apply other files.
package treestore

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/wire"
)

// Get reads the snapshot named name from proxops_trees, else from proxops_previews, and checks that its
// content hashes to name. The error wraps bus.ErrNotFound when neither store holds it and
// event.ErrTreeMismatch when the content does not match the name (or the name is not a tree name).
func Get(ctx context.Context, b *bus.Bus, name string) (event.TreeSnapshot, error) {
	if !event.ValidTreeName(name) {
		return event.TreeSnapshot{}, (event.TreeSnapshot{}).Verify(name)
	}
	snap, err := read(ctx, b, bus.ObjectTrees, name)
	if errors.Is(err, bus.ErrNotFound) {
		snap, err = read(ctx, b, bus.ObjectPreviews, name)
	}
	if err != nil {
		return event.TreeSnapshot{}, fmt.Errorf("tree %s: %w", name, err)
	}
	if err := snap.Verify(name); err != nil {
		return event.TreeSnapshot{}, err
	}
	snap.Tree = name
	snap.Sort()
	return snap, nil
}

func read(ctx context.Context, b *bus.Bus, store, name string) (event.TreeSnapshot, error) {
	return wire.DecodeTreeSnapshot(ctx, func(ctx context.Context, into proto.Message) error {
		return b.GetObject(ctx, store, name, into)
	})
}

// PutCommitted stores the snapshot of a commit the watcher fetched in proxops_trees, named by its content,
// unless a snapshot of that name is there; it reports whether it wrote. Only the watcher may write there.
func PutCommitted(ctx context.Context, b *bus.Bus, snap event.TreeSnapshot) (bool, error) {
	if err := snap.Verify(snap.Tree); err != nil {
		return false, err
	}
	return b.PutObjectIfAbsent(ctx, bus.ObjectTrees, snap.Tree, wire.TreeSnapshotToProto(snap))
}

// PutPreview stores a client's snapshot in proxops_previews, named by its content, unless a snapshot of that
// name is stored in either store: a client creates snapshots, it never overwrites one. It reports whether it
// wrote.
func PutPreview(ctx context.Context, b *bus.Bus, snap event.TreeSnapshot) (bool, error) {
	if err := snap.Verify(snap.Tree); err != nil {
		return false, err
	}
	// Stored before with the same bytes (the usual case: the commit was planned already): the stores' digest
	// says so without reading the snapshot back.
	m := wire.TreeSnapshotToProto(snap)
	for _, store := range []string{bus.ObjectTrees, bus.ObjectPreviews} {
		if same, err := b.ObjectHolds(ctx, store, snap.Tree, m); err == nil && same {
			return false, nil
		}
	}
	_, err := Get(ctx, b, snap.Tree)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, event.ErrTreeMismatch):
		// Someone stored other content under this name; the readers refuse it. Say so rather than plan it.
		return false, fmt.Errorf("store snapshot %s: %w", snap.Tree, err)
	case !errors.Is(err, bus.ErrNotFound):
		return false, fmt.Errorf("store snapshot %s: %w", snap.Tree, err)
	}
	return b.PutObjectIfAbsent(ctx, bus.ObjectPreviews, snap.Tree, m)
}
