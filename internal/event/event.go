// Package event holds the repository events as plain Go values: what the watcher noticed in git
// (RepoChanged), a request to reconcile now (ReconcileRequest) and the manifest files of one tree
// (TreeSnapshot). internal/wire converts them to and from the protobuf contract. It is pure: no I/O.
package event

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Trigger says how a commit was noticed.
type Trigger string

const (
	// TriggerStartup: the first announcement after the watcher started.
	TriggerStartup Trigger = "startup"
	// TriggerPoll: a remote ref listing showed a new commit.
	TriggerPoll Trigger = "poll"
	// TriggerWebhook: a verified push webhook.
	TriggerWebhook Trigger = "webhook"
	// TriggerDrift: the drift schedule re-announced the current commit.
	TriggerDrift Trigger = "drift"
	// TriggerManual: a ReconcileRequest.
	TriggerManual Trigger = "manual"
)

// Triggers lists every trigger in a fixed order.
var Triggers = []Trigger{TriggerStartup, TriggerPoll, TriggerWebhook, TriggerDrift, TriggerManual}

// RepoChanged announces a manifest tree the planners should reconcile.
type RepoChanged struct {
	// Repo identifies the repository (URL or path as configured, never with credentials).
	Repo   string
	Branch string
	// Commit is the commit hash; empty for an uncommitted work-tree snapshot.
	Commit string
	// Tree names the snapshot by its content (TreeName), in proxops_trees or proxops_previews.
	Tree    string
	Trigger Trigger
	// EventID is the dedup id (CommitEventID, DriftEventID or ManualEventID); it is the Nats-Msg-Id.
	EventID string
	// RequestID is the ReconcileRequest this event answers, if any.
	RequestID string
	// Clusters restricts the reconcile; empty means every cluster of the tree.
	Clusters []string
	// DryRun: plans are computed and published, nothing is applied.
	DryRun bool
	// Subject is the commit's subject line, for display.
	Subject string
	// RequestedBy is the operator user who asked for a work-tree apply: the NATS user the request arrived
	// as. Empty for commits the watcher fetched and for dry runs of a client's tree.
	RequestedBy string
	// MoveMisplaced asks the plans to move guests found on another node than their manifest's back to it (an
	// operator's explicit request; a commit, the drift schedule and webhooks never set it).
	MoveMisplaced bool
	// Rollback is an operator's explicit rollback of one guest (proxops rollback): the plan is that rollback
	// and nothing else. Only an operator's request on its own subject sets it.
	Rollback *Rollback
}

// Rollback asks for one guest to be rolled back to one of ProxOps' own safety snapshots.
type Rollback struct {
	// Guest names the guest: Kind/name, its name, or its vmid.
	Guest string
	// Snapshot is the snapshot's name; empty means the newest of ProxOps' own snapshots of the guest.
	Snapshot string
}

// SameRollback reports whether two events ask for the same rollback (or both for none).
func SameRollback(a, b *Rollback) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// ReconcileRequest asks the watcher to announce the current commit again, or a snapshot the requester
// stored itself.
type ReconcileRequest struct {
	// RequestID is unique, chosen by the requester, and echoed in RepoChanged.RequestID.
	RequestID string
	// Clusters restricts the reconcile; empty means all.
	Clusters []string
	// DryRun: plan only, never apply.
	DryRun bool
	// Tree is a snapshot already stored by the requester; empty means the watcher's current commit.
	Tree string
	// RequestedBy is free text for logs, e.g. "cli:alice@host": the client fills it in, so nothing trusts it.
	RequestedBy string
	// Operator is set by the transport, never from the message: the operator user a work-tree apply arrived
	// as (the last token of its subject, which only that user may publish on). Empty for an ordinary
	// request, whose tree is then only ever planned as a dry run.
	Operator string
	// MoveMisplaced asks the plans to move misplaced guests back to their manifest's node
	// (RepoChanged.MoveMisplaced).
	MoveMisplaced bool
	// Rollback asks for an operator's rollback of one guest (RepoChanged.Rollback); honoured only with
	// Operator set.
	Rollback *Rollback
}

// TreeSnapshot is the manifest files of one tree, sorted by path.
type TreeSnapshot struct {
	Commit string
	Tree   string
	Files  []File
}

// File is one file of a snapshot.
type File struct {
	// Path is slash-separated and relative to the repository root.
	Path    string
	Content []byte
}

// Sort puts the files in path order.
func (s *TreeSnapshot) Sort() {
	slices.SortFunc(s.Files, func(a, b File) int { return cmp.Compare(a.Path, b.Path) })
}

// File returns a file's content by path.
func (s TreeSnapshot) File(path string) ([]byte, bool) {
	for _, f := range s.Files {
		if f.Path == path {
			return f.Content, true
		}
	}
	return nil, false
}

// CommitEventID is the dedup id of a commit noticed by push or poll: <repo>@<commit>. A push and a poll of
// the same commit share it, so one commit is one plan however it was noticed.
func CommitEventID(repo, commit string) string { return repo + "@" + commit }

// DriftEventID is the dedup id of a drift tick: <repo>@<commit>#drift-<slot>, slot = time / interval.
func DriftEventID(repo, commit string, slot int64) string {
	return fmt.Sprintf("%s#drift-%d", CommitEventID(repo, commit), slot)
}

// ManualEventID is the dedup id of a reconcile request: <repo>@<commit>#manual-<request id>.
func ManualEventID(repo, commit, requestID string) string {
	return CommitEventID(repo, commit) + "#manual-" + requestID
}

// Validate checks what every RepoChanged must carry.
func (e RepoChanged) Validate() error {
	var missing []string
	if e.Repo == "" {
		missing = append(missing, "repo")
	}
	if e.Tree == "" {
		missing = append(missing, "tree")
	}
	if e.EventID == "" {
		missing = append(missing, "event id")
	}
	if !slices.Contains(Triggers, e.Trigger) {
		return fmt.Errorf("repo changed: unknown trigger %q", string(e.Trigger))
	}
	if len(missing) > 0 {
		return fmt.Errorf("repo changed: missing %s", strings.Join(missing, ", "))
	}
	return nil
}
