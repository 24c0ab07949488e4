package plan

import (
	"slices"
	"time"
)

// RunInfo identifies the run and the repository event a plan event belongs to.
type RunInfo struct {
	Cluster string
	// PlanID is the plan's content id.
	PlanID string
	// RunID is unique per run; empty for a plan that is only shown.
	RunID     string
	Repo      string
	Commit    string
	Tree      string
	EventID   string
	RequestID string
	// RequestIDs are every request the run answers: RequestID and the requests of equal events (same
	// repository and tree or commit) coalesced into it.
	RequestIDs []string
	// DryRun: plans are computed and shown, nothing is applied.
	DryRun bool
	// Suspended: the cluster is suspended; nothing is applied.
	Suspended bool
	// RequestedBy is the operator user who asked for a work-tree apply (RepoChanged.RequestedBy); empty for
	// a commit the watcher fetched.
	RequestedBy string
}

// Answers reports whether the run answers a request: its own event's, or one coalesced into it.
func (r RunInfo) Answers(requestID string) bool {
	return requestID != "" && (r.RequestID == requestID || slices.Contains(r.RequestIDs, requestID))
}

// Planned is a plan published for a run (or only shown).
type Planned struct {
	RunInfo
	Plan Plan
}

// Rejected is a rejection published for a repository event.
type Rejected struct {
	RunInfo
	Rejection Rejection
}

// Held says a run waits for an operator's confirmation.
type Held struct {
	RunInfo
	Reason string
	// Prunes are the Kind/name of the prunes that need confirmation.
	Prunes []string
}

// Confirmation releases a held plan; it only releases the plan whose content id it carries.
type Confirmation struct {
	Cluster     string
	PlanID      string
	ConfirmedBy string
}

// FinishedRun closes a run.
type FinishedRun struct {
	RunInfo
	Finished
	At time.Time
}
