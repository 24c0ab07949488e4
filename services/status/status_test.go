package status_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

var (
	downloadISO = plan.Operation{ID: "op-001", Node: "pve1", Ref: "ISO/debian-12", Action: plan.ActionDownload,
		Storage: "local", Reason: "ISO debian-12.iso not present on storage local on pve1; will download"}
	createWeb = plan.Operation{ID: "op-002", Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Ref: "VM/web-01",
		Action: plan.ActionCreate, Reason: "VM/web-01: not on PVE; will create", DependsOn: []string{"op-001"}}
	startWeb = plan.Operation{ID: "op-003", Node: "pve1", VMID: 101, GuestType: inventory.QEMU, Ref: "VM/web-01",
		Action: plan.ActionStart, Reason: `VM/web-01: power "stopped" → "running"`, DependsOn: []string{"op-002"}}
	configureDB = plan.Operation{ID: "op-004", Node: "pve2", VMID: 102, GuestType: inventory.QEMU, Ref: "VM/db-01",
		Action: plan.ActionConfigure, Reason: "VM/db-01: config drift (memory)",
		Precondition: plan.Precondition{Digest: "8f2c1e0d9b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"}}
	createCache = plan.Operation{ID: "op-005", Node: "pve2", VMID: 201, GuestType: inventory.LXC, Ref: "LXC/cache",
		Action: plan.ActionCreate, Reason: "LXC/cache: not on PVE; will create"}
	pruneOld = plan.Operation{ID: "op-006", Node: "pve2", VMID: 190, GuestType: inventory.LXC, Ref: "LXC/old-ct",
		Action: plan.ActionDelete, Reason: "present on PVE (proxops-tagged) but absent in git"}

	alphaResources = []string{"ISO/debian-12", "LXC/cache", "VM/db-01", "VM/web-01"}
	betaResources  = []string{"LXC/cache", "VM/db-01"}

	foreignGuest = plan.Finding{Kind: plan.FindingSkipped, Ref: "VM/legacy", Node: "pve1", VMID: 300,
		Message: "live object without proxops tag; never touched"}
	diskAnomaly = plan.Finding{Kind: plan.FindingAnomaly, Ref: "VM/db-01", Node: "pve2", VMID: 102, Field: "spec.disks[0].size",
		Message: "disk scsi0 would shrink from 40G to 32G; not written"}
	argsGap = inventory.Gap{Setting: inventory.Setting{Kind: "VM", Name: "db-01", Node: "pve2", VMID: 102, Key: "args", Value: "-cpu host"}, Note: "not modelled: cpu flags", Managed: true}
)

// uniqueRun is a run id as a planner makes one: different every time.
func uniqueRun(name string) string { return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()) }

// converge: alpha applies a plan whose operations all succeed.
func converge(p *publisher, e event.RepoChanged) {
	r := runOf("alpha", uniqueRun("a"), e)
	p.planned(r, plan.Plan{Resources: alphaResources, Operations: []plan.Operation{downloadISO, createWeb, startWeb},
		Findings: []plan.Finding{foreignGuest}})
	for _, op := range []plan.Operation{downloadISO, createWeb, startWeb} {
		p.result(r, op, plan.StatusStarted, "")
		p.result(r, op, plan.StatusProgress, "task running")
		p.result(r, op, plan.StatusSucceeded, "TASK OK")
	}
	p.finished(r, plan.OutcomeSucceeded, done(downloadISO, plan.OpSucceeded, "TASK OK"),
		done(createWeb, plan.OpSucceeded, "TASK OK"), done(startWeb, plan.OpSucceeded, "TASK OK"))
}

// failBeta: beta's configure fails on a locked guest, its create succeeds; the plan reports an anomaly.
func failBeta(p *publisher, e event.RepoChanged) {
	r := runOf("beta", uniqueRun("b"), e)
	p.planned(r, plan.Plan{Resources: betaResources, Operations: []plan.Operation{configureDB, createCache},
		Findings: []plan.Finding{diskAnomaly}})
	p.result(r, configureDB, plan.StatusStarted, "")
	p.result(r, createCache, plan.StatusStarted, "")
	p.result(r, configureDB, plan.StatusFailed, "VM 102 is locked (backup)")
	p.result(r, createCache, plan.StatusSucceeded, "TASK OK")
	p.finished(r, plan.OutcomeFailed, done(configureDB, plan.OpFailed, "VM 102 is locked (backup)"),
		done(createCache, plan.OpSucceeded, "TASK OK"))
	p.gaps("beta", argsGap)
}

