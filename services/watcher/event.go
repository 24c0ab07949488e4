package watcher

import "github.com/proxops/proxops/internal/event"

// The repository events are the shared domain types of internal/event; the watcher is their only producer.
type (
	// Trigger says how a commit was noticed.
	Trigger = event.Trigger
	// RepoChanged announces a manifest tree the planners should reconcile.
	RepoChanged = event.RepoChanged
	// ReconcileRequest asks for a reconcile now.
	ReconcileRequest = event.ReconcileRequest
	// TreeSnapshot is the manifest files of one tree, sorted by path.
	TreeSnapshot = event.TreeSnapshot
	// TreeFile is one file of a snapshot.
	TreeFile = event.File
	// SourceHealth says whether the repository can be read.
	SourceHealth = event.SourceHealth
)

// The triggers of a RepoChanged.
const (
	TriggerStartup = event.TriggerStartup
	TriggerPoll    = event.TriggerPoll
	TriggerWebhook = event.TriggerWebhook
	TriggerDrift   = event.TriggerDrift
	TriggerManual  = event.TriggerManual
)
