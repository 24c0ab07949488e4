package pve_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pve"
)

// An observe asked for the backup jobs reads them with one request, each with its comment apart from its
// options; one not asked reads none.
func TestObserveReadsTheBackupJobsOnlyWhenAsked(t *testing.T) {
	c := poolSim(t)
	c.root(t, "POST", "/cluster/backup", "id", "nightly", "schedule", "21:00", "all", "1", "exclude", "101",
		"comment", "Nightly [proxops]", "storage", "local")
	c.root(t, "POST", "/cluster/backup", "id", "hand", "schedule", "sun 04:00", "vmid", "100", "enabled", "0")
	cl := c.client(t)
	ctx := testContext(t)

	n, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1"})
	if err != nil {
		t.Fatal(err)
	}
	if n.BackupJobsObserved || len(n.BackupJobs) != 0 {
		t.Fatalf("an observe not asked for backup jobs reported %v", n.BackupJobs)
	}
	c.sim.ResetLog()
	n, err = cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1", BackupJobs: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []inventory.BackupJob{
		{ID: "hand", Options: map[string]string{"schedule": "sun 04:00", "vmid": "100", "enabled": "0"}},
		{ID: "nightly", Comment: "Nightly [proxops]", Options: map[string]string{"schedule": "21:00", "all": "1", "exclude": "101",
			"storage": "local", "enabled": "1"}},
	}
	if d := cmp.Diff(want, n.BackupJobs); !n.BackupJobsObserved || d != "" {
		t.Fatalf("backup jobs (observed %v) (-want +got):\n%s", n.BackupJobsObserved, d)
	}
	if counts := c.sim.Counts(); counts["GET /cluster/backup"] != 1 {
		t.Fatalf("backup job reads: %v; want one GET /cluster/backup", counts)
	}
}
