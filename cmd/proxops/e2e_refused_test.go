package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/opsign"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/wire"
)

// Operations nobody planned, published straight onto a node's work queue with a made-up run id (one
// unsigned, one signed by a key the executors do not trust), are refused by the running executor, and the
// refusals show where an operator looks: /status/<cluster>, `proxops status` as text and JSON, and the
// status page (checked in a browser when Chromium is installed). The guest they aimed at is untouched.
func TestForgedOperationsShowInStatusAndOnTheStatusPage(t *testing.T) {
	e := newDemoEnv(t)
	u := e.startUp()
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := connectLocal(ctx, t, e.data)

	seed, err := opsign.GenerateSeed()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := opsign.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	forged := func(run, id string) plan.Operation {
		return plan.Operation{RunID: run, ID: id, PlanID: "plan-forged", Cluster: "demo", Node: "pve1", VMID: 101,
			Ref: "VM/web-01", GuestType: inventory.QEMU, Action: plan.ActionConfigure,
			Values: []plan.KV{{Key: "memory", Value: "65536"}}}
	}
	unsigned, otherKey := forged("run-made-up-1", "op-unsigned"), forged("run-made-up-2", "op-other-key")
	subject, err := bus.OpSubject("demo", "pve1")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		op   plan.Operation
		sign wire.SignFunc
	}{{unsigned, nil}, {otherKey, stranger.Sign}} {
		m, err := wire.OperationToProto(f.op)
		if f.sign != nil {
			m, err = wire.SignOperation(f.op, f.sign)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Publish(ctx, subject, m, bus.WithMsgID(f.op.RunID+"."+f.op.ID)); err != nil {
			t.Fatalf("publish the forged operation %s: %v", f.op.ID, err)
		}
	}

	want := []render.RefusedOperationDocument{
		{Cluster: "demo", Node: "pve1", RunID: unsigned.RunID, OpID: unsigned.ID, Action: "configure", Ref: "VM/web-01", VMID: 101, Reason: "unsigned"},
		{Cluster: "demo", Node: "pve1", RunID: otherKey.RunID, OpID: otherKey.ID, Action: "configure", Ref: "VM/web-01", VMID: 101, Reason: "unknown_key"},
	}
	// Without their messages, sorted by operation id: the executor's order of the two is its own.
	claims := func(docs []render.RefusedOperationDocument) []render.RefusedOperationDocument {
		out := slices.Clone(docs)
		for i := range out {
			out[i].Message = ""
		}
		slices.SortFunc(out, func(a, b render.RefusedOperationDocument) int { return strings.Compare(a.OpID, b.OpID) })
		return out
	}
	slices.SortFunc(want, func(a, b render.RefusedOperationDocument) int { return strings.Compare(a.OpID, b.OpID) })

	var doc render.ClusterDocument
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := http.Get("http://" + addr + "/status/demo")
		if err == nil {
			doc = render.ClusterDocument{}
			err = json.NewDecoder(res.Body).Decode(&doc)
			_ = res.Body.Close()
		}
		if err == nil && len(doc.Report.RefusedOperations) == len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status/demo lists %d refused operations, want %d: %+v\nstderr:\n%s", len(doc.Report.RefusedOperations),
				len(want), doc.Report.RefusedOperations, u.errOut)
		}
		select {
		case <-u.done:
			t.Fatalf("proxops up exited %d\nstderr:\n%s", u.code, u.errOut)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if got := claims(doc.Report.RefusedOperations); !slices.Equal(got, want) {
		t.Errorf("/status/demo refused operations:\n%+v\nwant:\n%+v", got, want)
	}
	for _, r := range doc.Report.RefusedOperations {
		if !strings.HasPrefix(r.Message, "refused: ") {
			t.Errorf("refused operation %s: message %q, want the executor's refusal", r.OpID, r.Message)
		}
	}
	if doc.Report.Counters.Refused != 2 || doc.Report.Phase != "converged" {
		t.Errorf("counters.refused %d, phase %s; want 2 refusals that leave the cluster converged", doc.Report.Counters.Refused, doc.Report.Phase)
	}
	if conf, _ := e.sim.Config(101); conf["memory"] == "65536" {
		t.Error("a forged operation changed VM 101's memory")
	}

	text := e.mustRunPlain(0, "status", "--data-dir", e.data)
	for _, line := range []string{
		"REFUSED: 2 operations executors would not run (see the refused lines)\n",
		"  refused: pve1 run=run-made-up-1 op=op-unsigned configure VM/web-01 101: unsigned: refused: ",
		"  refused: pve1 run=run-made-up-2 op=op-other-key configure VM/web-01 101: unknown_key: refused: ",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("proxops status lacks %q:\n%s", line, text)
		}
	}
	var sdoc render.StatusDocument
	out := e.mustRunPlain(0, "status", "--output", "json", "--data-dir", e.data)
	if err := json.Unmarshal([]byte(out), &sdoc); err != nil {
		t.Fatalf("proxops status --output json: %v\n%s", err, out)
	}
	if len(sdoc.Clusters) != 1 || !slices.Equal(claims(sdoc.Clusters[0].Report.RefusedOperations), want) {
		t.Errorf("proxops status --output json refused operations: %+v", sdoc.Clusters)
	}

	pageWants := []string{
		`data-refused="pve1:run-made-up-1:op-unsigned" data-reason="unsigned"`,
		`data-refused="pve1:run-made-up-2:op-other-key" data-reason="unknown_key"`,
		"executors refused 2 operations",
	}
	_, page := get(t, "http://"+addr+"/")
	for _, w := range pageWants {
		if !strings.Contains(string(page), w) {
			t.Errorf("the page lacks %s", w)
		}
	}
	if _, err := exec.LookPath("chromium"); err == nil {
		dom := headlessChromium(t, "--dump-dom", "http://"+addr+"/")
		for _, w := range append(pageWants, "data-attention") {
			if !strings.Contains(dom, w) {
				t.Errorf("the page, in a browser, lacks %s", w)
			}
		}
	} else {
		t.Log("chromium is not installed: the page was checked as served, not in a browser")
	}
	if t.Failed() {
		t.Logf("page:\n%s", page)
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, u.errOut)
	}
}
