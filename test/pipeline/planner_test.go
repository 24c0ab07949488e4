package pipeline_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testcorpus"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/planner"
)

// A repository event is planned against a fresh observe, run through the executors in dependency order,
// and finished; every created guest is recorded as owned with the identity its result reports. The next
// event on the unchanged repository plans nothing.
func TestApplyCreatesGuestsAndRecordsTheirIdentity(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101, "web-02": 102, "db-01": 103})
	o := e.apply(files)
	if f := o.last(); f.Succeeded != 3 || f.Failed != 0 {
		t.Fatalf("run: %+v", f.Finished)
	}
	for _, vmid := range []int{101, 102, 103} {
		if !e.sim.Exists(vmid) {
			t.Fatalf("guest %d not created", vmid)
		}
	}
	owned := e.owned()
	if len(owned) != 3 {
		t.Fatalf("owned records: %+v", owned)
	}
	for vmid, o := range owned {
		cfg, _ := e.sim.Config(vmid)
		if !strings.HasPrefix(o.Fingerprint, "uuid=") || !strings.Contains(strings.ToLower(cfg["smbios1"]), strings.TrimPrefix(o.Fingerprint, "uuid=")) {
			t.Fatalf("record of %d: fingerprint %q, live smbios1 %q", vmid, o.Fingerprint, cfg["smbios1"])
		}
	}
	creates := e.creates()
	again := e.apply(files)
	if n := len(again.planned[0].Plan.Operations); n != 0 {
		t.Fatalf("converged repository planned %d operations: %+v", n, again.planned[0].Plan.Operations)
	}
	if e.creates() != creates {
		t.Fatal("a converged plan created guests")
	}
}

// A repository with an error is rejected with every diagnostic, and nothing reaches PVE but reads.
func TestBrokenRepositoryIsRejectedWithEveryDiagnosticAndWritesNothing(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101, "web-02": 101})
	files["vm/lab/web-03.yaml"] = vm("web-03", 103, "pve9")
	files["clusters/lab/resources.yaml"] += "  - ../../vm/lab/web-03.yaml\n"
	ev := e.announce(files, false)
	o := e.wait(ev, time.Minute)
	if len(o.rejected) != 1 || len(o.planned) != 0 {
		t.Fatalf("want one rejection and no plan, got %+v", o)
	}
	r := o.rejected[0].Rejection
	text := r.Diagnostics.Error()
	if r.Reason != plan.RejectParse || !strings.Contains(text, "101") || !strings.Contains(text, "pve9") {
		t.Fatalf("rejection %s:\n%s", r.Reason, text)
	}
	if n := e.writes(); n != 0 {
		t.Fatalf("%d writes reached PVE", n)
	}
}

// A dry-run event publishes the plan and finishes it as not applied, without a lease; a cluster suspended in
// its config or at run time is planned and shown, and nothing is applied either.
func TestDryRunsAndSuspendedClustersApplyNothing(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})

	dry := e.wait(e.announce(files, true), time.Minute)
	if len(dry.planned) != 1 || !dry.planned[0].DryRun || len(dry.planned[0].Plan.Operations) != 1 ||
		!strings.HasPrefix(dry.planned[0].RunID, "dry-") || dry.last().Outcome != plan.OutcomeNotApplied {
		t.Fatalf("dry run: %+v", dry)
	}

	suspended := e.vms(map[string]int{"web-01": 101})
	suspended["clusters/lab/config.yaml"] = e.lab("      suspend: true\n")
	o := e.wait(e.announce(suspended, false), time.Minute)
	if len(o.planned) != 1 || !o.planned[0].Suspended || o.last().Outcome != plan.OutcomeNotApplied {
		t.Fatalf("suspended in config: %+v", o)
	}

	if changed, err := planner.SetSuspended(testContext(t), e.bus, cluster, true, "test"); err != nil || !changed {
		t.Fatalf("suspend: %v, %v", changed, err)
	}
	o = e.wait(e.announce(files, false), time.Minute)
	if len(o.planned) != 1 || !o.planned[0].Suspended || o.last().Outcome != plan.OutcomeNotApplied {
		t.Fatalf("suspended at run time: %+v", o)
	}
	if n := e.writes(); n != 0 {
		t.Fatalf("%d writes reached PVE while nothing was to be applied", n)
	}

	if changed, err := planner.SetSuspended(testContext(t), e.bus, cluster, false, "test"); err != nil || !changed {
		t.Fatalf("resume: %v, %v", changed, err)
	}
	e.apply(files)
	if !e.sim.Exists(101) {
		t.Fatal("resumed cluster not applied")
	}
}

