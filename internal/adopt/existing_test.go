package adopt_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/render"
)

// apply runs a plan's operations in order through the real adapter.
func (l *lab) apply(t *testing.T, p plan.Plan) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := pve.New(ctx, pve.Config{BaseURL: l.srv.URL, TokenID: pvesim.DefaultRootTokenID,
		TokenSecret: pvesim.DefaultRootTokenSecret, ReadBackoff: time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	for _, op := range p.Operations {
		if _, err := cl.Apply(ctx, op, pve.ApplyOptions{}); err != nil {
			t.Fatalf("apply %s: %v", op.ID, err)
		}
	}
}

// adoptAndPlan adopts every guest of a one-node lab, writes the repository and plans it.
func adoptAndPlan(t *testing.T, l *lab) (adopt.Result, plan.Plan, string) {
	t.Helper()
	observed := l.observe(t, "lab", "pve1")
	res, err := adopt.Adopt(adopt.Input{Cluster: "lab", Observed: observed})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRepository(t, dir, "lab", []string{"pve1"}, res)
	return res, planRepository(t, dir, "lab", observed, nil), dir
}

const taggedVM = `cores: 1
memory: 1024
name: web
net0: virtio=BC:24:11:00:00:01,bridge=vmbr0
scsi0: local-lvm:vm-100-disk-0,size=8G
smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000100
tags: Prod;web
`

// On a cluster whose tag-style says case-sensitive=1, adoption keeps the case of tags, the claim writes them
// with their case and the ownership tag, and the next plan is empty; on a default cluster PVE stores tags
// lower-cased, and so does the claim.
func TestClaimingKeepsTagCaseWhereTheClusterDoes(t *testing.T) {
	for _, tc := range []struct{ style, manifestTags, claimed string }{
		{"case-sensitive=1", "Prod web", "Prod;proxops;web"},
		{"", "prod web", "prod;proxops;web"},
	} {
		spec := pvesim.DefaultSpec()
		spec.TagStyle = tc.style
		spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: taggedVM}}
		l := newLab(t, spec)
		res, p, dir := adoptAndPlan(t, l)
		if len(res.Manifests) != 1 || !res.Manifests[0].Complete() || strings.Join(res.Manifests[0].Resource.VM().Tags, " ") != tc.manifestTags {
			t.Fatalf("tag-style %q: adopted %+v", tc.style, res.Manifests)
		}
		if len(p.Operations) != 1 || p.Operations[0].Action != plan.ActionClaimTag || p.Operations[0].Values[0].Value != tc.claimed {
			t.Fatalf("tag-style %q: plan\n%s", tc.style, render.PlanText(p))
		}
		l.apply(t, p)
		again := l.observe(t, "lab", "pve1")
		if g, _ := again.Guest(100); g.Tags != tc.claimed {
			t.Errorf("tag-style %q: PVE holds tags %q after the claim, want %q", tc.style, g.Tags, tc.claimed)
		}
		if p2 := planRepository(t, dir, "lab", again, nil); len(p2.Operations) != 0 {
			t.Errorf("tag-style %q: the plan after the claim is not empty:\n%s", tc.style, render.PlanText(p2))
		}
	}
}

const cloudInitVM = `ciuser: admin
cores: 1
ide2: local-lvm:vm-101-cloudinit,media=cdrom
ipconfig0: ip=192.0.2.11/24,gw=192.0.2.1
memory: 1024
name: ci
net0: virtio=BC:24:11:00:00:02,bridge=vmbr0
scsi0: local-lvm:vm-101-disk-0,size=8G
smbios1: uuid=6f1b2c3d-0000-4000-8000-000000000101
tags: proxops

[special:cloudinit]
ciuser: root
`

