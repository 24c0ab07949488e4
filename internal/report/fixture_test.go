package report_test

import (
	"time"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

// A small history builder: the events a watcher, a planner, executors and an adopter publish.

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

type history struct {
	seq map[report.Stream]uint64
	at  time.Time
}

func newHistory() *history { return &history{seq: map[report.Stream]uint64{}, at: t0} }

func (h *history) stamp(e report.Event) report.Event {
	s := e.Stream()
	h.seq[s]++
	h.at = h.at.Add(time.Second)
	e.Seq, e.At = h.seq[s], h.at
	return e
}

func (h *history) repo(commit string, trigger event.Trigger, clusters ...string) report.Event {
	id := event.CommitEventID("git@example.org:infra", commit)
	if trigger == event.TriggerDrift {
		id = event.DriftEventID("git@example.org:infra", commit, int64(h.seq[report.StreamRepo]))
	}
	return h.stamp(report.Event{Repo: &event.RepoChanged{Repo: "git@example.org:infra", Branch: "main", Commit: commit,
		Tree: "tree-" + commit, Trigger: trigger, EventID: id, Clusters: clusters}})
}

func runInfo(cluster, commit, run string, repo report.Event) plan.RunInfo {
	return plan.RunInfo{Cluster: cluster, PlanID: "plan-" + commit + "-" + run, RunID: run, Repo: "git@example.org:infra",
		Commit: commit, Tree: "tree-" + commit, EventID: repo.Repo.EventID}
}

func (h *history) planned(info plan.RunInfo, p plan.Plan) report.Event {
	p.ID, p.Cluster = info.PlanID, info.Cluster
	for i := range p.Operations {
		p.Operations[i].Cluster, p.Operations[i].RunID, p.Operations[i].PlanID = info.Cluster, info.RunID, info.PlanID
	}
	return h.stamp(report.Event{Planned: &plan.Planned{RunInfo: info, Plan: p}})
}

func (h *history) result(info plan.RunInfo, op plan.Operation, st plan.ResultStatus, msg string) report.Event {
	return h.stamp(report.Event{Result: &plan.Result{RunID: info.RunID, OpID: op.ID, PlanID: info.PlanID,
		Cluster: info.Cluster, Node: op.Node, VMID: op.VMID, Ref: op.Ref, Action: op.Action, Status: st,
		Message: msg, UPID: "UPID:" + op.Node + ":0001:" + op.ID, At: h.at}})
}

func (h *history) finished(info plan.RunInfo, outcome plan.Outcome, outcomes ...plan.OpOutcome) report.Event {
	f := plan.Finished{Outcome: outcome, Operations: outcomes}
	for _, o := range outcomes {
		switch o.State {
		case plan.OpSucceeded:
			f.Succeeded++
		case plan.OpFailed:
			f.Failed++
		default:
			f.Skipped++
		}
	}
	return h.stamp(report.Event{Finished: &plan.FinishedRun{RunInfo: info, Finished: f, At: h.at}})
}

func (h *history) rejected(info plan.RunInfo, reason string, ds ...diag.Diagnostic) report.Event {
	return h.stamp(report.Event{Rejected: &plan.Rejected{RunInfo: info, Rejection: plan.Rejection{Cluster: info.Cluster, Reason: reason, Diagnostics: ds}}})
}

func (h *history) held(info plan.RunInfo, reason string, prunes ...string) report.Event {
	return h.stamp(report.Event{Held: &plan.Held{RunInfo: info, Reason: reason, Prunes: prunes}})
}

func (h *history) confirmed(info plan.RunInfo) report.Event {
	return h.stamp(report.Event{Confirmed: &plan.Confirmation{Cluster: info.Cluster, PlanID: info.PlanID, ConfirmedBy: "cli:ops"}})
}

func (h *history) gaps(cluster string, gs ...inventory.Gap) report.Event {
	return h.stamp(report.Event{Gaps: &inventory.GapReport{Cluster: cluster, Gaps: gs}})
}

// refused is an executor's dead letter of an operation it refused to run.
func (h *history) refused(cluster, node, run, opID, reason string) report.Event {
	return h.stamp(report.Event{Refused: &report.RefusedOperation{Cluster: cluster, Node: node, RunID: run, OpID: opID,
		Action: plan.ActionConfigure, Ref: "VM/db-01", VMID: 102, Reason: reason, Message: "refused: " + reason}})
}

func outcome(op plan.Operation, st plan.OpState, msg string) plan.OpOutcome {
	return plan.OpOutcome{ID: op.ID, Ref: op.Ref, Action: op.Action, State: st, Message: msg}
}

// Operations of a typical plan.
var (
	createWeb = plan.Operation{ID: "op-001", Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Ref: "VM/web-01",
		Action: plan.ActionCreate, Reason: "VM/web-01: not on PVE; will create"}
	startWeb = plan.Operation{ID: "op-002", Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Ref: "VM/web-01",
		Action: plan.ActionStart, Reason: `VM/web-01: power "stopped" → "running"`, DependsOn: []string{"op-001"}}
	configureDB = plan.Operation{ID: "op-003", Node: "pve2", VMID: 102, GuestType: inventory.QEMU, Ref: "VM/db-01",
		Action: plan.ActionConfigure, Reason: "VM/db-01: config drift (memory)"}
	downloadISO = plan.Operation{ID: "op-004", Node: "pve1", Ref: "ISO/debian-12", Action: plan.ActionDownload,
		Reason: "ISO debian-12.iso not present on storage local on pve1; will download"}
	pruneOld = plan.Operation{ID: "op-005", Node: "pve2", VMID: 190, GuestType: inventory.LXC, Ref: "LXC/old-ct",
		Action: plan.ActionDelete, Reason: "present on PVE (proxops-tagged) but absent in git"}
)

var declared = []string{"ISO/debian-12", "LXC/cache", "VM/db-01", "VM/web-01"}

var diskAnomaly = plan.Finding{Kind: plan.FindingAnomaly, Ref: "VM/db-01", Node: "pve2", VMID: 102, Field: "spec.disks[0].size",
	Message: "disk scsi0 would shrink from 40G to 32G; not written"}

var foreignGuest = plan.Finding{Kind: plan.FindingSkipped, Ref: "VM/legacy", Node: "pve1", VMID: 300,
	Message: "live object without proxops tag; never touched"}

var argsGap = inventory.Gap{Setting: inventory.Setting{Kind: "VM", Name: "db-01", Node: "pve2", VMID: 102, Key: "args", Value: "-cpu host"}, Note: "not modelled", Managed: true}
