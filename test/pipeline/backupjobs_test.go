package pipeline_test

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// jobRecorded reports whether the ownership inventory holds a record of a backup job.
func (e *env) jobRecorded(id string) bool {
	e.t.Helper()
	key, err := bus.ObjectOwnedKey(cluster, "backupjob", id)
	if err != nil {
		e.t.Fatal(err)
	}
	_, _, err = e.bus.GetBytes(testContext(e.t), bus.BucketOwned, key)
	if errors.Is(err, bus.ErrNotFound) {
		return false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return true
}

// withBackupJobs adds BackupJob manifests (file name → spec body) to a repository and sets spec.backup:
// false on the VMs named in noBackup.
func withBackupJobs(files repoFiles, jobs map[string]string, noBackup ...string) repoFiles {
	out := repoFiles{}
	for k, v := range files {
		out[k] = v
	}
	names := make([]string, 0, len(jobs))
	for name := range jobs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := "backup/lab/" + name + ".yaml"
		out[f] = "apiVersion: proxops/v1alpha1\nkind: BackupJob\nmetadata: {name: " + name + "}\nspec:\n" + jobs[name]
		out["clusters/lab/resources.yaml"] += "  - ../../" + f + "\n"
	}
	for _, name := range noBackup {
		f := "vm/lab/" + name + ".yaml"
		out[f] = strings.Replace(out[f], "  vmid:", "  backup: false\n  vmid:", 1)
	}
	return out
}

// Declared backup jobs converge on the simulator in one run, marked and recorded, with the guest whose
// spec.backup is false excluded from the job that selects every guest, and the next plan is empty; a changed
// schedule is converged, a job dropped from git is deleted and its record forgotten, a job made by hand is
// never touched, until git declares its id: then a claim the plan shows takes it over.
func TestDeclaredBackupJobsConvergeADroppedOneIsPrunedAndAHandMadeOneIsOnlyClaimed(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	e.post("/cluster/backup", url.Values{"id": {"hand"}, "schedule": {"sun 04:00"}, "all": {"1"}, "comment": {"made by hand"}})

	nightly := "  schedule: \"21:00\"\n  storage: local\n  selection: {all: true}\n  compression: zstd\n" +
		"  retention: {keep-last: 3, keep-weekly: 2}\n  comment: Nightly\n"
	weekly := "  schedule: sat 03:00\n  selection: {guests: [web-01]}\n  mode: stop\n"
	vms := map[string]int{"web-01": 101, "web-02": 102}
	files := withBackupJobs(e.vms(vms), map[string]string{"nightly": nightly, "web-weekly": weekly}, "web-02")
	e.apply(files)

	n := e.sim.BackupJob("nightly")
	if n["schedule"] != "21:00" || n["all"] != "1" || n["exclude"] != "102" || n["compress"] != "zstd" ||
		n["prune-backups"] != "keep-last=3,keep-weekly=2" || n["comment"] != "Nightly [proxops]" || n["storage"] != "local" {
		t.Fatalf("job nightly: %v", n)
	}
	if w := e.sim.BackupJob("web-weekly"); w["vmid"] != "101" || w["mode"] != "stop" || w["comment"] != "[proxops]" {
		t.Fatalf("job web-weekly: %v", w)
	}
	if !e.jobRecorded("nightly") || !e.jobRecorded("web-weekly") {
		t.Fatal("a created job has no ownership record")
	}
	again := e.wait(e.announce(files, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned)
	}

	changed := withBackupJobs(e.vms(vms), map[string]string{"nightly": strings.Replace(nightly, "21:00", "22:30", 1)}, "web-02")
	o := e.apply(changed)
	var actions []plan.Action
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Equal(actions, []plan.Action{plan.ActionConfigureBackupJob, plan.ActionDeleteBackupJob}) {
		t.Fatalf("actions %v; want configure-backup-job, delete-backup-job", actions)
	}
	if n := e.sim.BackupJob("nightly"); n["schedule"] != "22:30" || n["exclude"] != "102" {
		t.Fatalf("job nightly after the change: %v", n)
	}
	if e.sim.BackupJob("web-weekly") != nil || e.jobRecorded("web-weekly") {
		t.Fatal("the job dropped from git was not deleted and forgotten")
	}
	if h := e.sim.BackupJob("hand"); h == nil || h["comment"] != "made by hand" {
		t.Fatalf("the job made by hand was touched: %v", h)
	}
	again = e.wait(e.announce(changed, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned)
	}

	// Declaring the hand-made job's id takes it over by a claim the plan shows, then converges it.
	claimed := withBackupJobs(e.vms(vms), map[string]string{"nightly": strings.Replace(nightly, "21:00", "22:30", 1),
		"hand": "  schedule: sun 04:00\n  selection: {all: true}\n  comment: made by hand\n"}, "web-02")
	o = e.apply(claimed)
	actions = nil
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if !slices.Equal(actions, []plan.Action{plan.ActionClaimClusterObject, plan.ActionConfigureBackupJob}) {
		t.Fatalf("actions %v; want claim-cluster-object, configure-backup-job", actions)
	}
	if h := e.sim.BackupJob("hand"); h["comment"] != "made by hand [proxops]" || h["exclude"] != "102" || !e.jobRecorded("hand") {
		t.Fatalf("the claimed job: %v (recorded %v)", h, e.jobRecorded("hand"))
	}
	again = e.wait(e.announce(claimed, true), time.Minute)
	if len(again.planned) != 1 || !again.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", again.planned)
	}
}