// A running VM whose cloud-init drive was generated before its ciuser changed: observation reports the
// drive stale, adoption's plan regenerates it (shown with what the drive holds and will hold), and once
// applied the drive holds the config and the next plan is empty. A VM the plan starts needs no
// regeneration: PVE generates the drive at every start.
func TestAStaleCloudInitDriveIsRegeneratedByThePlan(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 101, Type: "qemu", Node: "pve1", Config: cloudInitVM, Running: true}}
	l := newLab(t, spec)
	_, p, dir := adoptAndPlan(t, l)
	text := render.PlanText(p)
	var regen *plan.Operation
	for i, op := range p.Operations {
		switch op.Action {
		case plan.ActionRegenerateCloudInit:
			regen = &p.Operations[i]
		case plan.ActionClaimTag:
		default:
			t.Errorf("unexpected operation %s", op.ID)
		}
	}
	if regen == nil {
		t.Fatalf("no regeneration planned:\n%s", text)
	}
	if !strings.Contains(text, "  regenerate-cloudinit VM/ci ") || !strings.Contains(text, "      cloud-init drive ciuser: root → admin\n") {
		t.Errorf("the regeneration is not shown:\n%s", text)
	}
	l.apply(t, p)
	again := l.observe(t, "lab", "pve1")
	if g, _ := again.Guest(101); !g.CloudInitDrive || len(g.CloudInitStale()) != 0 {
		t.Errorf("after the plan the drive is still stale: %+v", g.CloudInit)
	}
	if p2 := planRepository(t, dir, "lab", again, nil); len(p2.Operations) != 0 {
		t.Errorf("the plan after the regeneration is not empty:\n%s", render.PlanText(p2))
	}

	spec.Guests[0].Running = false
	stopped := newLab(t, spec)
	observed := stopped.observe(t, "lab", "pve1")
	if g, _ := observed.Guest(101); strings.Join(g.CloudInitStale(), ",") != "ciuser" {
		t.Fatalf("stale keys of the stopped VM: %v", g.CloudInitStale())
	}
	p3 := planRepository(t, dir, "lab", observed, nil)
	for _, op := range p3.Operations {
		if op.Action == plan.ActionRegenerateCloudInit {
			t.Errorf("a VM the plan starts is regenerated too:\n%s", render.PlanText(p3))
		}
	}
}

// A pending change someone made by hand to a key the manifest owns is drift: the plan writes the declared
// value, PVE drops the pending one, and the next plan is empty. A pending change to a key the model does not
// cover is left alone: an anomaly naming it, no operation, and PVE keeps it.
func TestAForeignPendingChangeIsUndoneOnOwnedKeysAndLeftAloneElsewhere(t *testing.T) {
	spec := pvesim.DefaultSpec()
	spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: taggedVM, Running: true}}
	l := newLab(t, spec)
	_, p, dir := adoptAndPlan(t, l)
	l.apply(t, p)
	setByHand := func(form string) {
		t.Helper()
		params, err := url.ParseQuery(form)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.sim.AdminRequest(http.MethodPut, "/nodes/pve1/qemu/100/config", params); err != nil {
			t.Fatalf("set %s: %v", form, err)
		}
	}
	// Someone raises the cores of the running VM: PVE keeps the change pending until a restart.
	setByHand("cores=4")
	observed := l.observe(t, "lab", "pve1")
	if g, _ := observed.Guest(100); strings.Join(g.PendingKeys(), ",") != "cores" {
		t.Fatalf("pending keys %v", g.PendingKeys())
	}
	p2 := planRepository(t, dir, "lab", observed, nil)
	if len(p2.Operations) != 1 || p2.Operations[0].Action != plan.ActionConfigure || !strings.Contains(render.PlanText(p2), "cores: 4 → 1") {
		t.Fatalf("the hand change to cores is not undone:\n%s", render.PlanText(p2))
	}
	l.apply(t, p2)
	observed = l.observe(t, "lab", "pve1")
	if g, _ := observed.Guest(100); len(g.PendingKeys()) != 0 {
		t.Errorf("pending keys after the plan: %v", g.PendingKeys())
	}
	if p3 := planRepository(t, dir, "lab", observed, nil); len(p3.Operations) != 0 {
		t.Errorf("the next plan is not empty:\n%s", render.PlanText(p3))
	}

	// Someone gives the VM a watchdog: a key ProxOps does not manage, pending until a restart.
	setByHand("watchdog=model%3Di6300esb%2Caction%3Dreset")
	observed = l.observe(t, "lab", "pve1")
	p4 := planRepository(t, dir, "lab", observed, nil)
	if len(p4.Operations) != 0 {
		t.Errorf("the planner writes to a guest with a pending change it cannot judge:\n%s", render.PlanText(p4))
	}
	var found bool
	for _, f := range p4.Findings {
		found = found || (f.Kind == plan.FindingAnomaly && f.Field == "watchdog" && strings.Contains(f.Message, "i6300esb"))
	}
	if !found {
		t.Errorf("no anomaly names the pending change:\n%s", render.PlanText(p4))
	}
	if g, _ := observed.Guest(100); strings.Join(g.PendingKeys(), ",") != "watchdog" {
		t.Errorf("pending keys %v", g.PendingKeys())
	}
}
