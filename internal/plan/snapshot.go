package plan

import (
	"strconv"
	"strings"
	"time"
)

// Safety snapshots: before a change that restarts a guest, changes its disks or moves it, the plan takes a
// snapshot named proxops-<short run id> that the change depends on. ProxOps calls a snapshot its own only
// when both hold: the name starts with SnapshotPrefix, and the ownership inventory holds a SnapshotRecord of
// it (written by the planner before it dispatches the snapshot). It deletes or rolls back to no other.

// SnapshotPrefix starts the name of every snapshot ProxOps takes.
const SnapshotPrefix = "proxops-"

// SnapshotNameParam is the snapshot operations' parameter naming the snapshot. A snapshot operation of a plan
// carries no name: the run that dispatches it names it (SnapshotName of the run id), since the plan does not
// know its run.
const SnapshotNameParam = "snapname"

// IsOwnSnapshotName reports whether a snapshot name has ProxOps' prefix (one half of ownership).
func IsOwnSnapshotName(name string) bool {
	return strings.HasPrefix(name, SnapshotPrefix) && len(name) > len(SnapshotPrefix)
}

// SnapshotName is the name of the safety snapshots a run takes: proxops- and the last 12 letters and digits
// of the run id (a run id's random part), a valid PVE snapshot name.
func SnapshotName(runID string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(runID) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	s := b.String()
	if len(s) > 12 {
		s = s[len(s)-12:]
	}
	return SnapshotPrefix + s
}

// SnapshotRecord is the ownership inventory's record of a safety snapshot (KV proxops_owned under
// <cluster>.obj.snapshot.<vmid>/<name>).
type SnapshotRecord struct {
	VMID int
	Name string
	// Ref and Node are the guest's.
	Ref  string
	Node string
	// RunID and Commit are the run that took it and the commit it applied; Change what it protected.
	RunID      string
	Commit     string
	Change     string
	RecordedAt time.Time
}

// SnapshotObjectID is the id of a snapshot record among the inventory's objects: <vmid>/<name>.
func SnapshotObjectID(vmid int, name string) string {
	return strconv.Itoa(vmid) + "/" + name
}
