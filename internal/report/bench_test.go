package report_test

import (
	"fmt"
	"testing"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

// BenchmarkFleetFoldsARunOf200Operations folds a plan of 200 creates, a started and a succeeded result for
// each, and the finished run: what the status service does for one large apply.
func BenchmarkFleetFoldsARunOf200Operations(b *testing.B) {
	h := newHistory()
	e := h.repo("c1", event.TriggerWebhook)
	r := runInfo("alpha", "c1", "run-1", e)
	var ops []plan.Operation
	var declared []string
	var outcomes []plan.OpOutcome
	for i := range 200 {
		op := plan.Operation{ID: fmt.Sprintf("op-%03d", i), Node: fmt.Sprintf("pve%d", i%4), VMID: 1000 + i,
			GuestType: inventory.QEMU, Ref: fmt.Sprintf("VM/guest-%03d", i), Action: plan.ActionCreate, Reason: "not on PVE; will create"}
		ops = append(ops, op)
		declared = append(declared, op.Ref)
		outcomes = append(outcomes, outcome(op, plan.OpSucceeded, ""))
	}
	events := []report.Event{e, h.planned(r, plan.Plan{Resources: declared, Operations: ops})}
	for _, op := range ops {
		events = append(events, h.result(r, op, plan.StatusStarted, ""), h.result(r, op, plan.StatusSucceeded, ""))
	}
	events = append(events, h.finished(r, plan.OutcomeSucceeded, outcomes...))
	b.ReportAllocs()
	for b.Loop() {
		f := report.NewFleet()
		for _, ev := range events {
			f.Apply(ev)
		}
	}
	b.ReportMetric(float64(len(events)), "events/op")
}