// Removing manifests from git prunes exactly the guests ProxOps created and recorded; a guest cloned by hand
// from a managed one carries the tag but no record and is never pruned. Pruning three of four owned VMs
// is held until a confirmation carrying the plan's content id arrives; a confirmation of another plan
// releases nothing.
func TestMassPruneIsHeldUntilItsOwnPlanIsConfirmed(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	all := map[string]int{"a-01": 101, "b-02": 102, "c-03": 103, "d-04": 104}
	e.apply(e.vms(all))
	node, _, _ := e.sim.NodeOf(101)
	e.handClone(node, 101, 201)

	ev := e.announce(e.vms(map[string]int{"a-01": 101}), false)
	var o outcome
	testkit.Eventually(t, time.Minute, "the prune plan to be held", func() bool {
		o = e.events(ev.EventID)
		return len(o.held) == 1
	})
	pl := o.planned[0].Plan
	if !pl.Held || len(pl.HeldPrunes) != 3 {
		t.Fatalf("plan: held %v, prunes %v", pl.Held, pl.HeldPrunes)
	}
	if err := planner.Confirm(testContext(t), e.bus, cluster, "0123456789abcdef", "test"); err != nil {
		t.Fatal(err)
	}
	// Give the held run many chances to misread the confirmation of another plan.
	time.Sleep(time.Second)
	if o := e.events(ev.EventID); o.done() || !e.sim.Exists(102) {
		t.Fatalf("a confirmation of another plan released the held plan: %+v", o.finished)
	}
	if err := planner.Confirm(testContext(t), e.bus, cluster, pl.ID, "test"); err != nil {
		t.Fatal(err)
	}
	o = e.wait(ev, time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded {
		t.Fatalf("confirmed run: %+v", f)
	}
	for vmid, want := range map[int]bool{101: true, 102: false, 103: false, 104: false, 201: true} {
		if e.sim.Exists(vmid) != want {
			t.Fatalf("guest %d exists %v, want %v", vmid, !want, want)
		}
	}
	if owned := e.owned(); len(owned) != 1 || owned[101].Ref != "VM/a-01" {
		t.Fatalf("ownership inventory after the prune: %+v", owned)
	}
	// The hand-made clone stays reported, never touched, on every later plan.
	again := e.apply(e.vms(map[string]int{"a-01": 101}))
	for _, op := range again.planned[0].Plan.Operations {
		if op.VMID == 201 {
			t.Fatalf("plan touches the hand-made clone: %+v", op)
		}
	}
}

// A newer commit arriving during an apply supersedes the operations not dispatched yet; those in flight
// finish; the cluster then ends in the state of the newest commit.
func TestNewerCommitSupersedesARunningPlanAndWins(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(time.Second)}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	first := e.vms(map[string]int{"a": 101, "b": 102, "c": 103, "d": 104, "e": 105, "f": 106})
	// Each VM waits for the previous one: most operations are not dispatched when the next commit comes.
	chain(first, "a", "b", "c", "d", "e", "f")
	ev1 := e.announce(first, false)
	testkit.Eventually(t, time.Minute, "the first plan's first create to reach PVE", func() bool { return e.creates() == 1 })
	second := e.vms(map[string]int{"a": 101, "b": 102, "c": 103, "g": 107})
	for p, c := range second {
		second[p] = strings.Replace(c, "memory: 512MiB", "memory: 1GiB", 1)
	}
	ev2 := e.announce(second, false)
	o1 := e.wait(ev1, time.Minute)
	if f := o1.last(); f.Outcome != plan.OutcomeSuperseded || f.Superseded == 0 || f.Succeeded == 0 {
		t.Fatalf("first run: %s, %d succeeded, %d superseded: %+v", f.Outcome, f.Succeeded, f.Superseded, f.Operations)
	}
	o2 := e.wait(ev2, time.Minute)
	if f := o2.last(); f.Outcome != plan.OutcomeSucceeded {
		t.Fatalf("second run: %+v", f)
	}
	for vmid, want := range map[int]bool{101: true, 102: true, 103: true, 104: false, 105: false, 106: false, 107: true} {
		if e.sim.Exists(vmid) != want {
			t.Fatalf("guest %d exists %v, want %v", vmid, !want, want)
		}
	}
	for _, vmid := range []int{101, 102, 103, 107} {
		if cfg, _ := e.sim.Config(vmid); cfg["memory"] != "1024" {
			t.Fatalf("guest %d memory %s, want the newest commit's 1024", vmid, cfg["memory"])
		}
	}
}

