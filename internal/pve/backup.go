package pve

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
)

// BackupJob is a backup job (GET /cluster/backup): its id and options, every value as a string (booleans
// 0/1), the comment apart.
type BackupJob struct {
	ID      string
	Comment string
	// Options are the job's other options (schedule, storage, vmid, pool, all, exclude, mode, compress,
	// prune-backups, notes-template, protected, enabled, node, notification-mode, ...), without id and type.
	Options map[string]string
}

// ListBackupJobs lists the backup jobs, sorted by id.
func (c *Client) ListBackupJobs(ctx context.Context) ([]BackupJob, error) {
	raw, err := c.getRaw(ctx, "/cluster/backup", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list backup jobs: %w", err)
	}
	var entries []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("list backup jobs: %w", err)
	}
	out := make([]BackupJob, 0, len(entries))
	for _, e := range entries {
		j := BackupJob{Options: map[string]string{}}
		for k, v := range e {
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				s = strings.TrimSpace(string(v)) // a number or a boolean as PVE sends it
			}
			switch k {
			case "id":
				j.ID = s
			case "comment":
				j.Comment = s
			case "type", "next-run":
			default:
				j.Options[k] = s
			}
		}
		if j.ID == "" {
			return nil, fmt.Errorf("list backup jobs: an entry without id")
		}
		out = append(out, j)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID < out[k].ID })
	return out, nil
}

var backupJobObject = restObject(ObjectKindBackupJob, "backup job", "id", "/cluster/backup", (*Client).ListBackupJobs,
	func(j BackupJob, id string) (string, bool) { return j.Comment, j.ID == id })

// observeBackupJobs reads the cluster's backup jobs for the inventory.
func (c *Client) observeBackupJobs(ctx context.Context) ([]inventory.BackupJob, error) {
	jobs, err := c.ListBackupJobs(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]inventory.BackupJob, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, inventory.BackupJob{ID: j.ID, Comment: j.Comment, Options: j.Options})
	}
	return out, nil
}
