package status

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
)

//go:embed page.html.tmpl
var pageSource string

func parsePage() (*template.Template, error) {
	t, err := template.New("page").Parse(pageSource)
	if err != nil {
		return nil, fmt.Errorf("status: page template: %w", err)
	}
	return t, nil
}

// pageData is what the page shows.
type pageData struct {
	Refresh   int
	Now       string
	Ready     bool
	Summary   string
	Health    health
	Stale     []staleSource
	Attention []attention
	// MoreAttention counts the entries beyond the first pageRows.
	MoreAttention int
	Clusters      []pageCluster
}

// staleSource is a repository that cannot be read: planning uses its last good commit.
type staleSource struct {
	Repo, Branch, Commit, Error string
	LastRead                    timeCell
}

type attention struct {
	Cluster, Ref string
	State        string
	Detail       string
}

type pageCluster struct {
	Name, Phase, Reason   string
	Seen, Applied, PlanID string
	LastPlan, LastSuccess timeCell
	Counters              render.CountersDocument
	Resources             []pageResource
	Findings              []render.FindingDocument
	Gaps                  []render.GapDocument
	Security              []render.SecurityWarningDocument
	Diagnostics           []render.DiagnosticDocument
	HeldPrunes            []string
	// Refused are the latest operations the cluster's executors refused, oldest first.
	Refused []render.RefusedOperationDocument
	// FailingNotifications are the providers whose last delivery about the cluster failed.
	FailingNotifications []render.NotificationDeliveryDocument
	Revision             int64
	// MoreResources, MoreFindings and MoreGaps count what the page leaves out (pageRows per list); the
	// JSON of /status/<cluster> has everything. MoreRefused counts the refused operations not shown,
	// including those the report no longer keeps.
	MoreResources, MoreFindings, MoreGaps, MoreRefused int
}

// pageRows is the most rows the page shows per list of a cluster: the page of a cluster of thousands of
// guests stays small and quick to render. Resources that are not converged come first.
const pageRows = 200

type pageResource struct {
	render.ResourceDocument
	ID      string
	Updated timeCell
}

// timeCell is a time shown as "3m ago" with the exact time in a tooltip.
type timeCell struct {
	Ago, Exact string
}

func newTimeCell(t, now time.Time) timeCell {
	if t.IsZero() {
		return timeCell{Ago: "never"}
	}
	return timeCell{Ago: ago(now.Sub(t)), Exact: t.UTC().Format(time.RFC3339)}
}

func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s ago"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h ago"
	default:
		return strconv.Itoa(int(d.Hours()/24)) + "d ago"
	}
}

// problem reports whether a resource's state needs a person: a failure, an anomaly, or a guest an operator
// rolled back, which stays as it is (suspended from correction) until someone decides.
func problem(state report.ResourceState) bool {
	return state == report.StateFailed || state == report.StateAnomalous || state == report.StateSuspended
}