// A failed operation fails its run; the next run of the same repository dispatches it again under its
// new run id and it succeeds.
func TestFailedOperationIsRetriedByTheNextRun(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	refuse := pvesim.ErrorFault{Method: "POST", Path: "/nodes/{node}/qemu", Rate: 1, Status: 400, Message: "injected refusal"}
	if err := e.sim.SetFaults(pvesim.Faults{Errors: []pvesim.ErrorFault{refuse}}); err != nil {
		t.Fatal(err)
	}
	files := e.vms(map[string]int{"web-01": 101})
	o := e.wait(e.announce(files, false), time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeFailed || f.Failed != 1 || e.sim.Exists(101) {
		t.Fatalf("run with a failing create: %+v", f)
	}
	e.sim.ClearFaults()
	again := e.apply(files)
	if again.last().RunID == o.last().RunID || !e.sim.Exists(101) {
		t.Fatalf("retry run %s after %s; guest exists %v", again.last().RunID, o.last().RunID, e.sim.Exists(101))
	}
}

// A planner that stops in the middle of a run hands the cluster over: another replica reloads the open run
// from the streams and finishes it, and every guest is created once.
func TestAnotherPlannerCarriesOnTheRunOfOneThatStopped(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(400 * time.Millisecond), "qmstart": pvesim.Duration(400 * time.Millisecond)}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	stopA := e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"a": 101, "b": 102, "c": 103, "d": 104})
	chain(files, "a", "b", "c", "d")
	ev := e.announce(files, false)
	testkit.Eventually(t, time.Minute, "the second create to reach PVE", func() bool { return e.creates() == 2 })
	e.startPlanner(e.plannerConfig("b"))
	stopA()
	o := e.wait(ev, time.Minute)
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != 4 {
		t.Fatalf("run: %+v", f)
	}
	if n := e.creates(); n != 4 {
		t.Fatalf("%d creates for 4 guests", n)
	}
	if len(o.planned) != 1 || len(o.finished) != 1 {
		t.Fatalf("the run was published %d times and finished %d times", len(o.planned), len(o.finished))
	}
}

