package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

// localSystem starts an embedded NATS server that listens on loopback and writes its client info into a
// data directory, as proxops up does, and stores the reports the status service would fold from events.
func localSystem(t *testing.T, events ...report.Event) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: dir, Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Close() }()
	if _, err := b.Provision(ctx, bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	fleet := report.NewFleet()
	for _, e := range events {
		fleet.Apply(e)
	}
	for _, s := range fleet.Statuses() {
		m, err := wire.ClusterStatusToProto(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PutProto(ctx, bus.BucketStatus, s.Cluster, m); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func statusHistory() []report.Event {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	repo := event.RepoChanged{Repo: "git@git.example.invalid:ops/infra.git", Branch: "main", Commit: "3f9a1c2e", Tree: "t1",
		Trigger: event.TriggerWebhook, EventID: "infra@3f9a1c2e"}
	alpha := plan.RunInfo{Cluster: "alpha", PlanID: "plan-a", RunID: "run-a", Commit: "3f9a1c2e", EventID: repo.EventID}
	beta := plan.RunInfo{Cluster: "beta", Commit: "3f9a1c2e", EventID: repo.EventID}
	create := plan.Operation{ID: "op-1", Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Ref: "VM/web-01", Action: plan.ActionCreate,
		Reason: "VM/web-01: not on PVE; will create"}
	return []report.Event{
		{Seq: 1, At: at, Repo: &repo},
		{Seq: 1, At: at, Planned: &plan.Planned{RunInfo: alpha, Plan: plan.Plan{ID: "plan-a", Cluster: "alpha",
			Resources: []string{"ISO/debian-12", "VM/web-01"}, Operations: []plan.Operation{create},
			Findings: []plan.Finding{{Kind: plan.FindingAnomaly, Ref: "ISO/debian-12", Node: "pve1", Message: "checksum differs; not re-downloaded"}}}}},
		{Seq: 2, At: at, Finished: &plan.FinishedRun{RunInfo: alpha, Finished: plan.Finished{Outcome: plan.OutcomeFailed, Failed: 1,
			Operations: []plan.OpOutcome{{ID: "op-1", Ref: "VM/web-01", Action: plan.ActionCreate, State: plan.OpFailed, Message: "storage 'fast' does not exist"}}}}},
		{Seq: 3, At: at, Rejected: &plan.Rejected{RunInfo: beta, Rejection: plan.Rejection{Cluster: "beta", Reason: plan.RejectNode,
			Diagnostics: diag.List{{Severity: diag.Error, File: "vm/beta/db.yaml", Line: 4, Column: 9, Ref: "VM/db", Field: "spec.node", Message: `node "pve9" is not in the allowlist`}}}}},
		{Seq: 1, At: at, Gaps: &inventory.GapReport{Cluster: "alpha", Gaps: []inventory.Gap{{Setting: inventory.Setting{Kind: "VM", Name: "web-01", Node: "pve1", VMID: 101, Key: "args", Value: "-cpu host"}}}}},
	}
}

func TestStatusPrintsThePredecessorsTextFromTheLocalSystem(t *testing.T) {
	dir := localSystem(t, statusHistory()...)
	out, code, err := runCLI(t, "status", "--data-dir", dir)
	if err != nil || code != 0 {
		t.Fatalf("status: code %d, err %v\n%s", code, err, out)
	}
	want := `last cycle: ABORTED (beta: unknown_node: 1 error; nothing was applied; planned again when something changes: a new commit, the secrets or configuration, or an operator's request (proxops apply)) (commit 3f9a1c2e)
objects=2 actions_ok=0 actions_err=1 pruned=0 prune_deferred=0 skipped=0 anomalies=1 gaps=1
[alpha] phase=failed commit=3f9a1c2e applied=-: 1 operation failed; the next plan retries
  ISO debian-12 - anomalous checksum differs; not re-downloaded
  VM web-01 101 failed VM/web-01: not on PVE; will create err: storage 'fast' does not exist
  finding: anomaly ISO/debian-12 pve1 checksum differs; not re-downloaded
  gap: VM/web-01 pve1/101 args=-cpu host
[beta] phase=rejected commit=3f9a1c2e applied=-: unknown_node: 1 error; nothing was applied; planned again when something changes: a new commit, the secrets or configuration, or an operator's request (proxops apply)
  (no recorded objects)
  diagnostic: vm/beta/db.yaml:4:9: VM/db: spec.node: node "pve9" is not in the allowlist
`
	if out != want {
		t.Errorf("status text:\n%s\nwant:\n%s", out, want)
	}
}

func TestStatusSaysWhenTheRepositoryCannotBeRead(t *testing.T) {
	dir := localSystem(t, statusHistory()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := connectLocal(ctx, t, dir)
	m, err := wire.SourceHealthToProto(event.SourceHealth{Repo: "git@git.example.invalid:ops/infra.git", Branch: "main",
		Stale: true, LastError: "fetch: repository not found", Commit: "3f9a1c2e", Failures: 2,
		At: time.Date(2025, 3, 1, 12, 5, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(ctx, bus.SubjectRepoHealth, m); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	out, code, err := runCLI(t, "status", "--data-dir", dir)
	if err != nil || code != 0 {
		t.Fatalf("status: code %d, err %v\n%s", code, err, out)
	}
	want := "DESIRED STATE IS STALE: git@git.example.invalid:ops/infra.git (main) cannot be read; planning uses the last good commit 3f9a1c2e: fetch: repository not found\n"
	if !strings.Contains(out, want) {
		t.Errorf("status text has no stale line %q:\n%s", want, out)
	}
}

func TestStatusJSONAndClusterFilter(t *testing.T) {
	dir := localSystem(t, statusHistory()...)
	out, code, err := runCLI(t, "status", "--data-dir", dir, "--output", "json", "--cluster", "beta")
	if err != nil || code != 0 {
		t.Fatalf("status: code %d, err %v\n%s", code, err, out)
	}
	var doc struct {
		ProcessStart *string `json:"process_start"`
		Clusters     []struct {
			Cluster string `json:"cluster"`
			Report  struct {
				Phase       string            `json:"phase"`
				Diagnostics []json.RawMessage `json:"diagnostics"`
			} `json:"report"`
		} `json:"clusters"`
		Objects []json.RawMessage `json:"objects"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(doc.Clusters) != 1 || doc.Clusters[0].Cluster != "beta" || doc.Clusters[0].Report.Phase != "rejected" ||
		len(doc.Clusters[0].Report.Diagnostics) != 1 || doc.ProcessStart != nil || doc.Objects == nil {
		t.Errorf("json = %s", out)
	}
	_, code, err = runCLI(t, "status", "--data-dir", dir, "--cluster", "gamma")
	if code != 1 || err == nil || !strings.Contains(err.Error(), `--cluster "gamma": no status for it (known: alpha, beta)`) {
		t.Errorf("unknown cluster: code %d, err %v", code, err)
	}
}

func TestStatusBeforeTheFirstReconcile(t *testing.T) {
	dir := localSystem(t)
	out, code, err := runCLI(t, "status", "--data-dir", dir)
	if err != nil || code != 0 || out != "no reconcile cycle has completed yet\n" {
		t.Errorf("status: code %d, err %v, out %q", code, err, out)
	}
}

func TestStatusExplainsWhereNoSystemRuns(t *testing.T) {
	dir := t.TempDir()
	_, code, err := runCLI(t, "status", "--data-dir", dir)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "no running proxops up found in "+dir) {
		t.Errorf("code %d, err %v", code, err)
	}
	_, _, err = runCLI(t, "status", "--data-dir", dir, "--output", "yaml")
	if err == nil || !strings.Contains(err.Error(), `--output "yaml"`) {
		t.Errorf("bad output: %v", err)
	}
	_, _, err = runCLI(t, "status", "--nats-user", "ops")
	if err == nil || !strings.Contains(err.Error(), "need --nats URL") {
		t.Errorf("credentials without --nats: %v", err)
	}
}

func TestStatusReachesADeployedSystemWithNATSURLAndCredentials(t *testing.T) {
	dir := localSystem(t, statusHistory()...)
	ci, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(statusPasswordVariable, ci.Password)
	out, code, err := runCLI(t, "status", "--data-dir", t.TempDir(), "--nats", ci.URL, "--nats-user", ci.User, "--cluster", "alpha")
	if err != nil || code != 0 || !strings.HasPrefix(out, "last cycle: incomplete (1 failed action) (commit 3f9a1c2e)\n") {
		t.Errorf("code %d, err %v\n%s", code, err, out)
	}
	t.Setenv(statusPasswordVariable, "wrong")
	if _, code, _ := runCLI(t, "status", "--nats", ci.URL, "--nats-user", ci.User, "--timeout", "3s"); code != 1 {
		t.Errorf("a wrong password: code %d, want 1", code)
	}
}

// connectLocal connects to the embedded server a localSystem started in dir.
func connectLocal(ctx context.Context, t *testing.T, dir string) *bus.Bus {
	t.Helper()
	ci, err := bus.ReadClientInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Connect(ctx, bus.ConnectConfig{URL: ci.URL, User: ci.User, Password: ci.Password}, bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
