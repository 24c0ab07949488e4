package pvesim_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
)

func backupJobs(t *testing.T, c *testCluster) []map[string]any {
	t.Helper()
	r := c.do(http.MethodGet, "/cluster/backup", nil)
	mustOK(t, r, "list jobs")
	var out []map[string]any
	if err := json.Unmarshal(r.Data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBackupJobCreateWithoutIDGetsPVEsIDForm(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/cluster/backup", form("schedule", "sun 01:00", "storage", "local", "all", "1",
		"exclude", "101", "mode", "snapshot", "compress", "zstd", "prune-backups", "keep-last=3,keep-weekly=2",
		"notes-template", "{{guestname}}", "comment", "nightly [proxops]")), "create")
	jobs := backupJobs(t, c)
	if len(jobs) != 1 {
		t.Fatalf("jobs %v", jobs)
	}
	j := jobs[0]
	if !regexp.MustCompile(`^backup-[0-9a-f]{8}-[0-9a-f]{4}$`).MatchString(j["id"].(string)) {
		t.Fatalf("id %v", j["id"])
	}
	if j["type"] != "vzdump" || j["schedule"] != "sun 01:00" || j["all"] != float64(1) || j["enabled"] != float64(1) ||
		j["exclude"] != "101" || j["prune-backups"] != "keep-last=3,keep-weekly=2" || j["comment"] != "nightly [proxops]" {
		t.Fatalf("job %v", j)
	}
	one := c.do(http.MethodGet, "/cluster/backup/"+j["id"].(string), nil).obj(t)
	if one["storage"] != "local" || one["notes-template"] != "{{guestname}}" {
		t.Fatalf("read %v", one)
	}
}

func TestBackupJobRefusesWhatPVERefuses(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/cluster/backup", form("id", "nightly", "schedule", "daily", "vmid", "100")), "create")
	for _, tc := range []struct {
		params []string
		status int
		key    string
		msg    string
	}{
		{[]string{"schedule", "25:00", "vmid", "100"}, 400, "schedule", "invalid format - invalid calendar event '25:00' - hour 25 is out of range 0..23\n"},
		{[]string{"schedule", "daily"}, 400, "vmid", "property is missing"},
		{[]string{"schedule", "daily", "vmid", "100", "all", "1"}, 400, "all", "option conflicts with option 'vmid'"},
		{[]string{"schedule", "daily", "vmid", "100", "exclude", "101"}, 400, "exclude", "option conflicts with option 'vmid'"},
		{[]string{"schedule", "daily", "all", "1", "prune-backups", "keep-all=1,keep-last=2"}, 400, "prune-backups", "invalid format - keep-all cannot be set together with other options.\n"},
		{[]string{"schedule", "daily", "all", "1", "mode", "fast"}, 400, "mode", "value 'fast' does not have a value in the enumeration 'snapshot, suspend, stop'"},
		{[]string{"schedule", "daily", "all", "1", "protected", "1"}, 400, "storage", "missing property - 'protected' requires this property"},
		{[]string{"schedule", "daily", "all", "1", "notification-mode", "mail"}, 400, "notification-mode", "value 'mail' does not have a value in the enumeration 'auto, legacy-sendmail, notification-system'"},
	} {
		r := c.do(http.MethodPost, "/cluster/backup", form(tc.params...))
		if r.Status != tc.status || r.Errors[tc.key] != tc.msg {
			t.Errorf("%v: got %d %q %v, want %s: %q", tc.params, r.Status, r.Message, r.Errors, tc.key, tc.msg)
		}
	}
	wantFail(t, c.do(http.MethodPost, "/cluster/backup", form("id", "nightly", "schedule", "daily", "all", "1")), 500, "Job ID 'nightly' already exists\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/backup", form("schedule", "daily", "all", "1", "storage", "nas")), 500, "storage 'nas' does not exist\n")
	wantFail(t, c.do(http.MethodPost, "/cluster/backup", form("schedule", "daily", "pool", "nope")), 403, "Permission check failed (pool 'nope' does not exist)\n")
	if r := c.do(http.MethodGet, "/cluster/backup/other", nil); r.Status != 400 || r.Errors["id"] != "No such job 'other'" {
		t.Fatalf("read unknown: %d %v", r.Status, r.Errors)
	}
	if len(backupJobs(t, c)) != 1 {
		t.Fatal("a refused create left a job")
	}
}

// A retention of only zeros is keep-all, as PVE's validator makes it.
func TestBackupJobZeroRetentionIsKeepAll(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/cluster/backup", form("id", "jb", "schedule", "daily", "all", "1", "prune-backups", "keep-last=0")), "create")
	if got := c.sim.BackupJob("jb")["prune-backups"]; got != "keep-all=1" {
		t.Fatalf("prune-backups %q", got)
	}
}

func TestBackupJobUpdateReplacesSelectionAndDeletesKeys(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/pools", form("poolid", "web")), "pool")
	mustOK(t, c.do(http.MethodPost, "/cluster/backup", form("id", "jb", "schedule", "daily", "all", "1", "exclude", "100",
		"comment", "x", "enabled", "1")), "create")
	mustOK(t, c.do(http.MethodPut, "/cluster/backup/jb", form("vmid", "100,101", "delete", "comment", "enabled", "0")), "to vmids")
	j := c.sim.BackupJob("jb")
	if j["vmid"] != "100,101" || j["all"] != "" || j["exclude"] != "" || j["comment"] != "" || j["enabled"] != "0" {
		t.Fatalf("job %v", j)
	}
	mustOK(t, c.do(http.MethodPut, "/cluster/backup/jb", form("pool", "web")), "to pool")
	if j := c.sim.BackupJob("jb"); j["pool"] != "web" || j["vmid"] != "" {
		t.Fatalf("job %v", j)
	}
	if r := c.do(http.MethodPut, "/cluster/backup/jb", form("delete", "bogus")); r.Status != 400 || r.Errors["delete"] != "unknown option 'bogus'" {
		t.Fatalf("delete unknown: %d %v", r.Status, r.Errors)
	}
	wantFail(t, c.do(http.MethodPut, "/cluster/backup/jb", nil), 500, "no options specified\n")
	wantFail(t, c.do(http.MethodPut, "/cluster/backup/other", form("comment", "x")), 500, "no such vzdump job\n")
	mustOK(t, c.do(http.MethodDelete, "/cluster/backup/jb", nil), "delete")
	if r := c.do(http.MethodDelete, "/cluster/backup/jb", nil); r.Status != 400 || r.Errors["id"] != "No such job 'jb'" {
		t.Fatalf("delete again: %d %v", r.Status, r.Errors)
	}
}

func TestNotBackedUpListsGuestsNoEnabledJobSelects(t *testing.T) {
	c := poolCluster(t)
	mustOK(t, c.do(http.MethodPost, "/cluster/backup", form("id", "ja", "schedule", "daily", "vmid", "100")), "a")
	mustOK(t, c.do(http.MethodPost, "/cluster/backup", form("id", "jb", "schedule", "daily", "all", "1", "enabled", "0")), "b")
	r := c.do(http.MethodGet, "/cluster/backup-info/not-backed-up", nil)
	mustOK(t, r, "not backed up")
	var out []map[string]any
	if err := json.Unmarshal(r.Data, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0]["vmid"] != float64(101) || out[1]["vmid"] != float64(200) || out[1]["name"] != "c" {
		t.Fatalf("not backed up %v", out)
	}
}
