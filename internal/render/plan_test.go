package render_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
)

func samplePlan() plan.Plan {
	return plan.Plan{ID: "0123456789abcdef", Cluster: "lab",
		Operations: []plan.Operation{
			{ID: "iso-pve1-local-a.iso-download", Node: "pve1", Ref: "ISO/a", Action: plan.ActionDownload, Reason: "ISO/a: a.iso not present on storage local on pve1; will download"},
			{ID: "vm-100-create", Node: "pve1", VMID: 100, Ref: "VM/web", Action: plan.ActionCreate, Reason: "VM/web: not on PVE; will create", DependsOn: []string{"iso-pve1-local-a.iso-download"}},
			{ID: "vm-101-shutdown", Node: "pve1", VMID: 101, Ref: "VM/db", Action: plan.ActionShutdown, Reason: "VM/db: restart to apply memory"},
			{ID: "vm-101-configure", Node: "pve1", VMID: 101, Ref: "VM/db", Action: plan.ActionConfigure, Reason: "VM/db: config drift (stop-required)",
				Changes: []plan.Change{{Field: "memory", Before: "2048", After: "4096"}, {Field: "ciuser", Before: "old", After: ""}}},
			{ID: "vm-101-start", Node: "pve1", VMID: 101, Ref: "VM/db", Action: plan.ActionStart, Reason: "VM/db: start after the restart"},
			{ID: "vm-102-claim-tag", Node: "pve2", VMID: 102, Ref: "VM/legacy", Action: plan.ActionClaimTag, Reason: "VM/legacy: claim ownership (add tag proxops)",
				Changes: []plan.Change{{Field: "tags", Before: "pveconform", After: "proxops"}}},
			{ID: "vm-200-stop", Node: "pve2", VMID: 200, Ref: "VM/old", Action: plan.ActionStop, Reason: "VM/old: stop before delete"},
			{ID: "vm-200-delete", Node: "pve2", VMID: 200, Ref: "VM/old", Action: plan.ActionDelete, Reason: "VM/old: present on PVE (proxops-tagged) but absent in git"},
		},
		Findings: []plan.Finding{
			{Kind: plan.FindingAnomaly, Ref: "VM/db", Node: "pve1", VMID: 101, Field: "spec.disks[0]", Message: "scsi0 is 32G on PVE, the manifest says 16G; ProxOps never shrinks a disk"},
			{Kind: plan.FindingSkipped, Ref: "VM/foreign", Node: "pve2", VMID: 300, Message: "live object without proxops tag; never touched"},
		},
		Held: true, HeldReason: "mass-prune latch: it would prune 1 of 1 owned VM guests", HeldPrunes: []string{"VM/old"},
	}
}

func TestPlanTextFollowsThePredecessorsLayout(t *testing.T) {
	want := `=== lab ===
plan 0123456789abcdef
=== will create (2) ===
  download     ISO/a                    pve1       id=-  ISO/a: a.iso not present on storage local on pve1; will download
  create       VM/web                   pve1       id=100  VM/web: not on PVE; will create
=== will update (2) ===
  update       VM/db                    pve1       id=101  VM/db: config drift (stop-required)
      memory: 2048 → 4096
      ciuser: old → (none)
  claim-tag    VM/legacy                pve2       id=102  VM/legacy: claim ownership (add tag proxops)
      tags: pveconform → proxops
=== power changes (2) ===
  shutdown     VM/db                    pve1       id=101  VM/db: restart to apply memory
  start        VM/db                    pve1       id=101  VM/db: start after the restart
=== will delete (prune) (2) ===
  stop         VM/old                   pve2       id=200  VM/old: stop before delete
  delete       VM/old                   pve2       id=200  VM/old: present on PVE (proxops-tagged) but absent in git
=== held for confirmation (mass-prune latch) (1) ===
  mass-prune latch: it would prune 1 of 1 owned VM guests
  confirm plan 0123456789abcdef to apply it
  held         VM/old                   pve2       id=200  prune waits for confirmation
=== anomalies (never written; fix by hand or in git) (1) ===
  anomaly      VM/db                    pve1       id=101  spec.disks[0]: scsi0 is 32G on PVE, the manifest says 16G; ProxOps never shrinks a disk
=== skipped (no proxops tag) (1) ===
  skipped      VM/foreign               pve2       id=300  live object without proxops tag; never touched
`
	if diff := cmp.Diff(want, render.PlanText(samplePlan())); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
}