// twoClusters is a realistic history: a push, alpha converges, beta fails, gaps arrive.
func twoClusters(p *publisher) {
	e := p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook)
	converge(p, e)
	failBeta(p, e)
	p.gaps("alpha")
}

type resourceView struct {
	Ref, State, LastAction, LastError string
}

func resources(r reportDoc) []resourceView {
	var out []resourceView
	for _, x := range r.Resources {
		out = append(out, resourceView{x.Kind + "/" + x.Name, x.State, x.LastAction, x.LastError})
	}
	return out
}

func TestStatusFollowsPublishedHistories(t *testing.T) {
	t.Parallel()
	commit := "3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f"
	tests := []struct {
		name      string
		history   func(p *publisher)
		cluster   string
		phase     string
		reason    string
		applied   string
		resources []resourceView
		check     func(t *testing.T, r reportDoc)
	}{
		{
			name: "convergence", cluster: "alpha", phase: "converged", applied: commit,
			history: func(p *publisher) { converge(p, p.repoChanged(commit, event.TriggerWebhook)) },
			resources: []resourceView{
				{"ISO/debian-12", "converged", "download", ""},
				{"LXC/cache", "converged", "", ""},
				{"VM/db-01", "converged", "", ""},
				{"VM/legacy", "skipped", "", ""},
				{"VM/web-01", "converged", "start", ""},
			},
			check: func(t *testing.T, r reportDoc) {
				if r.Counters.ActionsOK != 3 || r.Counters.Plans != 1 {
					t.Errorf("counters = %+v", r.Counters)
				}
			},
		},
		{
			name: "rejection", cluster: "beta", phase: "rejected", reason: "parse_error: 2 errors; nothing was applied; " + report.WaitsForChange,
			history: func(p *publisher) {
				e := p.repoChanged(commit, event.TriggerWebhook)
				p.rejected(runOf("beta", "", e), plan.RejectParse,
					diag.Diagnostic{Severity: diag.Error, File: "vm/beta/db-01.yaml", Line: 9, Column: 5, Ref: "VM/db-01", Field: "spec.memory", Message: `invalid size "lots"`},
					diag.Diagnostic{Severity: diag.Error, File: "clusters/beta/resources.yaml", Line: 3, Column: 3, Message: "../../vm/beta/gone.yaml: no such file"})
			},
			check: func(t *testing.T, r reportDoc) {
				if len(r.Diagnostics) != 2 || r.Counters.Rejections != 1 {
					t.Errorf("diagnostics %d, rejections %d", len(r.Diagnostics), r.Counters.Rejections)
				}
			},
		},
		{
			name: "failed operation", cluster: "beta", phase: "failed", reason: "1 operation failed; the next plan retries",
			history: func(p *publisher) { failBeta(p, p.repoChanged(commit, event.TriggerWebhook)) },
			resources: []resourceView{
				{"LXC/cache", "converged", "create", ""},
				{"VM/db-01", "failed", "configure", "VM 102 is locked (backup)"},
			},
			check: func(t *testing.T, r reportDoc) {
				if r.Counters.ActionsErr != 1 || r.Counters.Gaps != 1 || r.Counters.Anomalies != 1 {
					t.Errorf("counters = %+v", r.Counters)
				}
			},
		},
		{
			name: "drift", cluster: "alpha", phase: "drifted", reason: "dry run: 2 operations not applied", applied: commit,
			history: func(p *publisher) {
				e := p.repoChanged(commit, event.TriggerWebhook)
				p.planned(runOf("alpha", uniqueRun("a"), e), plan.Plan{Resources: alphaResources})
				tick := p.repoChanged(commit, event.TriggerDrift)
				dry := runOf("alpha", "", tick)
				dry.DryRun = true
				p.planned(dry, plan.Plan{Resources: alphaResources, Operations: []plan.Operation{configureDB, pruneOld}})
			},
			resources: []resourceView{
				{"ISO/debian-12", "converged", "", ""},
				{"LXC/cache", "converged", "", ""},
				{"LXC/old-ct", "orphan", "", ""},
				{"VM/db-01", "drift", "", ""},
				{"VM/web-01", "converged", "", ""},
			},
		},
		{
			name: "hold", cluster: "alpha", phase: "held", reason: "would prune 3 of 4 owned LXC guests",
			history: func(p *publisher) {
				e := p.repoChanged(commit, event.TriggerWebhook)
				r := runOf("alpha", uniqueRun("a"), e)
				p.planned(r, plan.Plan{Resources: alphaResources, Operations: []plan.Operation{pruneOld}, Held: true,
					HeldReason: "would prune 3 of 4 owned LXC guests"})
				p.held(r, "would prune 3 of 4 owned LXC guests", "LXC/old-ct")
			},
			check: func(t *testing.T, r reportDoc) {
				if diff := cmp.Diff([]string{"LXC/old-ct"}, r.HeldPrunes); diff != "" {
					t.Errorf("held prunes (-want +got):\n%s", diff)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sys := startSystem(t)
			tt.history(sys.publisher())
			r := sys.settle().report(t, tt.cluster)
			if r.Phase != tt.phase || (tt.reason != "" && r.Reason != tt.reason) {
				t.Errorf("phase %q (%s), want %q (%s)", r.Phase, r.Reason, tt.phase, tt.reason)
			}
			if r.LastCommitSeen != commit || r.LastCommitApplied != tt.applied {
				t.Errorf("commits seen %q applied %q, want %q and %q", r.LastCommitSeen, r.LastCommitApplied, commit, tt.applied)
			}
			if tt.resources != nil {
				if diff := cmp.Diff(tt.resources, resources(r)); diff != "" {
					t.Errorf("resources (-want +got):\n%s", diff)
				}
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

var (
	timestampRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`)
	runIDRE     = regexp.MustCompile(`"run-|[ab]-\d{10,}`)
)

func TestTwoRunsOfTheSameHistoryGiveByteIdenticalReports(t *testing.T) {
	t.Parallel()
	var first string
	for i := range 2 {
		sys := startSystem(t)
		twoClusters(sys.publisher())
		got := sys.settle().deterministic()
		for _, leak := range []string{"UPID:", "8f2c1e0d9b7a", "task running"} {
			if strings.Contains(got, leak) {
				t.Errorf("the deterministic part contains %q:\n%s", leak, got)
			}
		}
		if timestampRE.MatchString(got) || runIDRE.MatchString(got) {
			t.Errorf("the deterministic part contains a time or a run id:\n%s", got)
		}
		if i == 0 {
			first = got
			continue
		}
		if got != first {
			t.Errorf("two runs differ:\n%s", cmp.Diff(first, got))
		}
	}
}

func TestARestartRebuildsTheSameStatusWithoutCountingTwice(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	twoClusters(p)
	before := sys.settle().deterministic()

	sys.restartService()
	if got := sys.settle().deterministic(); got != before {
		t.Fatalf("after a restart (-before +after):\n%s", cmp.Diff(before, got))
	}

	// Without the bucket, the reports are rebuilt from the streams alone.
	sys.stopService()
	ctx := testContext(t)
	keys, err := sys.bus.Keys(ctx, bus.BucketStatus)
	if err != nil || len(keys) != 2 {
		t.Fatalf("bucket keys %v, %v; want alpha and beta", keys, err)
	}
	for _, k := range keys {
		if err := sys.bus.DeleteKey(ctx, bus.BucketStatus, k); err != nil {
			t.Fatal(err)
		}
	}
	sys.startService()
	if got := sys.settle().deterministic(); got != before {
		t.Fatalf("rebuilt from the streams (-before +after):\n%s", cmp.Diff(before, got))
	}

	// One more plan counts once.
	sys.restartService()
	e := p.repoChanged("5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d", event.TriggerPoll)
	p.planned(runOf("alpha", uniqueRun("a"), e), plan.Plan{Resources: alphaResources})
	r := sys.settle().report(t, "alpha")
	if r.Counters.Plans != 2 || r.Phase != "converged" || r.LastCommitApplied != e.Commit {
		t.Errorf("after one more plan: plans %d phase %s applied %s", r.Counters.Plans, r.Phase, r.LastCommitApplied)
	}
}

func TestEveryChangeIsStoredAndPublishedPerCluster(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	twoClusters(sys.publisher())
	doc := sys.settle()
	ctx := testContext(t)
	for _, c := range doc.Clusters {
		m := wire.NewClusterStatusMessage()
		if _, err := sys.bus.GetProto(ctx, bus.BucketStatus, c.Cluster, m); err != nil {
			t.Fatal(err)
		}
		stored, err := wire.ClusterStatusFromProto(m)
		if err != nil {
			t.Fatal(err)
		}
		subject, _ := bus.StatusSubject(c.Cluster)
		msg, err := sys.bus.LastMessage(ctx, bus.StreamStatus, subject)
		if err != nil {
			t.Fatal(err)
		}
		published, err := wire.DecodeClusterStatus(ctx, msg.Decode)
		if err != nil {
			t.Fatal(err)
		}
		if stored.Revision != c.Revision || published.Revision != c.Revision {
			t.Errorf("%s: revision served %d, stored %d, published %d", c.Cluster, c.Revision, stored.Revision, published.Revision)
		}
		if published.Phase == "" || published.Tracking.PlansSeq == 0 {
			t.Errorf("%s: published status %+v", c.Cluster, published.Report)
		}
	}
}

func TestClusterEndpointServesOneCluster(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	twoClusters(sys.publisher())
	sys.settle()
	code, body := sys.get("/status/beta")
	if code != http.StatusOK || !strings.Contains(string(body), `"phase": "failed"`) {
		t.Errorf("/status/beta: %d %s", code, body)
	}
	if code, _ := sys.get("/status/nope"); code != http.StatusNotFound {
		t.Errorf("/status/nope: %d, want 404", code)
	}
}

func TestMetricsParseAndCarryTheStatusSeries(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	e := p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook)
	converge(p, e)
	failBeta(p, e)
	p.rejected(runOf("gamma", "", e), plan.RejectObserve, diag.Diagnostic{Severity: diag.Error, Message: "node pve9: 596 connection timed out"})
	sys.settle()
	code, body := sys.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	series := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			series[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	want := map[string]float64{
		"proxops_cycles_total{result=ok}":                                          1,
		"proxops_cycles_total{result=failed}":                                      1,
		"proxops_cycles_total{result=pve_read_error}":                              1,
		"proxops_reconciles_total{cluster=alpha,result=ok}":                        1,
		"proxops_reconciles_total{cluster=beta,result=failed}":                     1,
		"proxops_reconciles_total{cluster=gamma,result=pve_read_error}":            1,
		"proxops_reconcile_duration_seconds{cluster=alpha,result=ok}":              1,
		"proxops_reconcile_duration_seconds{cluster=beta,result=failed}":           1,
		"proxops_operations_total{action=download,cluster=alpha,result=succeeded}": 1,
		"proxops_operations_total{action=create,cluster=alpha,result=succeeded}":   1,
		"proxops_operations_total{action=start,cluster=alpha,result=succeeded}":    1,
		"proxops_operations_total{action=configure,cluster=beta,result=failed}":    1,
		"proxops_operations_total{action=create,cluster=beta,result=succeeded}":    1,
		"proxops_actions_total{action=download,kind=ISO,result=ok}":                1,
		"proxops_actions_total{action=create,kind=VM,result=ok}":                   1,
		"proxops_actions_total{action=create,kind=LXC,result=ok}":                  1,
		"proxops_actions_total{action=configure,kind=VM,result=error}":             1,
		"proxops_objects{kind=VM,state=converged}":                                 2,
		"proxops_objects{kind=VM,state=failed}":                                    1,
		"proxops_objects{kind=VM,state=skipped}":                                   1,
		"proxops_objects{kind=LXC,state=converged}":                                2,
		"proxops_objects{kind=ISO,state=converged}":                                1,
		"proxops_resources{cluster=alpha,kind=VM,state=converged}":                 2,
		"proxops_resources{cluster=alpha,kind=VM,state=skipped}":                   1,
		"proxops_resources{cluster=beta,kind=VM,state=failed}":                     1,
		"proxops_drifted_resources{cluster=alpha}":                                 0,
		"proxops_cluster_phase{cluster=alpha,phase=converged}":                     1,
		"proxops_cluster_phase{cluster=beta,phase=failed}":                         1,
		"proxops_cluster_phase{cluster=beta,phase=converged}":                      0,
		"proxops_cluster_phase{cluster=gamma,phase=rejected}":                      1,
		"proxops_gaps{cluster=alpha}":                                              0,
		"proxops_gaps{cluster=beta}":                                               1,
		"proxops_findings{cluster=alpha,kind=skipped}":                             1,
		"proxops_findings{cluster=beta,kind=anomaly}":                              1,
		"proxops_anomalies_total{type=anomaly}":                                    1,
	}
	for name, v := range want {
		got, ok := series[name]
		if !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	if v := series["proxops_last_successful_reconcile_timestamp_seconds{cluster=alpha}"]; v < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("alpha's last success = %v, want a recent Unix time", v)
	}
	for _, name := range []string{
		"proxops_last_successful_reconcile_timestamp_seconds{cluster=beta}",
		"proxops_last_successful_reconcile_timestamp_seconds{cluster=gamma}",
		"proxops_cycles_total{result=dry_run}",
	} {
		if _, ok := series[name]; ok {
			t.Errorf("%s is present; nothing produced it", name)
		}
	}
}

func TestHealthzFollowsThePredecessorsVerdicts(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	health := func() (int, string) {
		code, body := sys.get("/healthz")
		return code, strings.Join(strings.Fields(string(body)), " ")
	}
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, `"reason": "not_ready"`) {
		t.Errorf("before any reconcile: %d %s", code, body)
	}
	p := sys.publisher()
	e := p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook)
	converge(p, e)
	sys.settle()
	if code, body := health(); code != http.StatusOK || !strings.Contains(body, `"ok": true`) || !strings.Contains(body, `"since"`) {
		t.Errorf("converged: %d %s", code, body)
	}
	failBeta(p, e)
	sys.settle()
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, `"reason": "failed", "clusters": [ "beta" ]`) {
		t.Errorf("failed: %d %s", code, body)
	}
	sys.advance(11 * time.Minute)
	if code, body := health(); code != http.StatusServiceUnavailable || !strings.Contains(body, `"reason": "stale", "clusters": [ "alpha", "beta" ]`) {
		t.Errorf("stale: %d %s", code, body)
	}
	if code, _ := sys.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d", code)
	}
}

// A provider the notifier cannot reach shows under the cluster whose news it could not tell, in /status and
// on the page, without changing the cluster's phase; it goes away once a delivery to it succeeds.
func TestFailingNotificationsShowInStatusUntilTheProviderRecovers(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	converge(p, p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook))
	subject, err := bus.NotifySubject("alpha")
	p.check(err)
	chat := report.NotificationDelivery{Provider: "chat", Type: "slack", Failing: true, Event: "run-failed",
		DeliveryID: "r1.finished.run-failed", Message: "attempt 3 failed: POST https://hooks.slack.com/…: 502 Bad Gateway"}
	hook := report.NotificationDelivery{Provider: "audit", Type: "webhook", Event: "run-failed", DeliveryID: "r1.finished.run-failed"}
	p.publish(subject, wire.NotificationHealthToProto(report.NotificationHealth{Cluster: "alpha",
		Providers: []report.NotificationDelivery{hook, chat}}), "")
	sys.settle()
	code, body := sys.get("/status/alpha")
	var doc struct {
		Report struct {
			Phase   string                                `json:"phase"`
			Failing []render.NotificationDeliveryDocument `json:"failing_notifications"`
		} `json:"report"`
	}
	if err := json.Unmarshal(body, &doc); code != http.StatusOK || err != nil {
		t.Fatalf("/status/alpha: %d %v %s", code, err, body)
	}
	want := []render.NotificationDeliveryDocument{{Provider: "chat", Type: "slack", Event: "run-failed",
		DeliveryID: "r1.finished.run-failed", Message: chat.Message}}
	if doc.Report.Phase != "converged" || !slices.Equal(doc.Report.Failing, want) {
		t.Errorf("report %+v, want phase converged and failing %+v", doc.Report, want)
	}
	if code, page := sys.get("/"); code != http.StatusOK || !strings.Contains(string(page), `data-notification="chat"`) ||
		!strings.Contains(string(page), "notifications to chat (slack) fail") {
		t.Errorf("page %d does not show the failing provider:\n%s", code, page)
	}
	chat.Failing, chat.Message = false, ""
	p.publish(subject, wire.NotificationHealthToProto(report.NotificationHealth{Cluster: "alpha",
		Providers: []report.NotificationDelivery{hook, chat}}), "")
	sys.settle()
	_, body = sys.get("/status/alpha")
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Report.Failing) != 0 {
		t.Errorf("after the recovery: %v %+v", err, doc.Report.Failing)
	}
}
