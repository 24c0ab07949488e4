package watcher

// The domain events of the repository side. They are plain values with no behaviour and no dependency on the
// rest of the package, so they can move unchanged to a shared package.

// Trigger says how a commit was noticed.
type Trigger string

// The triggers of a RepoChanged.
const (
	// TriggerStartup is the first announcement after the watcher started.
	TriggerStartup Trigger = "startup"
	// TriggerPoll is a remote ref listing that showed a new commit.
	TriggerPoll Trigger = "poll"
	// TriggerWebhook is a verified push webhook.
	TriggerWebhook Trigger = "webhook"
	// TriggerDrift is the drift schedule re-announcing the current commit.
	TriggerDrift Trigger = "drift"
	// TriggerManual is a ReconcileRequest ("reconcile now").
	TriggerManual Trigger = "manual"
)

// RepoChanged announces a manifest tree the planners should reconcile. EventID is the message's dedup id
// (Nats-Msg-Id): one commit is one plan however it was noticed.
type RepoChanged struct {
	// Repo is the repository identity: the URL without credentials, or the absolute local path.
	Repo   string
	Branch string
	// Commit is the commit hash (hex); empty for a snapshot of uncommitted files.
	Commit string
	// Tree is the name of the snapshot in the tree store.
	Tree    string
	Trigger Trigger
	// EventID is <repo>@<commit>, <repo>@<commit>#drift-<slot>, <repo>@<commit>#manual-<request id>, or
	// <repo>@<tree>#manual-<request id> for a requester's own snapshot.
	EventID string
	// RequestID is the ReconcileRequest this event answers, if any.
	RequestID string
	// Clusters restricts the reconcile to these clusters; empty means every cluster of the tree.
	Clusters []string
	// DryRun asks for plans only, nothing applied.
	DryRun bool
	// Subject is the commit's subject line, for display.
	Subject string
}

// ReconcileRequest asks the watcher to announce the current commit again, or a snapshot the requester stored.
type ReconcileRequest struct {
	// RequestID is unique, chosen by the requester, and echoed in RepoChanged.RequestID.
	RequestID string
	// Clusters restricts the reconcile; empty means all.
	Clusters []string
	// DryRun asks for plans only.
	DryRun bool
	// Tree names a snapshot the requester already stored; empty means the watcher's current commit.
	Tree string
	// RequestedBy says who asked, for logs and status (e.g. "cli:alice@host").
	RequestedBy string
}

// TreeSnapshot is the content of one object of the tree store: the manifest files of one tree.
type TreeSnapshot struct {
	// Commit is the commit the snapshot was read from; empty for uncommitted files.
	Commit string
	// Tree is the snapshot's name: the git tree hash of the commit, or a content hash of uncommitted files.
	Tree string
	// Files are sorted by Path.
	Files []TreeFile
}

// TreeFile is one file of a snapshot.
type TreeFile struct {
	// Path is slash-separated and relative to the repository root.
	Path    string
	Content []byte
}
