package pipeline_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim"
)

// A created guest's ownership record is written before anything that depends on the create is dispatched:
// when it cannot be written (here the planner's NATS user may read proxops_owned but not write it), the
// create counts as failed, naming the record, and the guest that depends on it is never created.
func TestDependantIsNotDispatchedWhenTheOwnershipRecordCannotBeWritten(t *testing.T) {
	services, err := bus.ServiceUsers([]bus.ClusterNodes{{Cluster: cluster, Nodes: []string{"pve1", "pve2", "pve3"}}})
	if err != nil {
		t.Fatal(err)
	}
	var users []bus.User
	for _, u := range services {
		p := u.Permissions
		if u.Name == string(bus.RolePlanner) {
			p.Publish = slices.DeleteFunc(slices.Clone(p.Publish), func(s string) bool { return s == "$KV."+bus.BucketOwned+".>" })
			if len(p.Publish) != len(u.Permissions.Publish)-1 {
				t.Fatalf("the planner's permissions hold no write of %s: %v", bus.BucketOwned, u.Permissions.Publish)
			}
		}
		users = append(users, bus.User{Name: u.Name, Password: "pw-" + u.Name, Permissions: p})
	}
	e := newEnvUsers(t, pvesim.DefaultSpec(), users)
	e.startAsServiceUsers("unrecording", time.Second)

	files := e.vms(map[string]int{"web-01": 101, "web-02": 102})
	chain(files, "web-01", "web-02")
	o := e.wait(e.announce(files, false), 2*time.Minute)
	if len(o.finished) == 0 {
		t.Fatalf("no run finished: %+v", o)
	}
	f := o.last()
	states := map[string]plan.OpOutcome{}
	for _, op := range f.Operations {
		states[op.ID] = op
	}
	create, dependant := states["vm-101-create"], states["vm-102-create"]
	if f.Outcome != plan.OutcomeFailed || create.State != plan.OpFailed ||
		!strings.Contains(create.Message, "ownership record lab.101 (proxops_owned) not written") {
		t.Fatalf("run %s, create %s: %q, want the create failed naming its record", f.Outcome, create.State, create.Message)
	}
	if dependant.State != plan.OpSkipped {
		t.Fatalf("dependant create: %s %q, want skipped", dependant.State, dependant.Message)
	}
	if !e.sim.Exists(101) || e.sim.Exists(102) {
		t.Fatalf("guest 101 exists %v, guest 102 exists %v: want only the first created", e.sim.Exists(101), e.sim.Exists(102))
	}
	if len(e.owned()) != 0 {
		t.Fatalf("owned: %+v", e.owned())
	}
}

// A declared guest found without the ownership tag, under the manifest's name, is taken over: the plan claims
// it first (the executor checks the identity and name the plan observed, as the guest is not ProxOps' yet),
// records it, and only then shuts it down, configures and starts it, each write checked against that record.
func TestPlannedClaimOfAnUntaggedGuestConverges(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 101, Type: "qemu", Node: "pve1", Running: true, Config: `cores: 1
cpu: host
memory: 1024
name: web-01
net0: virtio=BC:24:11:00:01:01,bridge=vmbr0
scsi0: local-lvm:vm-101-disk-0,size=4G
smbios1: uuid=7a0c2e4b-0000-4000-8000-000000000101
tags: backup
`}}
	e := newEnv(t, spec)
	e.startExecutors("pve1", "pve2", "pve3")
	e.startPlanner(e.plannerConfig("a"))
	files := e.vms(map[string]int{"web-01": 101})
	o := e.apply(files)
	var actions []plan.Action
	for _, op := range o.planned[0].Plan.Operations {
		actions = append(actions, op.Action)
	}
	if len(actions) < 2 || actions[0] != plan.ActionClaimTag {
		t.Fatalf("operations %v: want the claim first, then the rest", actions)
	}
	conf, _ := e.sim.Config(101)
	if !pveformat.Owned(conf["tags"]) || conf["memory"] != "512" {
		t.Fatalf("guest after the takeover: %v", conf)
	}
	rec, ok := e.owned()[101]
	if !ok || rec.Fingerprint != "uuid=7a0c2e4b-0000-4000-8000-000000000101" {
		t.Fatalf("record of 101: %+v (%v)", rec, ok)
	}
	if again := e.apply(files); len(again.planned[0].Plan.Operations) != 0 {
		t.Fatalf("converged repository planned %+v", again.planned[0].Plan.Operations)
	}
}