func TestACleanClusterSaysNoDriftAndStillListsWhatItSkipped(t *testing.T) {
	p := plan.Plan{ID: "x", Cluster: "lab", Findings: []plan.Finding{{Kind: plan.FindingSkipped, Ref: "VM/foreign", Node: "pve1", VMID: 300, Message: "live object without proxops tag; never touched"}}}
	got := render.PlanText(p)
	if !strings.HasPrefix(got, "=== lab ===\n"+render.NoDriftCluster+"\n=== skipped (no proxops tag) (1) ===\n") {
		t.Errorf("text:\n%s", got)
	}
	if !render.Clean(p) {
		t.Error("a plan with only skipped guests is not clean")
	}
	p.Findings = append(p.Findings, plan.Finding{Kind: plan.FindingSkipped, Ref: "ISO/a", Node: "pve1", Message: "not listed"})
	if render.Clean(p) {
		t.Error("an artifact whose presence is unknown counts as clean")
	}
	if got := render.Text(nil, nil); got != render.NoDrift+"\n" {
		t.Errorf("no clusters: %q", got)
	}
}

func TestTextOrdersClustersThenRejections(t *testing.T) {
	rej := plan.Rejection{Cluster: "aaa", Reason: plan.RejectParse, Diagnostics: diag.List{
		{Severity: diag.Error, File: "vm/base/b.yaml", Line: 7, Column: 11, Ref: "VM/b", Field: "spec.memory", Message: "not a whole number of MiB"},
		{Severity: diag.Warning, File: "vm/base/a.yaml", Line: 2, Column: 1, Message: "unknown field"},
	}}
	got := render.Text([]plan.Plan{{Cluster: "zeta", ID: "z"}, {Cluster: "beta", ID: "b"}}, []plan.Rejection{rej})
	want := `=== beta ===
no drift — PVE matches git
=== zeta ===
no drift — PVE matches git
=== aaa ===
ABORTED: manifest parse error (1 error, 1 warning); nothing is written to PVE
  vm/base/a.yaml:2:1: warning: unknown field
  vm/base/b.yaml:7:11: VM/b: spec.memory: not a whole number of MiB
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("text (-want +got):\n%s", diff)
	}
}

func TestJSONKeepsAStableFieldOrderAndNamesSecretsOnly(t *testing.T) {
	p := samplePlan()
	p.Operations[3].Values = []plan.KV{{Key: "memory", Value: "4096"}, {Key: "cipassword", SecretRefs: []string{"cloud-init.passwords.default"}}}
	p.Operations[3].Precondition = plan.Precondition{Digest: "d1"}
	p.Record = []plan.Record{{Owned: plan.Owned{VMID: 100, Ref: "VM/web", Node: "pve1"}, After: "vm-100-create"}}
	a, err := render.JSON([]plan.Plan{p}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := render.JSON([]plan.Plan{p}, nil)
	if err != nil || string(a) != string(b) {
		t.Fatal("JSON is not deterministic")
	}
	var doc struct {
		Clusters []render.PlanJSON `json:"clusters"`
	}
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Clusters) != 1 || len(doc.Clusters[0].Operations) != len(p.Operations) || doc.Clusters[0].Record[0].After != "vm-100-create" {
		t.Fatalf("document: %+v", doc)
	}
	s := string(a)
	for _, ordered := range [][]string{
		{`"cluster"`, `"plan_id"`, `"no_drift"`, `"held"`, `"operations"`, `"findings"`, `"record"`, `"resources"`},
		{`"id": "vm-101-configure"`, `"action": "configure"`, `"reason"`, `"values"`, `"precondition"`, `"changes"`},
	} {
		last := -1
		for _, key := range ordered {
			i := strings.Index(s[max(last, 0):], key)
			if i < 0 {
				t.Fatalf("%s missing or out of order in:\n%s", key, s)
			}
			last += i + 1
		}
	}
	if !strings.Contains(s, `"secret_refs": [`) || strings.Contains(s, "password\": \"") {
		t.Error("a secret is not carried as a reference")
	}
}

// A rejection for a cause that may pass says when it is planned again, in text and JSON; a permanent one
// says nothing of a retry.
func TestTransientRejectionSaysWhenItIsPlannedAgain(t *testing.T) {
	rej := plan.Rejection{Cluster: "lab", Reason: plan.RejectObserve, Transient: true,
		RetryAt: time.Date(2026, 12, 2, 10, 0, 4, 0, time.UTC), Diagnostics: diag.List{{Severity: diag.Error, File: "proxops.yaml",
			Message: "pve inventory read failed: node pve1: GET /nodes/pve1/qemu: 503 Service Unavailable"}}}
	text := render.RejectionText(rej)
	if !strings.Contains(text, "503 Service Unavailable") || !strings.Contains(text, "planned again at 2026-12-02T10:00:04Z") {
		t.Fatalf("text:\n%s", text)
	}
	js, err := json.Marshal(render.RejectionToJSON(rej))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"transient":true,"retry_at":"2026-12-02T10:00:04Z"`) {
		t.Fatalf("json: %s", js)
	}
	rej.Transient, rej.RetryAt = false, time.Time{}
	if text := render.RejectionText(rej); strings.Contains(text, "planned again") {
		t.Fatalf("a permanent rejection announces a retry:\n%s", text)
	}
	if js, _ := json.Marshal(render.RejectionToJSON(rej)); strings.Contains(string(js), "retry_at") || strings.Contains(string(js), "transient") {
		t.Fatalf("a permanent rejection's json: %s", js)
	}
}

