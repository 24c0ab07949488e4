// Package render turns ProxOps' plans, status reports and adoption reports into text and JSON for people
// and scripts. It is pure: values in, bytes out, in a total order.
package render

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/report"
)

// StatusView is what the status renderers show: every cluster's status, sorted by cluster, when the
// service that holds them started (zero when unknown, as for `proxops status` reading the KV bucket), and the
// watchers' last word on their repositories (empty when unknown).
type StatusView struct {
	ProcessStart time.Time
	Clusters     []report.ClusterStatus
	Sources      []event.SourceHealth
}

// DesiredStale reports whether a repository could not be read at its watcher's last look: planning then goes
// on with the last good tree, and the desired state may be behind git.
func (v StatusView) DesiredStale() bool {
	return slices.ContainsFunc(v.Sources, func(h event.SourceHealth) bool { return h.Stale })
}

// StatusDocument is the /status JSON: the predecessor's process_start, last_cycle and objects, plus one entry
// per cluster whose report is the deterministic part and whose revision and timing are not.
type StatusDocument struct {
	ProcessStart *time.Time        `json:"process_start"`
	LastCycle    *LastCycle        `json:"last_cycle"`
	Objects      []Object          `json:"objects"`
	Clusters     []ClusterDocument `json:"clusters"`
	// Sources are the repositories the watchers follow, sorted by repository and branch; absent when unknown.
	Sources []SourceDocument `json:"sources,omitempty"`
}

