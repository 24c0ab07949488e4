package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/planner"
)

// r4Seeds are the seeds R4 runs: three, or PROXOPS_R4_SEEDS of them.
func r4Seeds(t *testing.T) []uint64 {
	n := 3
	if v := os.Getenv("PROXOPS_R4_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("PROXOPS_R4_SEEDS=%q: want a positive number", v)
		}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(1000 + 37*i)
	}
	return out
}

// pveRequest sends a request to the simulator as an operator would, by hand.
func (e *env) pveRequest(method, path string, form url.Values) {
	e.t.Helper()
	if err := e.sim.AdminRequest(method, path, form); err != nil {
		e.t.Fatalf("by hand: %v", err)
	}
}

// settled waits until a guest exists (or not) and carries no lock.
func (e *env) settled(vmid int, exists bool) {
	e.t.Helper()
	testkit.Eventually(e.t, 30*time.Second, fmt.Sprintf("guest %d to settle", vmid), func() bool {
		cfg, ok := e.sim.Config(vmid)
		return ok == exists && cfg["lock"] == ""
	})
}

// r4World is one seeded live cluster and the repository that manages part of it.
type r4World struct {
	e *env
	r *rand.Rand
	// declared is what the repository declares now: path → manifest.
	declared map[string]string
	// budget is the cluster's prune-budget (0: unlimited).
	budget int
	// untouchable are the guests ProxOps must never delete: untagged, foreign-tagged, pveconform, hand-made.
	untouchable map[int]string
	nextVMID    int
}

func (w *r4World) repo() repoFiles {
	return w.e.manifests(fmt.Sprintf("      prune-budget: %d\n", w.budget), w.declared)
}

// ownedNow is, from the live cluster and the ownership inventory, what ProxOps may delete: every guest that
// carries the proxops tag and has a record whose fingerprint is its live identity, with the record's kind.
func (w *r4World) ownedNow() map[int]manifest.Kind {
	out := map[int]manifest.Kind{}
	for vmid, rec := range w.e.owned() {
		cfg, ok := w.e.sim.Config(vmid)
		if !ok || !pveformat.Owned(cfg["tags"]) {
			continue
		}
		if rec.Fingerprint == "" || rec.Fingerprint != w.e.liveFingerprint(vmid) {
			continue
		}
		ref, ok := manifest.ParseRef(rec.Ref)
		if !ok {
			w.e.t.Fatalf("ownership record of %d names %q", vmid, rec.Ref)
		}
		out[vmid] = ref.Kind
	}
	return out
}

func (w *r4World) declaredVMIDs() map[int]bool {
	out := map[int]bool{}
	for p := range w.declared {
		name := p[strings.LastIndexByte(p, '/')+1:]
		name = strings.TrimSuffix(name, ".yaml")
		if i := strings.LastIndexByte(name, '-'); i >= 0 {
			if v, err := strconv.Atoi(name[i+1:]); err == nil {
				out[v] = true
			}
		}
	}
	return out
}

func (w *r4World) addVM(vmid int) {
	name := fmt.Sprintf("vm-%d", vmid)
	w.declared["vm/lab/"+name+".yaml"] = vmManifest(name, vmid, w.e.nodes[w.r.IntN(len(w.e.nodes))], 512)
}

func (w *r4World) addCT(vmid int) {
	name := fmt.Sprintf("ct-%d", vmid)
	w.declared["lxc/lab/"+name+".yaml"] = lxcManifest(name, vmid, w.e.nodes[w.r.IntN(len(w.e.nodes))])
}

// R4 through the pipeline: seeded random live clusters hold untagged, foreign-tagged, pveconform-tagged and
// hand-made guests (clones of managed guests, a managed vmid deleted and re-created by hand) beside the
// guests ProxOps owns. Round after round the repository drops a random share of what it declares (and
// declares a few new guests). Through NATS, the planner and the executors: no DELETE ever reaches a guest
// that is not both tagged and recorded with its live identity, every untouchable guest survives, and a plan
// that would prune more than half of a kind's owned guests (and at least three) is held and deletes nothing
// until confirmed.
func TestPruneOnlyEverDeletesTaggedRecordedGuestsAndHoldsMassPrunes(t *testing.T) {
	for _, seed := range r4Seeds(t) {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runR4(t, seed) })
	}
}