// The gaps of the declared guests follow the plan's sections in the text, one line each as status shows
// them, and are a field of the plan's JSON; a plan whose only news is gaps is still no drift.
func TestPlanShowsTheGapsOfItsGuests(t *testing.T) {
	p := plan.Plan{ID: "0123456789abcdef", Cluster: "lab", Resources: []string{"LXC/dns"}, Gaps: []inventory.Gap{
		{Setting: inventory.Setting{Kind: "LXC", Name: "dns", Node: "pve1", VMID: 200, Key: "lxc.apparmor.profile", Value: "unconfined"}, Note: "raw LXC key", Managed: true},
		{Setting: inventory.Setting{Kind: "LXC", Name: "dns", Node: "pve1", VMID: 200, Key: "lxc.cgroup2.devices.allow", Value: "c 10:200 rwm"}, Managed: true},
	}}
	want := "=== lab ===\n" + render.NoDriftCluster + "\n" +
		"=== gaps (live settings the manifests do not carry; never written) (2) ===\n" +
		"  gap: LXC/dns pve1/200 lxc.apparmor.profile=unconfined (raw LXC key)\n" +
		"  gap: LXC/dns pve1/200 lxc.cgroup2.devices.allow=c 10:200 rwm\n"
	if got := render.PlanText(p); got != want {
		t.Errorf("text:\n%s\nwant:\n%s", got, want)
	}
	j := render.ToJSON(p)
	if !j.NoDrift || len(j.Gaps) != 2 || j.Gaps[0].Key != "lxc.apparmor.profile" || !j.Gaps[0].Managed {
		t.Errorf("json: %+v", j)
	}
	p.Gaps = nil
	if j := render.ToJSON(p); j.Gaps != nil {
		t.Errorf("a plan without gaps carries a gaps field: %+v", j.Gaps)
	}
}