// SourceDocument is a watcher's last word on its repository.
type SourceDocument struct {
	Repo   string `json:"repo"`
	Branch string `json:"branch"`
	// Stale is true while the repository cannot be read: Commit, the last good one, is what is planned.
	Stale               bool       `json:"stale"`
	Commit              string     `json:"commit"`
	LastError           string     `json:"last_error,omitempty"`
	LastSuccess         *time.Time `json:"last_success"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	ReportedAt          *time.Time `json:"reported_at"`
}

// LastCycle summarises the last reconcile of every cluster (the predecessor kept only the most recent
// cluster's).
type LastCycle struct {
	Commit        string     `json:"commit"`
	StartedAt     *time.Time `json:"started_at"`
	FinishedAt    *time.Time `json:"finished_at"`
	Objects       int        `json:"objects"`
	ActionsOK     int        `json:"actions_ok"`
	ActionsError  int        `json:"actions_error"`
	Pruned        int        `json:"pruned"`
	PruneDeferred int        `json:"prune_deferred"`
	Skipped       int        `json:"skipped"`
	Anomalies     int        `json:"anomalies"`
	Gaps          int        `json:"gaps"`
	// SecurityWarnings counts live settings that weaken a guest's isolation from its host.
	SecurityWarnings int    `json:"security_warnings"`
	DesiredStale     bool   `json:"desired_stale"`
	ReadOnly         bool   `json:"read_only"`
	Aborted          bool   `json:"aborted"`
	AbortReason      string `json:"abort_reason,omitempty"`
	// Summary is the text status's "last cycle:" verdict (converged, incomplete (…), ABORTED (…), …).
	Summary string `json:"summary"`
}

// Object is one resource in the predecessor's shape.
type Object struct {
	Kind            string     `json:"kind"`
	Name            string     `json:"name"`
	Cluster         string     `json:"cluster"`
	Node            string     `json:"node"`
	ID              int        `json:"id"`
	State           string     `json:"state"`
	LastAction      string     `json:"last_action,omitempty"`
	LastError       string     `json:"last_error,omitempty"`
	LastConvergedAt *time.Time `json:"last_converged_at"`
	PruneReason     string     `json:"prune_reason,omitempty"`
	UpdatedAt       *time.Time `json:"updated_at"`
}

// ClusterDocument is one cluster in /status and the whole of /status/<cluster>.
type ClusterDocument struct {
	Cluster string `json:"cluster"`
	// Report is deterministic: the same history gives the same bytes.
	Report   ReportDocument `json:"report"`
	Revision int64          `json:"revision"`
	Timing   TimingDocument `json:"timing"`
}

// ReportDocument is a cluster's deterministic report. LastTreeApplied is the tree of the last run that
// succeeded; LastAppliedBy the operator user who asked for it when it was a work-tree apply.
type ReportDocument struct {
	Cluster           string                    `json:"cluster"`
	Phase             string                    `json:"phase"`
	Reason            string                    `json:"reason"`
	LastCommitSeen    string                    `json:"last_commit_seen"`
	LastCommitApplied string                    `json:"last_commit_applied"`
	LastTreeApplied   string                    `json:"last_tree_applied,omitempty"`
	LastAppliedBy     string                    `json:"last_applied_by,omitempty"`
	PlanID            string                    `json:"plan_id"`
	Counters          CountersDocument          `json:"counters"`
	Resources         []ResourceDocument        `json:"resources"`
	Findings          []FindingDocument         `json:"findings"`
	HeldPrunes        []string                  `json:"held_prunes"`
	Gaps              []GapDocument             `json:"gaps"`
	SecurityWarnings  []SecurityWarningDocument `json:"security_warnings"`
	Diagnostics       []DiagnosticDocument      `json:"diagnostics"`
	// RefusedOperations are the latest operations the cluster's executors refused to run, oldest first.
	RefusedOperations []RefusedOperationDocument `json:"refused_operations"`
	// FailingNotifications are the notification providers whose last delivery about the cluster failed.
	FailingNotifications []NotificationDeliveryDocument `json:"failing_notifications"`
}

// NotificationDeliveryDocument is a provider's last delivery about a cluster: which event, under which
// delivery id, and why it failed.
type NotificationDeliveryDocument struct {
	Provider   string `json:"provider"`
	Type       string `json:"type"`
	Event      string `json:"event"`
	DeliveryID string `json:"delivery_id"`
	Message    string `json:"message"`
}

// RefusedOperationDocument is an operation an executor refused to run: the executor's node, what the
// operation claimed (run, id, action, guest) and the refusal's reason code and message.
type RefusedOperationDocument struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	RunID   string `json:"run_id"`
	OpID    string `json:"op_id"`
	Action  string `json:"action"`
	Ref     string `json:"ref"`
	VMID    int    `json:"vmid"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// CountersDocument are a cluster's counters.
type CountersDocument struct {
	Objects          int `json:"objects"`
	ActionsOK        int `json:"actions_ok"`
	ActionsErr       int `json:"actions_err"`
	ActionsSkipped   int `json:"actions_skipped"`
	Pruned           int `json:"pruned"`
	PruneDeferred    int `json:"prune_deferred"`
	Skipped          int `json:"skipped"`
	Anomalies        int `json:"anomalies"`
	Gaps             int `json:"gaps"`
	SecurityWarnings int `json:"security_warnings"`
	Drifted          int `json:"drifted"`
	Plans            int `json:"plans"`
	Rejections       int `json:"rejections"`
	// Refused counts every operation the cluster's executors refused since the status began.
	Refused int `json:"refused"`
}

// ResourceDocument is one resource of a report.
type ResourceDocument struct {
	Kind        string `json:"kind"`
	Name        string `json:"name"`
	Node        string `json:"node"`
	VMID        int    `json:"vmid"`
	State       string `json:"state"`
	LastAction  string `json:"last_action"`
	LastError   string `json:"last_error"`
	Reason      string `json:"reason"`
	PruneReason string `json:"prune_reason"`
}

// FindingDocument is one finding of the last plan.
type FindingDocument struct {
	Kind    string `json:"kind"`
	Ref     string `json:"ref"`
	Node    string `json:"node"`
	VMID    int    `json:"vmid"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func gapDocument(g inventory.Gap) GapDocument {
	return GapDocument{SettingDocument: SettingDocument(g.Setting), Note: g.Note, Managed: g.Managed}
}

// text is a gap on one line: Kind/name node/vmid key=value (note); a cluster object's gap has no placement.
func (g GapDocument) text() string {
	line := g.Kind + "/" + g.Name
	if p := placement(g.Node, g.VMID); p != "" {
		line += " " + p
	}
	line += fmt.Sprintf(" %s=%s", g.Key, oneLine(g.Value))
	if g.Note != "" {
		line += " (" + oneLine(g.Note) + ")"
	}
	return line
}

// SettingDocument is one live key of a guest; its fields stand inline in the documents that embed it.
type SettingDocument struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Node  string `json:"node"`
	VMID  int    `json:"vmid"`
	Key   string `json:"key"`
	Value string `json:"value"`
}

// GapDocument is one live key the model does not cover.
type GapDocument struct {
	SettingDocument
	Note    string `json:"note"`
	Managed bool   `json:"managed"`
}

// SecurityWarningDocument is one live setting that weakens a guest's isolation from its host.
type SecurityWarningDocument struct {
	SettingDocument
	Why     string `json:"why"`
	Managed bool   `json:"managed"`
}

// DiagnosticDocument is one diagnostic of the last rejection; Text is its one-line form.
type DiagnosticDocument struct {
	Severity string `json:"severity"`
	File     string `json:"file"`
	Line     int    `json:"line"`
	Column   int    `json:"column"`
	Ref      string `json:"ref"`
	Field    string `json:"field"`
	Message  string `json:"message"`
	Text     string `json:"text"`
}

// TimingDocument is the wall-clock part of a cluster's status.
type TimingDocument struct {
	UpdatedAt     *time.Time `json:"updated_at"`
	LastPlanAt    *time.Time `json:"last_plan_at"`
	LastSuccessAt *time.Time `json:"last_success_at"`
	LastEventAt   *time.Time `json:"last_event_at"`
	LastTriggerAt *time.Time `json:"last_trigger_at"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// NewReportDocument converts a cluster's deterministic report.
func NewReportDocument(r report.Report) ReportDocument {
	c := r.Counters
	d := ReportDocument{
		Cluster: r.Cluster, Phase: string(r.Phase), Reason: r.Reason, LastCommitSeen: r.LastCommitSeen,
		LastCommitApplied: r.LastCommitApplied, LastTreeApplied: r.LastTreeApplied, LastAppliedBy: r.LastAppliedBy,
		PlanID: r.PlanID,
		Counters: CountersDocument{Objects: c.Objects, ActionsOK: c.ActionsOK, ActionsErr: c.ActionsErr,
			ActionsSkipped: c.ActionsSkipped, Pruned: c.Pruned, PruneDeferred: c.PruneDeferred, Skipped: c.Skipped,
			Anomalies: c.Anomalies, Gaps: c.Gaps, Drifted: c.Drifted, Plans: c.Plans, Rejections: c.Rejections,
			SecurityWarnings: c.SecurityWarnings, Refused: c.Refused},
		Resources:         []ResourceDocument{},
		Findings:          []FindingDocument{},
		HeldPrunes:        append([]string{}, r.HeldPrunes...),
		Gaps:              []GapDocument{},
		SecurityWarnings:  []SecurityWarningDocument{},
		Diagnostics:       []DiagnosticDocument{},
		RefusedOperations: []RefusedOperationDocument{},

		FailingNotifications: []NotificationDeliveryDocument{},
	}
	for _, n := range r.FailingNotifications {
		d.FailingNotifications = append(d.FailingNotifications, NotificationDeliveryDocument{Provider: n.Provider, Type: n.Type,
			Event: n.Event, DeliveryID: n.DeliveryID, Message: n.Message})
	}
	for _, x := range r.Refused {
		d.RefusedOperations = append(d.RefusedOperations, RefusedOperationDocument{Cluster: x.Cluster, Node: x.Node,
			RunID: x.RunID, OpID: x.OpID, Action: string(x.Action), Ref: x.Ref, VMID: x.VMID, Reason: x.Reason, Message: x.Message})
	}
	for _, w := range r.Security {
		d.SecurityWarnings = append(d.SecurityWarnings, SecurityWarningDocument{SettingDocument: SettingDocument(w.Setting),
			Why: w.Why, Managed: w.Managed})
	}
	for _, x := range r.Resources {
		d.Resources = append(d.Resources, ResourceDocument{Kind: x.Kind, Name: x.Name, Node: x.Node, VMID: x.VMID,
			State: string(x.State), LastAction: string(x.LastAction), LastError: x.LastError, Reason: x.Reason,
			PruneReason: x.PruneReason})
	}
	for _, f := range r.Findings {
		d.Findings = append(d.Findings, FindingDocument{Kind: string(f.Kind), Ref: f.Ref, Node: f.Node, VMID: f.VMID,
			Field: f.Field, Message: f.Message})
	}
	for _, g := range r.Gaps {
		d.Gaps = append(d.Gaps, gapDocument(g))
	}
	for _, x := range r.Diagnostics {
		d.Diagnostics = append(d.Diagnostics, DiagnosticDocument{Severity: x.Severity.String(), File: x.File,
			Line: x.Line, Column: x.Column, Ref: x.Ref, Field: x.Field, Message: x.Message, Text: x.String()})
	}
	return d
}

// NewClusterDocument converts one cluster's status.
func NewClusterDocument(s report.ClusterStatus) ClusterDocument {
	t := s.Timing
	return ClusterDocument{
		Cluster: s.Cluster, Report: NewReportDocument(s.Report), Revision: s.Revision,
		Timing: TimingDocument{UpdatedAt: timePtr(t.UpdatedAt), LastPlanAt: timePtr(t.LastPlanAt),
			LastSuccessAt: timePtr(t.LastSuccessAt), LastEventAt: timePtr(t.LastEventAt), LastTriggerAt: timePtr(t.LastTriggerAt)},
	}
}

// NewStatusDocument builds the /status document. Objects are sorted by cluster, kind, name.
func NewStatusDocument(v StatusView) StatusDocument {
	clusters := sortedClusters(v.Clusters)
	doc := StatusDocument{ProcessStart: timePtr(v.ProcessStart), Objects: []Object{}, Clusters: []ClusterDocument{}}
	for _, s := range clusters {
		doc.Clusters = append(doc.Clusters, NewClusterDocument(s))
		for _, r := range s.Resources {
			o := Object{Kind: r.Kind, Name: r.Name, Cluster: s.Cluster, Node: r.Node, ID: r.VMID, State: string(r.State),
				LastAction: string(r.LastAction), LastError: r.LastError, PruneReason: r.PruneReason}
			if t, ok := s.Timing.Resource(r.Kind, r.Name); ok {
				o.UpdatedAt, o.LastConvergedAt = timePtr(t.UpdatedAt), timePtr(t.LastConvergedAt)
			}
			doc.Objects = append(doc.Objects, o)
		}
	}
	doc.LastCycle = lastCycle(clusters)
	if doc.LastCycle != nil {
		doc.LastCycle.DesiredStale = v.DesiredStale()
	}
	for _, h := range sortedSources(v.Sources) {
		doc.Sources = append(doc.Sources, SourceDocument{Repo: h.Repo, Branch: h.Branch, Stale: h.Stale, Commit: h.Commit,
			LastError: h.LastError, LastSuccess: timePtr(h.LastSuccess), ConsecutiveFailures: h.Failures, ReportedAt: timePtr(h.At)})
	}
	return doc
}

func sortedSources(in []event.SourceHealth) []event.SourceHealth {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b event.SourceHealth) int {
		return cmp.Or(strings.Compare(a.Repo, b.Repo), strings.Compare(a.Branch, b.Branch))
	})
	return out
}

