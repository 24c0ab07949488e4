package wire

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/event"
	repov1 "github.com/proxops/proxops/internal/gen/proxops/repo/v1"
)

var triggerEnum = enumMap[event.Trigger, repov1.Trigger]{field: "trigger", pairs: []enumPair[event.Trigger, repov1.Trigger]{
	{event.TriggerStartup, repov1.Trigger_TRIGGER_STARTUP},
	{event.TriggerPoll, repov1.Trigger_TRIGGER_POLL},
	{event.TriggerWebhook, repov1.Trigger_TRIGGER_WEBHOOK},
	{event.TriggerDrift, repov1.Trigger_TRIGGER_DRIFT},
	{event.TriggerManual, repov1.Trigger_TRIGGER_MANUAL},
}}

// RepoChangedToProto converts a RepoChanged into a proxops.repo.v1.RepoChanged.
func RepoChangedToProto(e event.RepoChanged) (proto.Message, error) {
	t, err := triggerEnum.toProto(e.Trigger)
	if err != nil {
		return nil, fmt.Errorf("repo changed %s: %w", e.EventID, err)
	}
	return &repov1.RepoChanged{Repo: e.Repo, Branch: e.Branch, Commit: e.Commit, Tree: e.Tree, Trigger: t,
		EventId: e.EventID, RequestId: e.RequestID, Clusters: e.Clusters, DryRun: e.DryRun, Subject: e.Subject,
		RequestedBy: e.RequestedBy, MoveMisplaced: e.MoveMisplaced, Rollback: rollbackToProto(e.Rollback)}, nil
}

func rollbackToProto(r *event.Rollback) *repov1.GuestRollback {
	if r == nil {
		return nil
	}
	return &repov1.GuestRollback{Guest: r.Guest, Snapshot: r.Snapshot}
}

func rollbackFromProto(p *repov1.GuestRollback) *event.Rollback {
	if p == nil {
		return nil
	}
	return &event.Rollback{Guest: p.GetGuest(), Snapshot: p.GetSnapshot()}
}

// RepoChangedFromProto converts a proxops.repo.v1.RepoChanged.
func RepoChangedFromProto(m proto.Message) (event.RepoChanged, error) {
	p, err := as[*repov1.RepoChanged](m)
	if err != nil {
		return event.RepoChanged{}, fmt.Errorf("repo changed: %w", err)
	}
	t, err := triggerEnum.fromProto(p.GetTrigger())
	if err != nil {
		return event.RepoChanged{}, fmt.Errorf("repo changed %s: %w", p.GetEventId(), err)
	}
	return event.RepoChanged{Repo: p.GetRepo(), Branch: p.GetBranch(), Commit: p.GetCommit(), Tree: p.GetTree(),
		Trigger: t, EventID: p.GetEventId(), RequestID: p.GetRequestId(), Clusters: p.GetClusters(),
		DryRun: p.GetDryRun(), Subject: p.GetSubject(), RequestedBy: p.GetRequestedBy(), MoveMisplaced: p.GetMoveMisplaced(),
		Rollback: rollbackFromProto(p.GetRollback())}, nil
}

// DecodeRepoChanged decodes a received proxops.repo.v1.RepoChanged.
func DecodeRepoChanged(ctx context.Context, decode DecodeFunc) (event.RepoChanged, error) {
	return decodeAs(ctx, decode, &repov1.RepoChanged{}, func(p *repov1.RepoChanged) (event.RepoChanged, error) { return RepoChangedFromProto(p) })
}

// ReconcileRequestToProto converts a ReconcileRequest into a proxops.repo.v1.ReconcileRequest.
func ReconcileRequestToProto(r event.ReconcileRequest) proto.Message {
	return &repov1.ReconcileRequest{RequestId: r.RequestID, Clusters: r.Clusters, DryRun: r.DryRun, Tree: r.Tree,
		RequestedBy: r.RequestedBy, MoveMisplaced: r.MoveMisplaced, Rollback: rollbackToProto(r.Rollback)}
}

// ReconcileRequestFromProto converts a proxops.repo.v1.ReconcileRequest.
func ReconcileRequestFromProto(m proto.Message) (event.ReconcileRequest, error) {
	p, err := as[*repov1.ReconcileRequest](m)
	if err != nil {
		return event.ReconcileRequest{}, fmt.Errorf("reconcile request: %w", err)
	}
	return event.ReconcileRequest{RequestID: p.GetRequestId(), Clusters: p.GetClusters(), DryRun: p.GetDryRun(),
		Tree: p.GetTree(), RequestedBy: p.GetRequestedBy(), MoveMisplaced: p.GetMoveMisplaced(),
		Rollback: rollbackFromProto(p.GetRollback())}, nil
}

// DecodeReconcileRequest decodes a received proxops.repo.v1.ReconcileRequest.
func DecodeReconcileRequest(ctx context.Context, decode DecodeFunc) (event.ReconcileRequest, error) {
	return decodeAs(ctx, decode, &repov1.ReconcileRequest{}, func(p *repov1.ReconcileRequest) (event.ReconcileRequest, error) {
		return ReconcileRequestFromProto(p)
	})
}

// TreeSnapshotToProto converts a snapshot into a proxops.repo.v1.TreeSnapshot.
func TreeSnapshotToProto(s event.TreeSnapshot) proto.Message {
	p := &repov1.TreeSnapshot{Commit: s.Commit, Tree: s.Tree}
	for _, f := range s.Files {
		p.Files = append(p.Files, &repov1.TreeFile{Path: f.Path, Content: f.Content})
	}
	return p
}

// TreeSnapshotFromProto converts a proxops.repo.v1.TreeSnapshot.
func TreeSnapshotFromProto(m proto.Message) (event.TreeSnapshot, error) {
	p, err := as[*repov1.TreeSnapshot](m)
	if err != nil {
		return event.TreeSnapshot{}, fmt.Errorf("tree snapshot: %w", err)
	}
	s := event.TreeSnapshot{Commit: p.GetCommit(), Tree: p.GetTree()}
	for _, f := range p.GetFiles() {
		s.Files = append(s.Files, event.File{Path: f.GetPath(), Content: f.GetContent()})
	}
	return s, nil
}

// DecodeTreeSnapshot decodes a proxops.repo.v1.TreeSnapshot, e.g. from the proxops_trees object store:
//
//	wire.DecodeTreeSnapshot(ctx, func(ctx context.Context, m proto.Message) error {
//		return b.GetObject(ctx, bus.ObjectTrees, tree, m)
//	})
func DecodeTreeSnapshot(ctx context.Context, decode DecodeFunc) (event.TreeSnapshot, error) {
	return decodeAs(ctx, decode, &repov1.TreeSnapshot{}, func(p *repov1.TreeSnapshot) (event.TreeSnapshot, error) { return TreeSnapshotFromProto(p) })
}