func runR4(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	spec := pvesim.DefaultSpec()
	spec.Seed = int64(seed)
	spec.Files = []pvesim.FileSpec{{VolID: ctTmplID, Size: 1 << 20}}
	w := &r4World{r: r, declared: map[string]string{"ctt/lab/golden.yaml": ""}, untouchable: map[int]string{}, nextVMID: 100}
	// Foreign guests, present before ProxOps ever runs: untagged, tagged by someone else, or tagged with the
	// predecessor's pveconform (some of which the repository will declare and so claim).
	var pveconform []int
	for i := range 3 + r.IntN(5) {
		vmid := 500 + i
		var tags, label string
		switch r.IntN(3) {
		case 0:
			label = "untagged"
		case 1:
			tags, label = "tags: web;db\n", "foreign-tagged"
		default:
			tags, label = "tags: pveconform\n", "pveconform"
			pveconform = append(pveconform, vmid)
		}
		spec.Guests = append(spec.Guests, pvesim.GuestSpec{VMID: vmid, Type: "qemu", Node: fmt.Sprintf("pve%d", 1+r.IntN(3)),
			Running: r.IntN(2) == 0, Config: fmt.Sprintf("name: vm-%d\nmemory: 512\ncores: 1\nsmbios1: uuid=5e1f0000-0000-4000-8000-%012d\n%s",
				vmid, vmid, tags)})
		w.untouchable[vmid] = label
	}
	e := newEnv(t, envConfig{Spec: spec})
	w.e = e
	w.declared["ctt/lab/golden.yaml"] = ctTemplateManifest(e.nodes)
	e.startExecutors(nil)
	e.startPlanner("a")

	// Round 0: ProxOps creates its guests, and claims some pveconform guests the repository declares.
	for range 5 + r.IntN(6) {
		w.addVM(w.nextVMID)
		w.nextVMID++
	}
	for i := range 3 + r.IntN(4) {
		w.addCT(400 + i)
	}
	for _, vmid := range pveconform {
		if r.IntN(2) == 0 {
			node, _, _ := e.sim.NodeOf(vmid)
			name := fmt.Sprintf("vm-%d", vmid)
			w.declared["vm/lab/"+name+".yaml"] = vmManifest(name, vmid, node, 512)
			delete(w.untouchable, vmid) // claimed: from now on ProxOps' own
		}
	}
	w.budget = []int{0, 3}[r.IntN(2)]
	o := e.wait(e.announce(w.repo(), false), 2*time.Minute)
	if len(o.rejected) > 0 || o.last().Outcome != plan.OutcomeSucceeded {
		t.Fatalf("round 0: %+v %+v", o.rejected, o.finished)
	}

	// Hand-made guests: clones of managed VMs (they carry the tag, not a record), and a managed vmid deleted
	// and re-created by hand with the tag (a record, but of another identity).
	owned := w.ownedNow()
	var vms []int
	for vmid, k := range owned {
		if k == manifest.KindVM {
			vms = append(vms, vmid)
		}
	}
	slices.Sort(vms)
	for i := range 1 + r.IntN(2) {
		src := vms[r.IntN(len(vms))]
		node, _, _ := e.sim.NodeOf(src)
		newID := 600 + i
		e.pveRequest("POST", fmt.Sprintf("/nodes/%s/qemu/%d/clone", node, src), url.Values{"newid": {strconv.Itoa(newID)},
			"full": {"1"}, "name": {fmt.Sprintf("hand-clone-%d", i)}})
		e.settled(newID, true)
		w.untouchable[newID] = "hand-made clone"
	}
	if r.IntN(2) == 0 {
		vmid := vms[r.IntN(len(vms))]
		node, _, _ := e.sim.NodeOf(vmid)
		if e.sim.Running(vmid) {
			e.pveRequest("POST", fmt.Sprintf("/nodes/%s/qemu/%d/status/stop", node, vmid), url.Values{})
			testkit.Eventually(t, 30*time.Second, "the stop", func() bool { return !e.sim.Running(vmid) })
		}
		e.pveRequest("DELETE", fmt.Sprintf("/nodes/%s/qemu/%d", node, vmid), nil)
		e.settled(vmid, false)
		e.pveRequest("POST", "/nodes/"+node+"/qemu", url.Values{"vmid": {strconv.Itoa(vmid)}, "name": {fmt.Sprintf("vm-%d", vmid)},
			"memory": {"512"}, "tags": {"proxops"}})
		e.settled(vmid, true)
		w.untouchable[vmid] = "re-created by hand on a managed vmid"
		// The repository no longer declares it (declared and tagged, it would be taken over, rightly).
		delete(w.declared, fmt.Sprintf("vm/lab/vm-%d.yaml", vmid))
	}

	var held, deletes int
	for round := 1; round <= 5; round++ {
		// The repository keeps a random share of what it declares, and declares a few new guests.
		keep := []float64{0.2, 0.5, 0.8, 1}[r.IntN(4)]
		for p := range w.declared {
			if strings.HasPrefix(p, "ctt/") {
				continue
			}
			if r.Float64() >= keep {
				delete(w.declared, p)
			}
		}
		for range r.IntN(3) {
			w.addVM(w.nextVMID)
			w.nextVMID++
		}
		w.budget = []int{0, 3}[r.IntN(2)]

		// What may be deleted, and whether the latch must hold, from the live state and the records alone.
		owned := w.ownedNow()
		declared := w.declaredVMIDs()
		ownedPerKind, prunePerKind := map[manifest.Kind]int{}, map[manifest.Kind]int{}
		for vmid, k := range owned {
			ownedPerKind[k]++
			if !declared[vmid] {
				prunePerKind[k]++
			}
		}
		mustHold := false
		for k, n := range prunePerKind {
			if n >= 3 && 2*n > ownedPerKind[k] {
				mustHold = true
			}
		}
		from := len(e.sim.Requests())
		ev := e.announce(w.repo(), false)
		o := e.await(ev, 2*time.Minute, fmt.Sprintf("round %d's plan to finish or be held", round), func(o outcome) bool {
			return o.done() || len(o.held) > 0
		})
		if len(o.rejected) > 0 {
			t.Fatalf("round %d rejected: %s", round, o.rejected[0].Rejection.Diagnostics)
		}
		pl := o.planned[0].Plan
		var prunes []int
		for _, op := range pl.Operations {
			if op.Action == plan.ActionDelete {
				prunes = append(prunes, op.VMID)
			}
		}
		if pl.Held != mustHold || (len(o.held) > 0) != mustHold {
			t.Fatalf("round %d: plan held %v (event %v), want %v: prunes per kind %v of owned %v", round, pl.Held,
				len(o.held) > 0, mustHold, prunePerKind, ownedPerKind)
		}
		if mustHold {
			held++
			// Held: nothing is deleted while it waits.
			time.Sleep(300 * time.Millisecond)
			if n := countDeletes(e.sim.Requests()[from:]); n != 0 {
				t.Fatalf("round %d: %d deletes while the plan is held", round, n)
			}
			if r.IntN(2) == 0 {
				// Left held: the next round's commit supersedes it.
				checkDeletes(t, round, e.sim.Requests()[from:], owned)
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := planner.Confirm(ctx, e.bus, cluster, pl.ID, "reliability test")
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			o = e.wait(ev, 2*time.Minute)
		}
		if f := o.last(); f.Outcome != plan.OutcomeSucceeded {
			t.Fatalf("round %d: %s: %+v", round, f.Outcome, f.Operations)
		}
		deletes += checkDeletes(t, round, e.sim.Requests()[from:], owned)
		for _, vmid := range prunes {
			if e.sim.Exists(vmid) {
				t.Fatalf("round %d: pruned guest %d still exists", round, vmid)
			}
		}
	}
	for vmid, what := range w.untouchable {
		if !e.sim.Exists(vmid) {
			t.Errorf("guest %d (%s) was deleted", vmid, what)
		}
	}
	t.Logf("seed %d: %d deletes, %d held plans, %d untouchable guests kept", seed, deletes, held, len(w.untouchable))
}

func countDeletes(log []pvesim.RequestLogEntry) int {
	n := 0
	for _, r := range log {
		if isGuestDelete(r) {
			n++
		}
	}
	return n
}

// checkDeletes fails the test for any DELETE of a guest outside allowed (tagged and recorded with its live
// identity before the round); it returns the number of deletes.
func checkDeletes(t *testing.T, round int, log []pvesim.RequestLogEntry, allowed map[int]manifest.Kind) int {
	t.Helper()
	n := 0
	for _, r := range log {
		if !isGuestDelete(r) {
			continue
		}
		n++
		vmid, _ := strconv.Atoi(r.Params["vmid"])
		if _, ok := allowed[vmid]; !ok {
			t.Fatalf("round %d: DELETE %s reached a guest that is not tagged and recorded", round, r.Path)
		}
	}
	return n
}