// staleLines are the text status's DESIRED STATE IS STALE lines, one per repository that cannot be read.
func staleLines(b *strings.Builder, sources []event.SourceHealth) {
	for _, h := range sortedSources(sources) {
		if !h.Stale {
			continue
		}
		fmt.Fprintf(b, "DESIRED STATE IS STALE: %s (%s) cannot be read; planning uses the last good commit %s",
			h.Repo, h.Branch, orDash(h.Commit))
		if h.LastError != "" {
			b.WriteString(": " + oneLine(h.LastError))
		}
		b.WriteString("\n")
	}
}

func sortedClusters(in []report.ClusterStatus) []report.ClusterStatus {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b report.ClusterStatus) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out
}

// reconciled reports whether a cluster has had a plan or a rejection.
func reconciled(s report.ClusterStatus) bool {
	return s.Counters.Plans > 0 || s.Counters.Rejections > 0
}

func lastCycle(clusters []report.ClusterStatus) *LastCycle {
	var lc LastCycle
	found := false
	var started, finished time.Time
	var aborts []string
	commits := []string{}
	readOnly := true
	for _, s := range clusters {
		if !reconciled(s) {
			continue
		}
		found = true
		c := s.Counters
		lc.Objects += c.Objects
		lc.ActionsOK += c.ActionsOK
		lc.ActionsError += c.ActionsErr
		lc.Pruned += c.Pruned
		lc.PruneDeferred += c.PruneDeferred
		lc.Skipped += c.Skipped
		lc.Anomalies += c.Anomalies
		lc.Gaps += c.Gaps
		lc.SecurityWarnings += c.SecurityWarnings
		if s.Phase == report.PhaseRejected {
			aborts = append(aborts, s.Cluster+": "+s.Reason)
		}
		if s.Phase != report.PhaseDrifted && s.Phase != report.PhaseSuspended {
			readOnly = false
		}
		if s.LastCommitSeen != "" && !slices.Contains(commits, s.LastCommitSeen) {
			commits = append(commits, s.LastCommitSeen)
		}
		if t := s.Timing.LastTriggerAt; t.After(started) {
			started = t
		}
		if settled(s.Phase) && s.Timing.UpdatedAt.After(finished) {
			finished = s.Timing.UpdatedAt
		}
	}
	if !found {
		return nil
	}
	slices.Sort(commits)
	lc.Commit = strings.Join(commits, ",")
	lc.StartedAt, lc.FinishedAt = timePtr(started), timePtr(finished)
	lc.Aborted = len(aborts) > 0
	lc.AbortReason = strings.Join(aborts, "; ")
	lc.ReadOnly = readOnly
	lc.Summary = summary(clusters, lc)
	return &lc
}

