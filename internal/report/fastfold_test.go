package report_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

// A Fleet folds results in place, yet after every event of a run (started, succeeded, failed and skipped
// results in a shuffled order, duplicates, results of another run, results replayed below the folded
// sequence, a finished run, a next plan) its status is the one Apply computes from the same history.
func TestFleetFoldsResultsInPlaceExactlyAsApply(t *testing.T) {
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, 7))
		h := newHistory()
		repo := h.repo("c1", event.TriggerWebhook)
		r := runInfo("alpha", "c1", "run-1", repo)
		var ops []plan.Operation
		var refs []string
		for i := range 60 {
			ref := fmt.Sprintf("VM/guest-%03d", i)
			op := plan.Operation{ID: fmt.Sprintf("op-%03d", i), Node: fmt.Sprintf("pve%d", i%4), VMID: 1000 + i,
				GuestType: inventory.QEMU, Ref: ref, Action: plan.ActionCreate, Reason: "not on PVE; will create"}
			if i%7 == 6 {
				op.Ref, op.VMID, op.Action, op.DependsOn = ops[i-1].Ref, ops[i-1].VMID, plan.ActionStart, []string{ops[i-1].ID}
			} else {
				refs = append(refs, ref)
			}
			ops = append(ops, op)
		}
		refs = append(refs, "VM/declared-only")
		findings := []plan.Finding{{Kind: plan.FindingAnomaly, Ref: "VM/guest-003", Node: "pve3", VMID: 1003, Message: "would shrink"},
			{Kind: plan.FindingWarning, Ref: "VM/guest-004", Message: "a warning"}}
		events := []report.Event{repo, h.planned(r, plan.Plan{Resources: refs, Operations: ops, Findings: findings})}
		var results []report.Event
		for _, op := range ops {
			final := plan.StatusSucceeded
			switch rng.IntN(6) {
			case 0:
				final = plan.StatusFailed
			case 1:
				final = plan.StatusSkipped
			}
			results = append(results, h.result(r, op, plan.StatusStarted, ""), h.result(r, op, final, "UPID:pve1:0001:x done"))
			if rng.IntN(5) == 0 {
				results = append(results, h.result(r, op, plan.StatusSucceeded, "again"))
			}
		}
		other := r
		other.RunID = "run-0"
		results = append(results, h.result(other, ops[0], plan.StatusFailed, "old run"))
		rng.Shuffle(len(results), func(i, j int) { results[i], results[j] = results[j], results[i] })
		events = append(events, results...)
		replayed := results[len(results)/2]
		events = append(events, replayed, h.finished(r, plan.OutcomeFailed))
		repo2 := h.repo("c2", event.TriggerWebhook)
		r2 := runInfo("alpha", "c2", "run-2", repo2)
		events = append(events, repo2, h.planned(r2, plan.Plan{Resources: refs, Operations: ops[:3]}),
			h.result(r2, ops[0], plan.StatusSucceeded, ""))

		f := report.NewFleet()
		slow := report.New("alpha")
		for i, e := range events {
			f.Apply(e)
			slow, _ = report.Apply(slow, e)
			if i%3 == 0 {
				continue // not every event is looked at: the in-place folds run on an unshared status too
			}
			fast, _ := f.Status("alpha")
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("seed %d, event %d: the fleet's status differs from Apply's:\nfleet: %+v\napply: %+v", seed, i, fast.Report, slow.Report)
			}
		}
		fast, _ := f.Status("alpha")
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("seed %d: final statuses differ", seed)
		}
	}
}
