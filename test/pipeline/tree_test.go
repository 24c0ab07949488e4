package pipeline_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
)

// A tree object whose content does not hash to the name it is stored under (written by whoever could write
// the store) is refused: the plan is rejected with a diagnostic naming the tree, and nothing reaches PVE.
func TestPlannerRefusesATreeWhoseContentDoesNotMatchItsName(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	honest := testkit.Snapshot(e.vms(map[string]int{"web-01": 101}))
	forged := testkit.Snapshot(e.vms(map[string]int{"web-01": 101, "web-02": 102}))
	forged.Tree = honest.Tree
	for _, store := range []string{bus.ObjectPreviews, bus.ObjectTrees} {
		t.Run(store, func(t *testing.T) {
			if _, err := e.bus.PutObjectIfAbsent(testContext(t), store, honest.Tree, wire.TreeSnapshotToProto(forged)); err != nil {
				t.Fatal(err)
			}
			e.seq++
			ev := event.RepoChanged{Repo: "/srv/ops", Branch: "main", Commit: fmt.Sprintf("%040d", e.seq), Tree: honest.Tree,
				Trigger: event.TriggerPoll, EventID: fmt.Sprintf("/srv/ops@%d", e.seq), Clusters: []string{cluster}}
			m, err := wire.RepoChangedToProto(ev)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.bus.Publish(testContext(t), bus.SubjectRepoChanged, m, bus.WithMsgID(ev.EventID)); err != nil {
				t.Fatal(err)
			}
			o := e.wait(ev, time.Minute)
			if len(o.rejected) != 1 || len(o.planned) != 0 {
				t.Fatalf("outcome of a tampered tree: %+v, want one rejection and no plan", o)
			}
			rej := o.rejected[0].Rejection
			if rej.Reason != plan.RejectInternal || len(rej.Diagnostics) != 1 ||
				!strings.Contains(rej.Diagnostics[0].Message, "tree snapshot "+honest.Tree+" was altered") {
				t.Fatalf("rejection %+v, want a diagnostic naming the altered tree %s", rej, honest.Tree)
			}
			if e.sim.Exists(101) || e.sim.Exists(102) {
				t.Fatal("a guest was created from a tampered tree")
			}
		})
	}
}