// A planner that takes over an open run reads the results stored so far before it dispatches anything: an
// operation that already succeeded is never published again (the duplicate window would hide a second
// publication only for a while), which a plain subscriber on the work subjects sees.
func TestResumedRunPublishesNoOperationAgain(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(400 * time.Millisecond), "qmstart": pvesim.Duration(400 * time.Millisecond)}
	e := newEnv(t, spec)
	opSubject, err := bus.OpSubject(cluster, "pve1")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := e.bus.Conn().SubscribeSync(opSubject[:strings.LastIndexByte(opSubject, '.')+1] + "*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := e.bus.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	e.startExecutors("pve1", "pve2", "pve3")
	stopA := e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"a": 101, "b": 102, "c": 103, "d": 104})
	chain(files, "a", "b", "c", "d")
	ev := e.announce(files, false)
	// The second create reaching PVE means the first one succeeded.
	testkit.Eventually(t, time.Minute, "the second create to reach PVE", func() bool { return e.creates() == 2 })
	stopA()
	e.startPlanner(e.plannerConfig("b"))
	o := e.wait(ev, time.Minute)
	f := o.last()
	if f.Outcome != plan.OutcomeSucceeded || f.Succeeded != 4 {
		t.Fatalf("run: %+v", f)
	}
	published := map[string]int{}
	for {
		m, err := sub.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		published[m.Header.Get("Nats-Msg-Id")]++
	}
	if len(published) != f.Succeeded {
		t.Errorf("%d operations published for a run of %d: %v", len(published), f.Succeeded, published)
	}
	for id, n := range published {
		if n != 1 {
			t.Errorf("operation %s published %d times", id, n)
		}
	}
}

// A shared storage is listed once per cluster, on the first node that holds it, however many nodes an
// artifact on it is placed on: on a cluster's first plan (no inventory tells yet what is shared) as on later
// ones. One converged observe of K nodes, G guests (VMs without a cloud-init drive here) and S storages
// holding artifacts costs at most 4K + G + S + 2 requests (the 2: the cluster's pools).
func TestSharedStorageIsListedOncePerCluster(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Storages = append(spec.Storages, pvesim.StorageSpec{ID: "nfs", Type: "nfs", Content: []string{"iso", "vztmpl", "import"}, Shared: true})
	spec.Files = []pvesim.FileSpec{{VolID: "nfs:iso/installer-1.0.iso", Size: 4096}}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"a": 101, "b": 102, "c": 103})
	files["iso/lab/installer.yaml"] = `apiVersion: proxops/v1alpha1
kind: ISO
metadata: {name: installer}
spec:
  nodes: [pve1, pve2, pve3]
  storage: nfs
  filename: installer-1.0.iso
  url: https://mirror.example.invalid/installer-1.0.iso
  checksum: {algorithm: sha256, value: "0000000000000000000000000000000000000000000000000000000000000000"}
`
	files["clusters/lab/resources.yaml"] += "  - ../../iso/lab/installer.yaml\n"
	listings := func() []string {
		var out []string
		for _, r := range e.sim.Requests() {
			if r.Method == "GET" && r.Template == "/nodes/{node}/storage/{storage}/content" {
				out = append(out, r.Params["node"]+"/"+r.Params["storage"])
			}
		}
		return out
	}
	e.sim.ResetLog()
	first := e.wait(e.announce(files, true), time.Minute)
	if len(first.planned) != 1 {
		t.Fatalf("first plan: %+v", first)
	}
	if got := listings(); !slices.Equal(got, []string{"pve1/nfs"}) {
		t.Fatalf("first plan listed %v; want nfs once, on pve1", got)
	}
	e.apply(files)
	e.sim.ResetLog()
	second := e.wait(e.announce(files, true), time.Minute)
	if len(second.planned) != 1 || !second.planned[0].Plan.Empty() {
		t.Fatalf("the converged plan is not empty: %+v", second)
	}
	if got := listings(); !slices.Equal(got, []string{"pve1/nfs"}) {
		t.Fatalf("converged plan listed %v; want nfs once, on pve1", got)
	}
	// Per node 4 listings, per guest its pending values, per listed storage its content, and per cluster its
	// pools (GET /pools and the cluster resources, asked of one node).
	const k, g, storages, pools = 3, 3, 1, 2
	if n := len(e.sim.Requests()); n > 4*k+g+storages+pools {
		t.Fatalf("%d requests for a converged observe; at most 4K + G + S + 2 = %d: %v", n, 4*k+g+storages+pools, e.sim.Counts())
	}
}

