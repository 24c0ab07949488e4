package event

import "time"

// SourceHealth says whether the watcher can read its repository: while Stale, planning goes on with the
// last good commit and the desired state may be behind git.
type SourceHealth struct {
	// Repo and Branch identify the source as in RepoChanged (no credentials).
	Repo   string
	Branch string
	// Stale is true while the last attempt to list, fetch or read the repository failed.
	Stale bool
	// LastError is the last failure, without credentials; empty when not stale.
	LastError string
	// Commit is the last good commit: the one announced and planned.
	Commit string
	// LastSuccess is when the repository was last read successfully (zero: never).
	LastSuccess time.Time
	// Failures counts failed attempts since the last success.
	Failures int
	// At is when the watcher published this.
	At time.Time
}