func settled(p report.Phase) bool {
	return p != report.PhasePlanning && p != report.PhaseApplying && p != report.PhaseUnknown
}

// summary is the verdict of the "last cycle:" line: ABORTED when a cluster was rejected, incomplete when
// operations failed, otherwise the phase that most needs a person.
func summary(clusters []report.ClusterStatus, lc LastCycle) string {
	if lc.Aborted {
		return "ABORTED (" + lc.AbortReason + ")"
	}
	if lc.ActionsError > 0 {
		return fmt.Sprintf("incomplete (%s)", count(lc.ActionsError, "failed action"))
	}
	worst := report.PhaseConverged
	var names []string
	for _, s := range clusters {
		if !reconciled(s) {
			continue
		}
		switch {
		case s.Phase.Severity() > worst.Severity():
			worst, names = s.Phase, []string{s.Cluster}
		case s.Phase == worst:
			names = append(names, s.Cluster)
		}
	}
	if worst == report.PhaseConverged {
		return "converged"
	}
	return string(worst) + " (" + strings.Join(names, ", ") + ")"
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// StatusJSON writes the /status document, indented.
func StatusJSON(w io.Writer, v StatusView) error {
	return writeJSON(w, NewStatusDocument(v))
}

// ClusterJSON writes one cluster's document (/status/<cluster>).
func ClusterJSON(w io.Writer, s report.ClusterStatus) error {
	return writeJSON(w, NewClusterDocument(s))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write status json: %w", err)
	}
	return nil
}

