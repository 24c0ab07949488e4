package status_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/status"
)

// The report of a cluster of 10,000 guests is stored in the status bucket in parts, none of them anywhere
// near the payload limit; it is read back whole (also after a restart, from the bucket) and served on
// /status/<cluster>, and the page stays small.
func TestStatusOfTenThousandGuestsIsStoredAndServed(t *testing.T) {
	const guests = 10000
	sys := startSystem(t)
	p := sys.publisher()
	e := p.repoChanged("c1", "webhook")
	run := runOf("lab", "run-1", e)
	var ops []plan.Operation
	var refs []string
	var outcomes []plan.OpOutcome
	for i := range guests {
		op := plan.Operation{ID: fmt.Sprintf("op-%05d", i), Node: fmt.Sprintf("pve%d", i%40+1), VMID: 1000 + i,
			GuestType: inventory.QEMU, Ref: fmt.Sprintf("VM/guest-%05d", i), Action: plan.ActionCreate,
			Reason: "not on PVE; will create"}
		ops = append(ops, op)
		refs = append(refs, op.Ref)
		outcomes = append(outcomes, done(op, plan.OpSucceeded, ""))
	}
	p.planned(run, plan.Plan{Resources: refs, Operations: ops})
	for _, op := range ops[:50] {
		p.result(run, op, plan.StatusSucceeded, "")
	}
	p.finished(run, plan.OutcomeSucceeded, outcomes...)
	doc := sys.settle()
	served := doc.report(t, "lab")
	if served.Phase != "converged" || len(served.Resources) != guests || served.Counters.ActionsOK != guests {
		t.Fatalf("served: phase %s, %d resources, %d ok", served.Phase, len(served.Resources), served.Counters.ActionsOK)
	}

	ctx := testContext(t)
	var stored int64
	testkit.Eventually(t, 20*time.Second, "the last report to be stored", func() bool {
		st, parts, err := status.ReadStored(ctx, sys.bus, "lab")
		if err != nil {
			t.Fatal(err)
		}
		stored = st.Revision
		return parts > 1 && len(st.Resources) == guests && st.Revision == doc.Clusters[0].Revision
	})
	keys, err := sys.bus.Keys(ctx, bus.BucketStatus)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, _, err := sys.bus.GetBytes(ctx, bus.BucketStatus, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) > 300<<10 {
			t.Errorf("%s: a value of %d bytes", k, len(v))
		}
	}
	if clusters, err := status.StoredClusters(ctx, sys.bus); err != nil || len(clusters) != 1 || clusters[0] != "lab" {
		t.Fatalf("stored clusters: %v, %v", clusters, err)
	}

	sys.restartService()
	again := sys.settle()
	if again.Clusters[0].Revision != stored || len(again.report(t, "lab").Resources) != guests {
		t.Fatalf("after a restart: revision %d (stored %d), %d resources", again.Clusters[0].Revision, stored,
			len(again.report(t, "lab").Resources))
	}
	code, body := sys.get("/status/lab")
	if code != http.StatusOK || strings.Count(string(body), `"kind": "VM"`) != guests {
		t.Fatalf("/status/lab: %d, %d VMs", code, strings.Count(string(body), `"kind": "VM"`))
	}
	code, page := sys.get("/")
	if code != http.StatusOK || len(page) > 512<<10 || !strings.Contains(string(page), "and 9800 more resources") {
		t.Fatalf("page: %d, %d bytes", code, len(page))
	}
}
