package report_test

import (
	"slices"
	"testing"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
)

// FuzzFleetFoldsAnySequence folds events picked and ordered by the input, duplicates and reorderings
// included: the fleet never panics, resources stay sorted and unique, and counters match the resources.
func FuzzFleetFoldsAnySequence(f *testing.F) {
	h := newHistory()
	e1 := h.repo("c1", event.TriggerWebhook)
	e2 := h.repo("c2", event.TriggerDrift, "alpha")
	r1 := runInfo("alpha", "c1", "run-1", e1)
	r2 := runInfo("alpha", "c2", "run-2", e2)
	dry := runInfo("alpha", "c2", "", e2)
	dry.DryRun = true
	pool := []report.Event{e1, e2,
		h.planned(r1, plan.Plan{Resources: declared, Operations: []plan.Operation{createWeb, startWeb, pruneOld}, Findings: []plan.Finding{diskAnomaly, foreignGuest}}),
		h.held(r1, "latched", "LXC/old-ct"),
		h.confirmed(r1),
		h.result(r1, createWeb, plan.StatusStarted, ""),
		h.result(r1, createWeb, plan.StatusFailed, "boom"),
		h.result(r1, pruneOld, plan.StatusSucceeded, ""),
		h.finished(r1, plan.OutcomeFailed, outcome(createWeb, plan.OpFailed, "boom"), outcome(startWeb, plan.OpSkipped, "dep"), outcome(pruneOld, plan.OpSucceeded, "")),
		h.planned(r2, plan.Plan{Resources: declared[:2], Operations: []plan.Operation{configureDB}}),
		h.result(r2, configureDB, plan.StatusSucceeded, ""),
		h.finished(r2, plan.OutcomeSucceeded, outcome(configureDB, plan.OpSucceeded, "")),
		h.planned(dry, plan.Plan{Resources: declared, Operations: []plan.Operation{downloadISO}}),
		h.rejected(r2, plan.RejectParse),
		h.gaps("alpha", argsGap),
		h.gaps("beta", argsGap),
	}
	f.Add([]byte{0, 2, 5, 6, 8, 1, 9, 10, 11, 14})
	f.Add([]byte{2, 0, 6, 3, 4, 7, 8, 8, 12, 13, 1})
	f.Fuzz(func(t *testing.T, picks []byte) {
		fl := report.NewFleet()
		for _, p := range picks {
			ev := pool[int(p)%len(pool)]
			if p >= 128 {
				ev.Seq = 0 // not from a stream: never skipped
			}
			fl.Apply(ev)
		}
		for _, s := range fl.Statuses() {
			if !slices.IsSortedFunc(s.Resources, report.CompareResources) {
				t.Fatalf("%s: resources not sorted", s.Cluster)
			}
			if len(slices.CompactFunc(slices.Clone(s.Resources), func(a, b report.Resource) bool { return report.CompareResources(a, b) == 0 })) != len(s.Resources) {
				t.Fatalf("%s: a resource is listed twice", s.Cluster)
			}
			if s.Counters.Objects != len(s.Resources) || s.Counters.Gaps != len(s.Gaps) {
				t.Fatalf("%s: counters %+v for %d resources and %d gaps", s.Cluster, s.Counters, len(s.Resources), len(s.Gaps))
			}
			if !slices.Contains(report.Phases, s.Phase) {
				t.Fatalf("%s: phase %q", s.Cluster, s.Phase)
			}
		}
	})
}
