package reliability_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// r1Guests is the size of R1's plan: 200 creates, or PROXOPS_R1_GUESTS.
func r1Guests(t *testing.T) int {
	n := 200
	if v := os.Getenv("PROXOPS_R1_GUESTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 20 {
			t.Fatalf("PROXOPS_R1_GUESTS=%q: want a number of at least 20", v)
		}
	}
	return n
}

// R1: an apply of 200 creates over 4 nodes on a three-server JetStream cluster (every stream, bucket and
// object store with three replicas), two executor replicas per node and two planners, all separate
// processes. During the apply an executor replica is killed with SIGKILL three times (and restarted each
// time), the planner driving the run is killed once (the other one is running), and the NATS server leading
// the work queue is killed and stays down. The run must finish as one run with every operation succeeded,
// every guest must have been created by exactly one create request, no operation may be dead-lettered, and
// the next diff must be empty.
func TestApplySurvivesKilledExecutorsAKilledPlannerAndALostNATSServer(t *testing.T) {
	if testing.Short() {
		t.Skip("R1 runs a NATS cluster and ten service processes")
	}
	guests := r1Guests(t)
	const leaseTTL = 3 * time.Second
	nc := startNATSCluster(t, 3)
	b := nc.connect(leaseTTL)
	nodes := nodeNames(4)
	spec := pvesim.DefaultSpec()
	spec.TaskDurations = map[string]pvesim.Duration{"default": pvesim.Duration(5 * time.Millisecond),
		"qmcreate": pvesim.Duration(time.Second)}
	sim, srv := newSim(t, nodes, spec)
	e := &processEnv{env: &env{t: t, bus: b, sim: sim, srv: srv, nodes: nodes}, natsURL: nc.url(), leaseTTL: leaseTTL}

	replicas := map[string]*proc{}
	for _, n := range nodes {
		for _, r := range []string{"a", "b"} {
			replicas[n+"/"+r] = e.startExecutorProcess(n, r, 2)
		}
	}
	for _, n := range nodes {
		e.waitConsumer(n)
	}
	planners := map[string]*proc{"p1": e.startPlannerProcess("p1"), "p2": e.startPlannerProcess("p2")}

	// Sixteen chains (four per node, as many as the node's replicas run at once): each guest waits for the
	// one sixteen before it, so the planner dispatches all along the run and its death stalls the run.
	const chains = 16
	files := map[string]string{}
	for i := range guests {
		name := fmt.Sprintf("g-%03d", i)
		m := vmManifest(name, 1000+i, nodes[i%len(nodes)], 512)
		if i >= chains {
			m = strings.Replace(m, "metadata: {name: "+name+"}", fmt.Sprintf(
				"metadata:\n  name: %s\n  annotations: {proxops/depends-on: \"VM:g-%03d\"}", name, i-chains), 1)
		}
		files["vm/lab/"+name+".yaml"] = m
	}
	repo := e.manifests("", files)
	creates := func() int { return sim.Count("POST", "/nodes/{node}/qemu") }
	start := time.Now()
	ev := e.announce(repo, false)

	restartExecutor := func(key string) {
		p := replicas[key]
		p.kill(t)
		node, replica := key[:len(key)-2], key[len(key)-1:]
		replicas[key] = e.startExecutorProcess(node, replica, 2)
	}
	leaseKey, _ := bus.LeaseKey(cluster)
	steps := []struct {
		share float64
		what  string
		do    func() string
	}{
		{0.10, "kill executor pve1/a", func() string { restartExecutor("pve1/a"); return "restarted" }},
		{0.30, "stop the NATS server leading the work queue", func() string {
			leader := streamLeader(t, b, bus.StreamOps)
			nc.stopServer(leader)
			return leader + " stays down"
		}},
		{0.45, "kill the planner driving the run", func() string {
			var holder string
			testkit.Eventually(t, time.Minute, "a lease holder", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				h, held, err := b.LeaseHolder(ctx, leaseKey)
				holder = h
				return err == nil && held && planners[h] != nil
			})
			planners[holder].kill(t)
			planners[holder] = e.startPlannerProcess(holder)
			return holder + " killed and restarted"
		}},
		{0.60, "kill executor pve2/b", func() string { restartExecutor("pve2/b"); return "restarted" }},
		{0.80, "kill executor pve1/a again", func() string { restartExecutor("pve1/a"); return "restarted" }},
	}
	last := 0
	for _, s := range steps {
		at := max(int(s.share*float64(guests)), last+guests/20)
		// The run's floor is under 15 s: a minute without progress is a stuck run.
		testkit.Eventually(t, time.Minute, fmt.Sprintf("%d creates before: %s", at, s.what), func() bool { return creates() >= at })
		if creates() >= guests {
			t.Fatalf("the apply ended before: %s", s.what)
		}
		last = creates()
		t.Logf("%6.1fs  %3d creates: %s: %s", time.Since(start).Seconds(), last, s.what, s.do())
	}

	o := e.wait(ev, 2*time.Minute)
	t.Logf("%6.1fs  run finished", time.Since(start).Seconds())
	if len(o.planned) != 1 || len(o.finished) != 1 {
		t.Fatalf("the apply was planned %d and finished %d times", len(o.planned), len(o.finished))
	}
	if f := o.last(); f.Outcome != plan.OutcomeSucceeded || f.Succeeded != guests || f.Failed != 0 || f.Skipped != 0 {
		t.Fatalf("run: %s, %d succeeded, %d failed, %d skipped", f.Outcome, f.Succeeded, f.Failed, f.Skipped)
	}
	// Every guest created exactly once: one create request per vmid, no clone.
	made := map[string]int{}
	for _, r := range sim.Requests() {
		if isCreate(r) || isClone(r) {
			made[madeVMID(r)]++
		}
	}
	for i := range guests {
		vmid := 1000 + i
		if n := made[strconv.Itoa(vmid)]; n != 1 {
			t.Errorf("guest %d: %d create requests", vmid, n)
		}
		if node, _, ok := sim.NodeOf(vmid); !ok || node != nodes[i%len(nodes)] {
			t.Errorf("guest %d: on %q (exists %v)", vmid, node, ok)
		}
	}
	if len(made) != guests {
		t.Errorf("%d vmids were created, want %d", len(made), guests)
	}
	// No operation lost: nothing dead-lettered, and each guest is recorded with its live identity.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dead int
	if err := b.ReadStream(ctx, bus.StreamDLQ, bus.FilterDLQ, 0, func(*bus.Message) error { dead++; return nil }); err != nil {
		t.Fatalf("read the dead-letter stream: %v", err)
	}
	if dead != 0 {
		t.Errorf("%d operations dead-lettered", dead)
	}
	owned := e.owned()
	for i := range guests {
		vmid := 1000 + i
		if o, ok := owned[vmid]; !ok || o.Fingerprint == "" || o.Fingerprint != e.liveFingerprint(vmid) {
			t.Errorf("guest %d: ownership record %+v, live identity %q", vmid, o, e.liveFingerprint(vmid))
		}
	}
	if next := e.diff(repo); !next.Empty() {
		t.Fatalf("the next diff has %d operations: %+v", len(next.Operations), next.Operations[0])
	}
}