// The predecessor's example repository validates and composes, but its secrets file is encrypted to a key
// that no longer exists: its plan is rejected with a diagnostic naming the file, and nothing is observed
// or written.
func TestUndecryptableSecretsRejectTheClusterBeforeAnyPVECall(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Nodes = []pvesim.NodeSpec{{Name: "pve01"}, {Name: "pve02"}}
	e := newEnv(t, spec)
	e.startExecutorsOf("example", "pve01", "pve02")
	e.startPlanner(e.plannerConfig("a"))
	files := readRepo(t, testcorpus.Dir("upstream-examples"))
	files["clusters/example/config.yaml"] = strings.Replace(files["clusters/example/config.yaml"],
		"https://pve.example.invalid:8006", e.srv.URL, 1)
	e.sim.ResetLog()
	ev := e.announce(files, false)
	o := e.waitOf("example", ev, time.Minute)
	if len(o.rejected) != 1 || len(o.planned) != 0 {
		t.Fatalf("want a rejection: %+v", o)
	}
	r := o.rejected[0].Rejection
	text := r.Diagnostics.Error()
	if r.Reason != plan.RejectSecrets || !strings.Contains(text, "clusters/example/secrets.sops.yaml") {
		t.Fatalf("rejection %s:\n%s", r.Reason, text)
	}
	if n := len(e.sim.Requests()); n != 0 {
		t.Fatalf("%d requests reached PVE", n)
	}
}

// One cluster whose nodes do not answer is rejected (fail closed); another cluster of the same event is
// planned and applied regardless.
func TestOneClustersFailureDoesNotHoldAnother(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	// Cluster "dark" has no executor running: its observe gets no answer.
	files["clusters/dark/config.yaml"] = strings.Replace(e.lab(""), "lab:", "dark:", 1)
	files["clusters/dark/config.yaml"] = strings.Replace(files["clusters/dark/config.yaml"], e.srv.URL, "https://dark.example.invalid:8006", 1)
	files["clusters/dark/resources.yaml"] = "resources:\n  - ../../vm/dark/x.yaml\n"
	files["vm/dark/x.yaml"] = vm("x", 500, "pve1")
	ev := e.announce(files, false)
	dark := e.waitOf("dark", ev, time.Minute)
	if len(dark.rejected) != 1 || dark.rejected[0].Rejection.Reason != plan.RejectObserve {
		t.Fatalf("dark cluster: %+v", dark)
	}
	lab := e.wait(ev, time.Minute)
	if f := lab.last(); f.Outcome != plan.OutcomeSucceeded || !e.sim.Exists(101) {
		t.Fatalf("lab cluster: %+v", f)
	}
}

// A cluster without a node allowlist is observed on every node PVE lists, learned through the executor
// of a node its manifests name: a guest on an unnamed node is seen (and reported, not touched).
func TestClusterWithoutAllowlistIsObservedOnEveryNodePVELists(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 300, Type: "qemu", Node: "pve3", Config: "name: foreign\nmemory: 512\n"}}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	files["clusters/lab/config.yaml"] = strings.Replace(files["clusters/lab/config.yaml"], "      nodes: [pve1, pve2, pve3]\n", "", 1)
	o := e.apply(files)
	pl := o.planned[0].Plan
	found := false
	for _, f := range pl.Findings {
		found = found || (f.VMID == 300 && f.Node == "pve3")
	}
	if !found || !e.sim.Exists(101) {
		t.Fatalf("findings %+v", pl.Findings)
	}
}