// StatusText writes the predecessor's status text, extended with each cluster's phase, findings, gaps and
// rejection diagnostics:
//
//	last cycle: converged|incomplete (N failed action[s])|ABORTED (<reason>)|<phase> (<clusters>) (commit <sha>)
//	DESIRED STATE IS STALE: <repo> (<branch>) cannot be read; planning uses the last good commit <sha>: <error>
//	objects=N actions_ok=N actions_err=N pruned=N prune_deferred=N skipped=N anomalies=N gaps=N
//	[<cluster>] phase=<phase> commit=<seen> applied=<applied>[: <reason>]
//	  <Kind> <name> <id|-> <state> <reason>[ err: <last error>]
//	  finding: <kind> <Kind/name> [<node>/<vmid>] [<field>: ]<message>
//	  security: <Kind/name> <node>/<vmid> <key>=<value>: <why>
//	  gap: <Kind/name> <node>/<vmid> <key>=<value>[ (<note>)]
//	  diagnostic: <file:line:col: message>
//	  refused: <node> run=<run id> op=<op id> <action> <Kind/name> <vmid|->: <reason>: <message>
//	  notification failing: <provider> (<type>) <event> <delivery id>: <message>
//
// Refused operations and failing notifications (any cluster) add a line each under the counters:
//
//	REFUSED: N operations executors would not run (see the refused lines)
//	NOTIFICATIONS FAILING: N providers could not be told (see the notification lines)
func StatusText(w io.Writer, v StatusView) error {
	var b strings.Builder
	clusters := sortedClusters(v.Clusters)
	lc := lastCycle(clusters)
	if lc == nil {
		b.WriteString("no reconcile cycle has completed yet\n")
		staleLines(&b, v.Sources)
	} else {
		b.WriteString("last cycle: " + lc.Summary)
		if lc.Commit != "" {
			b.WriteString(" (commit " + lc.Commit + ")")
		}
		b.WriteString("\n")
		staleLines(&b, v.Sources)
		fmt.Fprintf(&b, "objects=%d actions_ok=%d actions_err=%d pruned=%d prune_deferred=%d skipped=%d anomalies=%d gaps=%d\n",
			lc.Objects, lc.ActionsOK, lc.ActionsError, lc.Pruned, lc.PruneDeferred, lc.Skipped, lc.Anomalies, lc.Gaps)
		if lc.SecurityWarnings > 0 {
			fmt.Fprintf(&b, "SECURITY: %s weakening a guest's isolation from its host (see the security lines)\n", count(lc.SecurityWarnings, "live setting"))
		}
	}
	if n := refusedCount(clusters); n > 0 {
		fmt.Fprintf(&b, "REFUSED: %s executors would not run (see the refused lines)\n", count(n, "operation"))
	}
	if n := failingNotificationCount(clusters); n > 0 {
		fmt.Fprintf(&b, "NOTIFICATIONS FAILING: %s could not be told (see the notification lines)\n", count(n, "provider"))
	}
	for _, s := range clusters {
		writeClusterText(&b, s)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

func writeClusterText(b *strings.Builder, s report.ClusterStatus) {
	fmt.Fprintf(b, "[%s] phase=%s commit=%s applied=%s", s.Cluster, s.Phase, orDash(s.LastCommitSeen), orDash(s.LastCommitApplied))
	if s.LastAppliedBy != "" {
		// A work tree an operator applied: who asked, and the tree's name.
		fmt.Fprintf(b, " worktree=%s by=%s", s.LastTreeApplied, s.LastAppliedBy)
	}
	if s.Reason != "" {
		b.WriteString(": " + oneLine(s.Reason))
	}
	b.WriteString("\n")
	if len(s.Resources) == 0 {
		b.WriteString("  (no recorded objects)\n")
	}
	for _, r := range s.Resources {
		id := "-"
		if r.VMID > 0 {
			id = strconv.Itoa(r.VMID)
		}
		line := fmt.Sprintf("  %s %s %s %s", r.Kind, r.Name, id, r.State)
		if r.Reason != "" {
			line += " " + oneLine(r.Reason)
		}
		if r.LastError != "" {
			line += " err: " + oneLine(r.LastError)
		}
		b.WriteString(line + "\n")
	}
	if len(s.HeldPrunes) > 0 {
		b.WriteString("  held prunes: " + strings.Join(s.HeldPrunes, ", ") + "\n")
	}
	for _, f := range s.Findings {
		line := fmt.Sprintf("  finding: %s %s", f.Kind, orDash(f.Ref))
		if where := placement(f.Node, f.VMID); where != "" {
			line += " " + where
		}
		line += " "
		if f.Field != "" {
			line += f.Field + ": "
		}
		b.WriteString(line + oneLine(f.Message) + "\n")
	}
	for _, w := range s.Security {
		fmt.Fprintf(b, "  security: %s/%s %s %s=%s: %s\n", w.Kind, w.Name, placement(w.Node, w.VMID), w.Key,
			oneLine(w.Value), oneLine(w.Why))
	}
	for _, g := range s.Gaps {
		b.WriteString("  gap: " + gapDocument(g).text() + "\n")
	}
	for _, d := range s.Diagnostics {
		b.WriteString("  diagnostic: " + oneLine(d.String()) + "\n")
	}
	if more := s.Counters.Refused - len(s.Refused); more > 0 {
		fmt.Fprintf(b, "  refused: %d earlier, not kept\n", more)
	}
	for _, n := range s.FailingNotifications {
		fmt.Fprintf(b, "  notification failing: %s (%s) %s %s: %s\n", orDash(n.Provider), orDash(n.Type), orDash(n.Event),
			orDash(n.DeliveryID), oneLine(n.Message))
	}
	for _, r := range s.Refused {
		id := "-"
		if r.VMID > 0 {
			id = strconv.Itoa(r.VMID)
		}
		fmt.Fprintf(b, "  refused: %s run=%s op=%s %s %s %s: %s: %s\n", orDash(r.Node), orDash(r.RunID), orDash(r.OpID),
			orDash(string(r.Action)), orDash(r.Ref), id, orDash(r.Reason), oneLine(r.Message))
	}
}

// failingNotificationCount is how many providers' last delivery failed, over the clusters.
func failingNotificationCount(clusters []report.ClusterStatus) int {
	n := 0
	for _, s := range clusters {
		n += len(s.FailingNotifications)
	}
	return n
}

// refusedCount is how many operations the clusters' executors refused.
func refusedCount(clusters []report.ClusterStatus) int {
	n := 0
	for _, s := range clusters {
		n += s.Counters.Refused
	}
	return n
}

func placement(node string, vmid int) string {
	switch {
	case node != "" && vmid > 0:
		return node + "/" + strconv.Itoa(vmid)
	case node != "":
		return node
	case vmid > 0:
		return strconv.Itoa(vmid)
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a row on one line whatever a message holds.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
