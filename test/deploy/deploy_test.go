package deploy

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// The alert rules load as Prometheus loads a rule file (unknown fields refused, every expression and template
// checked), every rule is an alert with a severity, a summary and a description, and no alert name repeats.
func TestAlertRulesParseWithThePrometheusRuleParser(t *testing.T) {
	path := filepath.Join(root(t), "deploy", "prometheus", "alerts.yaml")
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}
	seen := map[string]bool{}
	for _, g := range groups.Groups {
		if len(g.Rules) == 0 {
			t.Errorf("group %s has no rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %q; the file holds alerts only", g.Name, r.Record)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: a summary and a description are needed", r.Alert)
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no alerts")
	}
}

// grafanaVariables replaces the dashboard's variables with what Grafana would put in their place.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__range", "6h", "$__interval", "1m", "$cluster", ".*")

// Every query of the Grafana dashboard is valid PromQL once Grafana's variables are in place, and selects
// ProxOps metrics.
func TestDashboardQueriesAreValidPromQL(t *testing.T) {
	path := filepath.Join(root(t), "deploy", "grafana", "proxops.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" {
		t.Error("the dashboard has no uid: importing it twice would make two copies")
	}
	p := parser.NewParser(parser.Options{})
	queries := 0
	for _, panel := range dash.Panels {
		for _, tg := range panel.Targets {
			queries++
			expr, err := p.ParseExpr(grafanaVariables.Replace(tg.Expr))
			if err != nil {
				t.Errorf("panel %q: %q: %v", panel.Title, tg.Expr, err)
				continue
			}
			selectors := 0
			parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					selectors++
					if !strings.HasPrefix(vs.Name, "proxops_") {
						t.Errorf("panel %q: selects %q, not a ProxOps metric", panel.Title, vs.Name)
					}
				}
				return nil
			})
			if selectors == 0 {
				t.Errorf("panel %q: %q selects no metric", panel.Title, tg.Expr)
			}
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
}