// A cluster without a node allowlist whose manifests name no node any more is observed through the nodes its
// owned guests are on: the guest dropped from the repository is found, and its prune planned.
func TestClusterWithoutAllowlistIsObservedThroughTheNodesOfItsOwnedGuests(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	withoutAllowlist := func(files repoFiles) repoFiles {
		files["clusters/lab/config.yaml"] = strings.Replace(files["clusters/lab/config.yaml"], "      nodes: [pve1, pve2, pve3]\n", "", 1)
		return files
	}
	e.apply(withoutAllowlist(e.vms(map[string]int{"web-01": 101})))
	if !e.sim.Exists(101) {
		t.Fatal("web-01 was not created")
	}
	// Without the executors' published inventories, the ownership record is what names a node.
	inventories, err := e.bus.JetStream().Stream(testContext(t), bus.StreamInventory)
	if err == nil {
		err = inventories.Purge(testContext(t))
	}
	if err != nil {
		t.Fatal(err)
	}
	dry := e.wait(e.announce(withoutAllowlist(e.vms(map[string]int{})), true), time.Minute)
	if len(dry.planned) == 0 {
		t.Fatalf("no plan: %+v", dry.last())
	}
	pl := dry.planned[0].Plan
	pruned := slices.Contains(pl.HeldPrunes, "VM/web-01")
	for _, op := range pl.Operations {
		pruned = pruned || (op.Action == plan.ActionDelete && op.VMID == 101)
	}
	if !pruned {
		t.Fatalf("the prune of web-01 is not planned: operations %+v, held prunes %v", pl.Operations, pl.HeldPrunes)
	}
}

// A plan-only planner (what proxops diff runs) plans dry runs and records apply requests, but never takes
// a lease: the apply waits for a planner that drives clusters.
func TestPlanOnlyPlannerRecordsAppliesButNeverDrives(t *testing.T) {
	e := newEnv(t, pvesim.DefaultSpec())
	e.startExecutors("pve1", "pve2", "pve3")
	cfg := e.plannerConfig("diff")
	cfg.PlanOnly = true
	e.startPlanner(cfg)
	files := e.vms(map[string]int{"web-01": 101})
	if dry := e.wait(e.announce(files, true), time.Minute); dry.last().Outcome != plan.OutcomeNotApplied {
		t.Fatalf("dry run: %+v", dry.last())
	}
	ev := e.announce(files, false)
	testkit.Eventually(t, time.Minute, "the apply request to be recorded", func() bool {
		ctl, err := planner.Control(testContext(t), e.bus, cluster)
		return err == nil && ctl.Pending()
	})
	time.Sleep(500 * time.Millisecond)
	key, _ := bus.LeaseKey(cluster)
	if _, held, _ := e.bus.LeaseHolder(testContext(t), key); held || len(e.events(ev.EventID).planned) != 0 || e.sim.Exists(101) {
		t.Fatal("a plan-only planner drove the cluster")
	}
	e.startPlanner(e.plannerConfig("a"))
	if o := e.wait(ev, time.Minute); o.last().Outcome != plan.OutcomeSucceeded || !e.sim.Exists(101) {
		t.Fatalf("apply by the driving planner: %+v", o.last())
	}
}

// With a deployment's per-service NATS users, the planner and the executors do everything an apply needs
// under their own permissions (a denied call would show up as a timeout).
func TestApplyRunsUnderTheServicesOwnNATSPermissions(t *testing.T) {
	services, err := bus.ServiceUsers([]bus.ClusterNodes{{Cluster: cluster, Nodes: []string{"pve1", "pve2", "pve3"}}})
	if err != nil {
		t.Fatal(err)
	}
	var users []bus.User
	for _, u := range services {
		users = append(users, bus.User{Name: u.Name, Password: "pw-" + u.Name, Permissions: u.Permissions})
	}
	e := newEnvUsers(t, pvesim.DefaultSpec(), users)
	e.startAsServiceUsers("restricted", 3*time.Second)
	files := e.vms(map[string]int{"web-01": 101, "web-02": 102})
	e.apply(files)
	if len(e.owned()) != 2 {
		t.Fatalf("owned: %+v", e.owned())
	}
	if dry := e.wait(e.announce(files, true), time.Minute); len(dry.planned) != 1 || len(dry.planned[0].Plan.Operations) != 0 {
		t.Fatalf("dry run: %+v", dry)
	}
}