func (s *service) pageData() pageData {
	snap := s.snap.Load()
	now := s.cfg.Now()
	d := pageData{Refresh: int(s.cfg.Refresh.Seconds()), Now: now.UTC().Format(time.RFC3339), Ready: snap.ready,
		Health: judge(snap, now, s.cfg.StaleAfter)}
	if d.Refresh < 1 {
		d.Refresh = 1
	}
	for _, h := range snap.sources {
		if h.Stale {
			d.Stale = append(d.Stale, staleSource{Repo: h.Repo, Branch: h.Branch, Commit: h.Commit, Error: h.LastError,
				LastRead: newTimeCell(h.LastSuccess, now)})
		}
	}
	counts := map[report.Phase]int{}
	for _, st := range snap.statuses {
		counts[st.Phase]++
		doc := render.NewReportDocument(st.Report)
		pc := pageCluster{Name: st.Cluster, Phase: string(st.Phase), Reason: st.Reason, Seen: st.LastCommitSeen,
			Applied: st.LastCommitApplied, PlanID: st.PlanID, Counters: doc.Counters, Findings: doc.Findings,
			Gaps: doc.Gaps, Security: doc.SecurityWarnings, Diagnostics: doc.Diagnostics, HeldPrunes: doc.HeldPrunes, Revision: st.Revision,
			LastPlan: newTimeCell(st.Timing.LastPlanAt, now), LastSuccess: newTimeCell(st.Timing.LastSuccessAt, now)}
		if len(pc.Findings) > pageRows {
			pc.MoreFindings, pc.Findings = len(pc.Findings)-pageRows, pc.Findings[:pageRows]
		}
		if len(pc.Gaps) > pageRows {
			pc.MoreGaps, pc.Gaps = len(pc.Gaps)-pageRows, pc.Gaps[:pageRows]
		}
		pc.Refused = doc.RefusedOperations
		if len(pc.Refused) > pageRows {
			pc.Refused = pc.Refused[len(pc.Refused)-pageRows:]
		}
		pc.MoreRefused = max(st.Counters.Refused-len(pc.Refused), 0)
		pc.FailingNotifications = doc.FailingNotifications
		// A long list shows what is not converged first.
		var shown []int
		for pass := range 2 {
			for i := range doc.Resources {
				if len(shown) == pageRows {
					break
				}
				converged := st.Resources[i].State == report.StateConverged
				if len(doc.Resources) <= pageRows || converged == (pass == 1) {
					shown = append(shown, i)
				}
			}
			if len(doc.Resources) <= pageRows {
				break
			}
		}
		pc.MoreResources = len(doc.Resources) - len(shown)
		for _, i := range shown {
			pc.Resources = append(pc.Resources, pageResource{ResourceDocument: doc.Resources[i]})
		}
		for i, r := range doc.Resources {
			if problem(st.Resources[i].State) {
				detail := r.LastError
				if detail == "" {
					detail = r.Reason
				}
				d.Attention = append(d.Attention, attention{Cluster: st.Cluster, Ref: r.Kind + "/" + r.Name, State: r.State, Detail: detail})
			}
		}
		for i := range pc.Resources {
			pr := &pc.Resources[i]
			pr.ID = "-"
			if pr.VMID > 0 {
				pr.ID = strconv.Itoa(pr.VMID)
			}
			if t, ok := st.Timing.Resource(pr.Kind, pr.Name); ok {
				pr.Updated = newTimeCell(t.UpdatedAt, now)
			}
		}
		if st.Phase == report.PhaseRejected || st.Phase == report.PhaseHeld {
			d.Attention = append(d.Attention, attention{Cluster: st.Cluster, State: string(st.Phase), Detail: st.Reason})
		}
		if n := len(st.Refused); n > 0 {
			last := st.Refused[n-1]
			d.Attention = append(d.Attention, attention{Cluster: st.Cluster, State: stateRefused,
				Detail: fmt.Sprintf("executors refused %s, the latest on %s (%s): run %s, operation %s",
					plural(st.Counters.Refused, "operation"), last.Node, last.Reason, last.RunID, last.OpID)})
		}
		for _, n := range st.FailingNotifications {
			d.Attention = append(d.Attention, attention{Cluster: st.Cluster, State: stateNotificationFailing,
				Detail: fmt.Sprintf("notifications to %s (%s) fail: %s", n.Provider, n.Type, n.Message)})
		}
		d.Clusters = append(d.Clusters, pc)
	}
	// Failed resources first, then the rest, each in cluster, ref order.
	slices.SortStableFunc(d.Attention, func(a, b attention) int {
		return cmp.Compare(rank(a.State), rank(b.State))
	})
	if len(d.Attention) > pageRows {
		d.MoreAttention, d.Attention = len(d.Attention)-pageRows, d.Attention[:pageRows]
	}
	d.Summary = summaryLine(len(snap.statuses), counts)
	return d
}

// stateRefused marks the attention entry of a cluster whose executors refused operations;
// stateNotificationFailing one whose notifications cannot be delivered.
const (
	stateRefused             = "refused"
	stateNotificationFailing = "notification-failing"
)

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func rank(state string) int {
	switch state {
	case string(report.PhaseRejected), string(report.StateFailed), stateRefused:
		return 0
	case string(report.PhaseHeld), stateNotificationFailing:
		return 1
	default:
		return 2
	}
}

func summaryLine(n int, counts map[report.Phase]int) string {
	if n == 0 {
		return "no cluster reported yet"
	}
	phases := slices.Clone(report.Phases)
	slices.SortStableFunc(phases, func(a, b report.Phase) int { return cmp.Compare(b.Severity(), a.Severity()) })
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "%d cluster", n)
	if n != 1 {
		buf.WriteString("s")
	}
	sep := ": "
	for _, p := range phases {
		if counts[p] > 0 {
			fmt.Fprintf(&buf, "%s%d %s", sep, counts[p], p)
			sep = ", "
		}
	}
	return buf.String()
}

func (s *service) servePage(w http.ResponseWriter, _ *http.Request) {
	var buf bytes.Buffer
	if err := s.page.Execute(&buf, s.pageData()); err != nil {
		s.log.Warn("status: render page", "err", err)
		http.Error(w, "render page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	_, _ = w.Write(buf.Bytes())
}
