package metrics_test

import (
	"bytes"

	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/proxops/proxops/internal/metrics"
)

// scrape renders a registry as the text exposition format and parses it back, as Prometheus would.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(&buf)
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	names := map[string]bool{}
	for name := range parsed {
		names[name] = true
	}
	return names
}

func TestEveryGroupRegistersOnOneRegistryAndScrapes(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterProcess(reg, metrics.BuildInfo{Version: "v1.2.3", Commit: "abc"}); err != nil {
		t.Fatal(err)
	}
	st, err := metrics.NewStatus(reg)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := metrics.NewExecutor(prometheus.WrapRegistererWith(prometheus.Labels{"cluster": "lab", "node": "pve1"}, reg))
	if err != nil {
		t.Fatal(err)
	}
	wa, err := metrics.NewWatcher(reg)
	if err != nil {
		t.Fatal(err)
	}
	st.Cycles.WithLabelValues("ok").Inc()
	st.Reconciles.WithLabelValues("lab", "ok").Inc()
	st.ReconcileDuration.WithLabelValues("lab", "ok").Observe(1.5)
	st.LastSuccess.WithLabelValues("lab").Set(1)
	st.Objects.WithLabelValues("VM", "converged").Set(3)
	st.Resources.WithLabelValues("lab", "VM", "converged").Set(3)
	st.Drifted.WithLabelValues("lab").Set(0)
	st.Phase.WithLabelValues("lab", "converged").Set(1)
	st.Gaps.WithLabelValues("lab").Set(2)
	st.Findings.WithLabelValues("lab", "anomaly").Set(1)
	st.Actions.WithLabelValues("VM", "create", "ok").Inc()
	st.Operations.WithLabelValues("lab", "create", "succeeded").Inc()
	st.PruneDeferred.WithLabelValues("VM").Inc()
	st.Anomalies.WithLabelValues("anomaly").Inc()
	ex.PVERequestDuration.WithLabelValues("GET", "ok").Observe(0.01)
	ex.PVETaskDuration.WithLabelValues("qmcreate", "ok").Observe(3)
	ex.InFlight.Set(1)
	ex.ReadOnly.Set(0)
	ex.PVERead(time.Now())
	wa.WebhookRequests.WithLabelValues("github", "accepted").Inc()
	wa.GitFetchDuration.WithLabelValues("ok").Observe(0.2)
	wa.DesiredStale.Set(0)
	wa.GitFetched(time.Now())

	names := scrape(t, reg)
	for _, want := range []string{
		"proxops_build_info", "go_goroutines", "process_start_time_seconds",
		"proxops_cycles_total", "proxops_reconciles_total", "proxops_reconcile_duration_seconds",
		"proxops_last_successful_reconcile_timestamp_seconds", "proxops_objects", "proxops_resources",
		"proxops_drifted_resources", "proxops_cluster_phase", "proxops_gaps", "proxops_findings",
		"proxops_actions_total", "proxops_operations_total", "proxops_prune_deferred_total", "proxops_anomalies_total",
		"proxops_pve_request_duration_seconds", "proxops_pve_task_duration_seconds", "proxops_operations_in_flight",
		"proxops_read_only", "proxops_pve_last_read_age_seconds",
		"proxops_webhook_requests_total", "proxops_git_fetch_duration_seconds", "proxops_desired_stale",
		"proxops_git_last_fetch_age_seconds",
	} {
		if !names[want] {
			t.Errorf("%s missing from the exposition", want)
		}
	}
}

func TestRegisteringTheStatusGroupTwiceOrOnNoRegistryFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.NewStatus(reg); err != nil {
		t.Fatal(err)
	}
	_, err := metrics.NewStatus(reg)
	if err == nil || !strings.Contains(err.Error(), "register status metrics") {
		t.Fatalf("second registration: err = %v", err)
	}
	if _, err := metrics.NewWatcher(nil); err == nil {
		t.Error("registering on no registry succeeded")
	}
	if _, err := metrics.NewExecutor(nil); err == nil {
		t.Error("registering on no registry succeeded")
	}
}

func TestAServiceStartedAgainOnItsRegistryKeepsItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := metrics.NewWatcher(reg)
	if err != nil {
		t.Fatal(err)
	}
	first.WebhookRequests.WithLabelValues("github", "accepted").Inc()
	second, err := metrics.NewWatcher(reg)
	if err != nil {
		t.Fatal(err)
	}
	second.WebhookRequests.WithLabelValues("github", "accepted").Inc()
	if got := testutil.ToFloat64(first.WebhookRequests.WithLabelValues("github", "accepted")); got != 2 {
		t.Errorf("webhook requests = %v after one from each start, want 2 on one series", got)
	}

	node := func(n string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"cluster": "lab", "node": n}, reg)
	}
	a, err := metrics.NewExecutor(node("pve1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := metrics.NewExecutor(node("pve2"))
	if err != nil {
		t.Fatal(err)
	}
	a.ReadOnly.Set(1)
	b.ReadOnly.Set(0)
	a.Unregister(node("pve1"))
	if _, err := metrics.NewExecutor(node("pve1")); err != nil {
		t.Fatalf("an executor of pve1 started again after the first one stopped: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "proxops_read_only"); err != nil || n != 2 {
		t.Errorf("proxops_read_only series = %d (%v), want one per node", n, err)
	}
}

func TestNothingIsRegisteredOnTheGlobalRegistry(t *testing.T) {
	before, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := metrics.NewStatus(reg); err != nil {
		t.Fatal(err)
	}
	after, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range after {
		if strings.HasPrefix(mf.GetName(), "proxops_") {
			t.Errorf("%s is on the global registry", mf.GetName())
		}
	}
	if len(after) != len(before) {
		t.Errorf("global registry grew from %d to %d families", len(before), len(after))
	}

}

func TestAgeGaugesGrowUntilTheNextSuccess(t *testing.T) {
	reg := prometheus.NewRegistry()
	wa, err := metrics.NewWatcher(reg)
	if err != nil {
		t.Fatal(err)
	}
	wa.GitFetched(time.Now().Add(-90 * time.Second))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "proxops_git_last_fetch_age_seconds" {
			continue
		}
		if v := mf.GetMetric()[0].GetGauge().GetValue(); v < 90 || v > 600 {
			t.Errorf("age = %v, want about 90 s", v)
		}
		return
	}
	t.Error("no proxops_git_last_fetch_age_seconds")
}
