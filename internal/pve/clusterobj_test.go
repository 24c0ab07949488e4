package pve_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testkit"
)

// objRecords is an ownership inventory of guests (fingerprints by vmid) and cluster objects ("kind/id").
type objRecords struct {
	guests  map[int]string
	objects map[string]bool
}

func (r objRecords) RecordedFingerprint(_ context.Context, vmid int) (string, bool, error) {
	fp, ok := r.guests[vmid]
	return fp, ok, nil
}

func (r objRecords) ObjectRecorded(_ context.Context, kind, id string) (bool, error) {
	return r.objects[kind+"/"+id], nil
}

// objSim is poolSim with the owned VM 100 and the foreign VM 101, and HA acting at once.
func objSim(t *testing.T, version string) *simCluster {
	t.Helper()
	spec := baseSpec()
	spec.Version = version
	spec.HADelay = pvesim.Duration(time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{
		{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM},
		{VMID: 101, Type: "qemu", Node: "pve2", Config: "memory: 512\nname: foreign\n"},
	}
	return newSim(t, spec)
}

func objOp(action plan.Action, params ...string) plan.Operation {
	op := plan.Operation{ID: string(action), Cluster: "lab", Node: plan.ClusterScope, Ref: "obj", Action: action}
	for i := 0; i+1 < len(params); i += 2 {
		op.Params = append(op.Params, plan.KV{Key: params[i], Value: params[i+1]})
	}
	return op
}

// objectCase is one kind of cluster object: its actions, what creates it, and how the test reads and
// hand-edits its comment.
type objectCase struct {
	name, object, kind, idKey, id string
	create, configure, delete     plan.Action
	createParams                  []string
	comment                       func(t *testing.T, cl *pve.Client) (string, bool)
	handComment                   func(c *simCluster, t *testing.T, comment string)
}

func objectCases() []objectCase {
	ctx := context.Background()
	return []objectCase{
		{
			name: "ha resource", object: "ha-resource", kind: pve.ObjectKindHAResource, idKey: "sid", id: "vm:101",
			create: plan.ActionCreateHAResource, configure: plan.ActionConfigureHAResource, delete: plan.ActionDeleteHAResource,
			createParams: []string{"state", "stopped"},
			comment: func(t *testing.T, cl *pve.Client) (string, bool) {
				list, err := cl.ListHAResources(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range list {
					if r.SID == "vm:101" {
						return r.Comment, true
					}
				}
				return "", false
			},
			handComment: func(c *simCluster, t *testing.T, comment string) {
				c.root(t, http.MethodPut, "/cluster/ha/resources/vm:101", "comment", comment)
			},
		},
		{
			name: "ha rule", object: "ha-rule", kind: pve.ObjectKindHARule, idKey: "rule", id: "prefer-pve1",
			create: plan.ActionCreateHARule, configure: plan.ActionConfigureHARule, delete: plan.ActionDeleteHARule,
			createParams: []string{"type", "node-affinity", "resources", "vm:100", "nodes", "pve1:2,pve2"},
			comment: func(t *testing.T, cl *pve.Client) (string, bool) {
				list, err := cl.ListHARules(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range list {
					if r.ID == "prefer-pve1" {
						return r.Comment, true
					}
				}
				return "", false
			},
			handComment: func(c *simCluster, t *testing.T, comment string) {
				c.root(t, http.MethodPut, "/cluster/ha/rules/prefer-pve1", "type", "node-affinity", "comment", comment)
			},
		},
		{
			name: "backup job", object: "backup-job", kind: pve.ObjectKindBackupJob, idKey: "id", id: "nightly",
			create: plan.ActionCreateBackupJob, configure: plan.ActionConfigureBackupJob, delete: plan.ActionDeleteBackupJob,
			createParams: []string{"schedule", "sun 01:00", "storage", "local", "all", "1", "prune-backups", "keep-last=3"},
			comment: func(t *testing.T, cl *pve.Client) (string, bool) {
				list, err := cl.ListBackupJobs(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range list {
					if j.ID == "nightly" {
						return j.Comment, true
					}
				}
				return "", false
			},
			handComment: func(c *simCluster, t *testing.T, comment string) {
				c.root(t, http.MethodPut, "/cluster/backup/nightly", "comment", comment)
			},
		},
	}
}

func TestClusterObjectsCreateConfigureDeleteOnlyWhenOwned(t *testing.T) {
	for _, tc := range objectCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := objSim(t, "")
			cl := c.client(t)
			ctx := testContext(t)
			inv := objRecords{guests: map[int]string{101: ""}, objects: map[string]bool{}}
			opts := pve.ApplyOptions{Objects: inv}
			if tc.object == "ha-rule" {
				c.root(t, http.MethodPost, "/cluster/ha/resources", "sid", "vm:100", "state", "stopped")
			}
			create := objOp(tc.create, append([]string{tc.idKey, tc.id, "comment", "made"}, tc.createParams...)...)
			if tc.object == "ha-resource" {
				create.VMID, create.GuestType = 101, inventory.QEMU
				create.Params = append(create.Params, plan.KV{Key: "node", Value: "pve2"})
			}
			if _, err := cl.Apply(ctx, create, opts); err != nil {
				t.Fatalf("create: %v", err)
			}
			if got, _ := tc.comment(t, cl); got != "made [proxops]" {
				t.Fatalf("created comment %q", got)
			}
			if _, err := cl.Apply(ctx, create, opts); pve.ClassOf(err) != plan.ErrorConflict {
				t.Fatalf("second create: %v", err)
			}
			configure := objOp(tc.configure, tc.idKey, tc.id, "comment", "changed")
			configure.Precondition.Expect = []plan.KV{{Key: "comment", Value: "made [proxops]"}}
			if tc.object == "ha-resource" {
				// The plan names the guest (its node) for the ownership check; PVE's update takes no node.
				configure.VMID, configure.GuestType = 101, inventory.QEMU
				configure.Params = append(configure.Params, plan.KV{Key: "node", Value: "pve2"})
			}
			_, err := cl.Apply(ctx, configure, opts)
			wantRefusal(t, err, pve.RefusalNotOwned)
			inv.objects[tc.kind+"/"+tc.id] = true
			if _, err := cl.Apply(ctx, configure, opts); err != nil {
				t.Fatalf("configure: %v", err)
			}
			if got, _ := tc.comment(t, cl); got != "changed [proxops]" {
				t.Fatalf("configured comment %q", got)
			}
			// A hand edit that drops the marker makes the object foreign: no delete.
			tc.handComment(c, t, "theirs")
			_, err = cl.Apply(ctx, objOp(tc.delete, tc.idKey, tc.id), opts)
			wantRefusal(t, err, pve.RefusalNotOwned)
			if _, found := tc.comment(t, cl); !found {
				t.Fatal("a foreign object was deleted")
			}
			// A claim adds the marker only while the comment is the one the plan observed.
			claim := objOp(plan.ActionClaimClusterObject, "object", tc.object, tc.idKey, tc.id)
			claim.Precondition.Expect = []plan.KV{{Key: "comment", Value: "other"}}
			_, err = cl.Apply(ctx, claim, opts)
			wantRefusal(t, err, pve.RefusalClaimMismatch)
			claim.Precondition.Expect = []plan.KV{{Key: "comment", Value: "theirs"}}
			if _, err := cl.Apply(ctx, claim, opts); err != nil {
				t.Fatalf("claim: %v", err)
			}
			if got, _ := tc.comment(t, cl); got != "theirs [proxops]" {
				t.Fatalf("claimed comment %q", got)
			}
			if _, err := cl.Apply(ctx, objOp(tc.delete, tc.idKey, tc.id), opts); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if _, found := tc.comment(t, cl); found {
				t.Fatal("still there after delete")
			}
			out, err := cl.Apply(ctx, objOp(tc.delete, tc.idKey, tc.id), opts)
			if err != nil || !out.AlreadyDone {
				t.Fatalf("delete again: %+v %v", out, err)
			}
		})
	}
}

func TestHAResourceCreateRefusesAForeignGuest(t *testing.T) {
	c := objSim(t, "")
	cl := c.client(t)
	inv := objRecords{guests: map[int]string{100: seedVMFingerprint}, objects: map[string]bool{}}
	op := objOp(plan.ActionCreateHAResource, "sid", "vm:101", "node", "pve2", "state", "started")
	op.VMID, op.GuestType = 101, inventory.QEMU
	_, err := cl.Apply(testContext(t), op, pve.ApplyOptions{Ownership: inv, Objects: inv})
	wantRefusal(t, err, pve.RefusalNotOwned)
	if list, _ := cl.ListHAResources(testContext(t)); len(list) != 0 {
		t.Fatalf("resources %v", list)
	}
}

func TestObserveHAAndVersion(t *testing.T) {
	c := objSim(t, "")
	cl := c.client(t)
	ctx := testContext(t)
	c.root(t, http.MethodPost, "/cluster/ha/resources", "sid", "vm:100", "state", "started", "max_restart", "3")
	testkit.Eventually(t, 10*time.Second, "the HA manager to start the VM", func() bool {
		list, err := cl.ListHAResources(ctx)
		return err == nil && len(list) == 1 && list[0].CRMState == "started"
	})
	list, _ := cl.ListHAResources(ctx)
	if r := list[0]; r.SID != "vm:100" || r.VMID != 100 || r.Node != "pve1" || r.MaxRestart != 3 || r.MaxRelocate != 1 || !r.Failback {
		t.Fatalf("resource %+v", r)
	}
	v, err := cl.ReadVersion(ctx)
	if err != nil || v.Major != 9 {
		t.Fatalf("version %+v %v", v, err)
	}

	old := objSim(t, "8.4.1")
	ocl := old.client(t)
	if v, err := ocl.ReadVersion(ctx); err != nil || v.Major != 8 || v.Release != "8.4" {
		t.Fatalf("version %+v %v", v, err)
	}
	old.root(t, http.MethodPost, "/cluster/ha/groups", "group", "prefer1", "nodes", "pve1:2,pve2", "restricted", "1")
	groups, err := ocl.ListHAGroups(ctx)
	if err != nil || len(groups) != 1 || !groups[0].Restricted || len(groups[0].Nodes) != 2 {
		t.Fatalf("groups %+v %v", groups, err)
	}
	if _, err := ocl.ListHARules(ctx); err == nil {
		t.Fatal("PVE 8 has no HA rules")
	}
}

// Creating an HA resource in state started and changing it to stopped are done only once HA has acted: the
// guest runs after the create and is stopped after the configure, which sends PVE no node.
func TestHAResourceWritesWaitForHAToAct(t *testing.T) {
	spec := baseSpec()
	spec.HADelay = pvesim.Duration(150 * time.Millisecond)
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
	c := newSim(t, spec)
	cl := c.client(t)
	ctx := testContext(t)
	inv := objRecords{guests: map[int]string{100: seedVMFingerprint}, objects: map[string]bool{pve.ObjectKindHAResource + "/vm:100": true}}
	opts := pve.ApplyOptions{Ownership: inv, Objects: inv}
	status := func() string {
		n, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1", HA: true})
		if err != nil {
			t.Fatal(err)
		}
		if n.HA == nil || len(n.HA.Resources) != 1 || n.HA.Resources[0].Comment != "web [proxops]" {
			t.Fatalf("observed HA %+v", n.HA)
		}
		return n.Guests[0].Status
	}
	create := objOp(plan.ActionCreateHAResource, "sid", "vm:100", "node", "pve1", "state", "started", "comment", "web")
	create.VMID, create.GuestType = 100, inventory.QEMU
	if _, err := cl.Apply(ctx, create, opts); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := status(); got != "running" {
		t.Fatalf("after the create the guest is %s, want running", got)
	}
	stop := objOp(plan.ActionConfigureHAResource, "sid", "vm:100", "node", "pve1", "state", "stopped", "comment", "web")
	stop.VMID, stop.GuestType = 100, inventory.QEMU
	stop.Precondition.Expect = []plan.KV{{Key: "comment", Value: "web [proxops]"}}
	if _, err := cl.Apply(ctx, stop, opts); err != nil {
		t.Fatalf("configure: %v", err)
	}
	if got := status(); got != "stopped" {
		t.Fatalf("after the configure the guest is %s, want stopped", got)
	}
}

// Observing HA reads the resources with their options and the rules with their comments; a PVE 8 cluster
// serves no rules, and its inventory says they were not read.
func TestObserveHAReadsResourcesAndRulesAndNoRulesOnPVE8(t *testing.T) {
	for _, version := range []string{"", "8.4.1"} {
		c := objSim(t, version)
		cl := c.client(t)
		ctx := testContext(t)
		c.root(t, http.MethodPost, "/cluster/ha/resources", "sid", "vm:100", "state", "stopped", "max_relocate", "4", "comment", "web")
		if version == "" {
			c.root(t, http.MethodPost, "/cluster/ha/rules", "rule", "pin", "type", "node-affinity", "resources", "vm:100", "nodes", "pve1:2,pve2", "comment", "x")
		}
		n, err := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1", HA: true})
		if err != nil {
			t.Fatalf("observe on %q: %v", version, err)
		}
		h := n.HA
		if h == nil || len(h.Resources) != 1 || h.Resources[0].SID != "vm:100" || h.Resources[0].State != "stopped" ||
			h.Resources[0].MaxRelocate != 4 || h.Resources[0].MaxRestart != 1 || h.Resources[0].Comment != "web" {
			t.Fatalf("version %q: observed HA %+v", version, h)
		}
		switch version {
		case "":
			if !h.RulesRead || len(h.Rules) != 1 || h.Rules[0].ID != "pin" || h.Rules[0].Comment != "x" || len(h.Rules[0].Nodes) != 2 {
				t.Fatalf("PVE 9 rules %+v (read %v)", h.Rules, h.RulesRead)
			}
		default:
			if h.RulesRead || len(h.Rules) != 0 {
				t.Fatalf("PVE 8 rules %+v (read %v)", h.Rules, h.RulesRead)
			}
		}
		if n, _ := cl.Observe(ctx, pve.ObserveRequest{Cluster: "lab", Node: "pve1"}); n.HA != nil {
			t.Fatal("HA read without being asked")
		}
	}
}
