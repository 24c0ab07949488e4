package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// registeredMetricNames are the names of every metric family on a registry (observed or not), read from the
// collectors' descriptions.
func registeredMetricNames(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	names := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("a description without a name: %s", d)
		}
		names[m[1]] = true
	}
	return names
}

var promName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// queriedMetrics are the ProxOps metric names a PromQL query uses.
func queriedMetrics(query string) []string {
	var out []string
	for _, tok := range promName.FindAllString(query, -1) {
		if strings.HasPrefix(tok, "proxops_") {
			out = append(out, tok)
		}
	}
	return out
}

// known reports whether a series name belongs to a registered family (a histogram's series carry _bucket,
// _sum and _count).
func known(names map[string]bool, series string) bool {
	if names[series] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// dashboardQueries are the PromQL queries of a Grafana dashboard: every target's expr and every templating
// query, with the panel's title.
func dashboardQueries(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", path, p.Title)
		}
		for _, tg := range p.Targets {
			out["panel "+p.Title] = append(out["panel "+p.Title], tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			out["variable "+v.Name] = append(out["variable "+v.Name], v.Definition)
		}
	}
	return out
}

// alertQueries are the expressions of a Prometheus rule file, by alert name.
func alertQueries(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = append(out["alert "+r.Alert], r.Expr)
		}
	}
	return out
}

// Every query of the Grafana dashboard and of the alert rules names metrics that a running proxops up
// registers (all of its services' collectors, observed or not), and every query names at least one. The
// dashboard covers what an operator looks at first; the rules cover the alerts docs/status.md recommends
// and an executor gone and a stuck queue.
func TestDashboardAndAlertRulesQueryRegisteredMetrics(t *testing.T) {
	var (
		mu  sync.Mutex
		reg *prometheus.Registry
	)
	upRegistryObserver = func(r *prometheus.Registry) { mu.Lock(); reg = r; mu.Unlock() }
	t.Cleanup(func() { upRegistryObserver = nil })
	e := newDemoEnv(t)
	u := e.startUp()
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())
	mu.Lock()
	r := reg
	mu.Unlock()
	if r == nil {
		t.Fatal("proxops up did not hand over its registry")
	}
	names := registeredMetricNames(t, r)

	root := repoRoot(t)
	queries := dashboardQueries(t, filepath.Join(root, "deploy", "grafana", "proxops.json"))
	alerts := alertQueries(t, filepath.Join(root, "deploy", "prometheus", "alerts.yaml"))
	used := map[string]bool{}
	for _, set := range []map[string][]string{queries, alerts} {
		for where, exprs := range set {
			for _, expr := range exprs {
				ms := queriedMetrics(expr)
				if len(ms) == 0 {
					t.Errorf("%s: %q names no ProxOps metric", where, expr)
				}
				for _, m := range ms {
					used[m] = true
					if !known(names, m) {
						t.Errorf("%s: %q uses %s, which nothing registers", where, expr, m)
					}
				}
			}
		}
	}
	for _, want := range []string{"proxops_cluster_phase", "proxops_reconcile_duration_seconds_bucket", "proxops_operations_total",
		"proxops_drifted_resources", "proxops_pve_request_duration_seconds_bucket", "proxops_pve_task_duration_seconds_bucket",
		"proxops_queue_pending_messages", "proxops_webhook_requests_total", "proxops_last_successful_reconcile_timestamp_seconds",
		"proxops_queue_waiting_pulls", "proxops_queue_delivered_sequence", "proxops_notifications_total", "proxops_notification_failing"} {
		if !used[want] {
			t.Errorf("neither the dashboard nor the rules use %s", want)
		}
	}
	var alertNames []string
	for where := range alerts {
		alertNames = append(alertNames, strings.TrimPrefix(where, "alert "))
	}
	for _, want := range []string{"ProxOpsClusterFailed", "ProxOpsNoSuccessfulReconcile", "ProxOpsDrift", "ProxOpsExecutorGone", "ProxOpsQueueStuck", "ProxOpsNotificationFailing"} {
		if !slices.Contains(alertNames, want) {
			t.Errorf("alerts.yaml has no %s (it has %v)", want, alertNames)
		}
	}
}
