package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
)

// stillEvery is how often apply says an operation is still running.
const stillEvery = 10 * time.Second

// reporter prints what diff and apply follow. diff prints everything at the end (plans sorted by cluster,
// rejections last: byte-identical for the same state); apply prints progress as it happens, terraform
// style, or one JSON object per line with --output json.
type reporter struct {
	out, errOut io.Writer
	json        bool
	apply       bool
	showDiff    bool
	now         func() time.Time

	// running operations, by run and op id, in the order they started.
	running []*opProgress
	byKey   map[string]*opProgress
}

type opProgress struct {
	result    plan.Result
	started   time.Time
	lastStill time.Time
	done      bool
}

func newReporter(out, errOut io.Writer, opts reconcileOptions, apply bool) *reporter {
	return &reporter{out: out, errOut: errOut, json: opts.output == "json", apply: apply, showDiff: opts.showDiff,
		now: time.Now, byKey: map[string]*opProgress{}}
}

// words says how an action reads in progress lines: "Creating", "creation".
var words = map[plan.Action][2]string{
	plan.ActionCreate:              {"Creating", "creation"},
	plan.ActionClone:               {"Cloning", "clone"},
	plan.ActionConfigure:           {"Modifying", "modifications"},
	plan.ActionResize:              {"Resizing", "resize"},
	plan.ActionStart:               {"Starting", "start"},
	plan.ActionShutdown:            {"Shutting down", "shutdown"},
	plan.ActionStop:                {"Stopping", "stop"},
	plan.ActionResume:              {"Resuming", "resume"},
	plan.ActionMarkTemplate:        {"Converting to template", "conversion"},
	plan.ActionDownload:            {"Downloading", "download"},
	plan.ActionDelete:              {"Destroying", "destruction"},
	plan.ActionClaimTag:            {"Claiming", "claim"},
	plan.ActionRegenerateCloudInit: {"Regenerating cloud-init", "cloud-init regeneration"},
	plan.ActionMigrate:             {"Migrating", "migration"},
	plan.ActionHAMigrate:           {"Migrating through HA", "HA migration"},
	plan.ActionSnapshot:            {"Taking a safety snapshot of", "safety snapshot"},
	plan.ActionDeleteSnapshot:      {"Removing a safety snapshot of", "snapshot removal"},
	plan.ActionRollback:            {"Rolling back", "rollback"},
}

func actionWords(a plan.Action) (ing, noun string) {
	if w, ok := words[a]; ok {
		return w[0], w[1]
	}
	return "Applying " + string(a), string(a)
}

func (r *reporter) line(format string, a ...any) {
	if r.apply && !r.json {
		fmt.Fprintf(r.out, format+"\n", a...)
	}
}

// jsonLine prints one JSON object per line (apply --output json).
func (r *reporter) jsonLine(v any) {
	if !r.apply || !r.json {
		return
	}
	_ = writeJSONLine(r.out, v)
}

// writeJSONLine prints v as one line of JSON (HTML characters as they are).
func writeJSONLine(out io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := out.Write(b.Bytes())
	return err
}

func (r *reporter) planned(p plan.Planned) {
	if !r.apply {
		return
	}
	r.jsonLine(struct {
		Type      string          `json:"type"`
		Cluster   string          `json:"cluster"`
		RunID     string          `json:"run_id"`
		Suspended bool            `json:"suspended,omitempty"`
		Plan      render.PlanJSON `json:"plan"`
	}{"plan", p.Cluster, p.RunID, p.Suspended, render.ToJSON(p.Plan)})
	if r.json {
		return
	}
	switch {
	case r.showDiff:
		fmt.Fprint(r.out, render.PlanText(p.Plan))
	case render.Clean(p.Plan):
		r.line("%s: %s", p.Cluster, render.NoDriftCluster)
	default:
		r.line("%s: plan %s: %d operation%s", p.Cluster, p.PlanID, len(p.Plan.Operations), pluralS(len(p.Plan.Operations)))
	}
	for _, f := range p.Plan.Findings {
		if f.Kind == plan.FindingSuspended && !r.showDiff {
			r.line("%s: %s", f.Ref, f.Message)
		}
	}
	if p.Suspended && len(p.Plan.Operations) > 0 {
		r.line("%s: the cluster is suspended: nothing is applied (proxops resume --cluster %s)", p.Cluster, p.Cluster)
	}
}

func (r *reporter) rejected(rj plan.Rejected) {
	r.jsonLine(struct {
		Type      string               `json:"type"`
		Cluster   string               `json:"cluster"`
		Rejection render.RejectionJSON `json:"rejection"`
	}{"rejected", rj.Cluster, render.RejectionToJSON(rj.Rejection)})
}

func (r *reporter) held(h plan.Held, confirmed bool) {
	r.jsonLine(struct {
		Type      string   `json:"type"`
		Cluster   string   `json:"cluster"`
		PlanID    string   `json:"plan_id"`
		Reason    string   `json:"reason"`
		Prunes    []string `json:"prunes"`
		Confirmed bool     `json:"confirmed"`
	}{"held", h.Cluster, h.PlanID, h.Reason, h.Prunes, confirmed})
	r.line("%s: plan %s is held: %s", h.Cluster, h.PlanID, h.Reason)
	if confirmed {
		r.line("%s: confirmed with --yes; pruning %s", h.Cluster, strings.Join(h.Prunes, ", "))
	} else {
		r.line("%s: nothing was applied; to prune %s, run: proxops apply --yes", h.Cluster, strings.Join(h.Prunes, ", "))
	}
}

func (r *reporter) finished(f plan.FinishedRun) {
	r.jsonLine(struct {
		Type       string `json:"type"`
		Cluster    string `json:"cluster"`
		RunID      string `json:"run_id"`
		Outcome    string `json:"outcome"`
		Succeeded  int    `json:"succeeded"`
		Failed     int    `json:"failed"`
		Skipped    int    `json:"skipped"`
		Superseded int    `json:"superseded"`
	}{"finished", f.Cluster, f.RunID, string(f.Outcome), f.Succeeded, f.Failed, f.Skipped, f.Superseded})
	for _, o := range f.Operations {
		if o.State == plan.OpSkipped && o.Message != "" {
			r.line("%s: skipped %s: %s", o.Ref, o.Action, o.Message)
		}
	}
	if f.Superseded > 0 {
		r.line("%s: %d operation%s superseded by a newer commit", f.Cluster, f.Superseded, pluralS(f.Superseded))
	}
}

// result prints an operation starting or ending.
func (r *reporter) result(res plan.Result) {
	key := res.RunID + "." + res.OpID
	ing, noun := actionWords(res.Action)
	switch {
	case res.Status == plan.StatusStarted || res.Status == plan.StatusProgress:
		if _, ok := r.byKey[key]; ok {
			return
		}
		p := &opProgress{result: res, started: r.now()}
		p.lastStill = p.started
		r.byKey[key] = p
		r.running = append(r.running, p)
		r.jsonOp(res, "started", 0)
		r.line("%s %s on %s…", ing, res.Ref, res.Node)
	case res.Status.Final():
		p, ok := r.byKey[key]
		if ok && p.done {
			return
		}
		elapsed := res.Elapsed
		if ok {
			p.done = true
			r.running = slices.DeleteFunc(r.running, func(x *opProgress) bool { return x == p })
		} else {
			r.byKey[key] = &opProgress{result: res, done: true}
		}
		r.jsonOp(res, string(res.Status), elapsed)
		after := elapsed.Round(time.Second)
		id := ""
		switch {
		case res.VMID > 0:
			id = fmt.Sprintf(" [vmid %d]", res.VMID)
		case res.Node != "":
			// An artifact downloads on each node that needs it: say which.
			id = " on " + res.Node
		}
		switch res.Status {
		case plan.StatusSucceeded:
			r.line("%s: %s complete after %s%s", res.Ref, noun, after, id)
		case plan.StatusSkipped:
			r.line("%s: %s skipped: %s", res.Ref, noun, res.Message)
		default:
			r.line("%s: %s failed after %s%s: %s", res.Ref, noun, after, id, res.Message)
		}
	}
}

func (r *reporter) jsonOp(res plan.Result, status string, elapsed time.Duration) {
	r.jsonLine(struct {
		Type      string `json:"type"`
		Cluster   string `json:"cluster"`
		RunID     string `json:"run_id"`
		OpID      string `json:"op_id"`
		Ref       string `json:"ref"`
		Action    string `json:"action"`
		Node      string `json:"node"`
		VMID      int    `json:"vmid,omitempty"`
		Status    string `json:"status"`
		Message   string `json:"message,omitempty"`
		ElapsedMS int64  `json:"elapsed_ms,omitempty"`
	}{"operation", res.Cluster, res.RunID, res.OpID, res.Ref, string(res.Action), res.Node, res.VMID, status, res.Message,
		elapsed.Milliseconds()})
}

// tick says which operations are still running, every stillEvery.
func (r *reporter) tick() {
	now := r.now()
	for _, p := range r.running {
		if now.Sub(p.lastStill) < stillEvery {
			continue
		}
		p.lastStill = now
		ing, _ := actionWords(p.result.Action)
		r.line("%s: Still %s… [%s elapsed]", p.result.Ref, strings.ToLower(ing), now.Sub(p.started).Round(stillEvery))
	}
}

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// exit prints what is left to print and turns the outcome into the exit status.
func (res *reconcileResult) exit(out io.Writer, opts reconcileOptions, apply bool) error {
	var plans []plan.Plan
	var rejections []plan.Rejection
	for _, n := range res.names {
		c := res.clusters[n]
		if c.planned != nil {
			plans = append(plans, c.planned.Plan)
		}
		if c.rejected != nil {
			rejections = append(rejections, c.rejected.Rejection)
		}
	}
	if !apply {
		if opts.output == "json" {
			data, err := render.JSON(plans, rejections)
			if err != nil {
				return err
			}
			_, _ = out.Write(data)
		} else {
			fmt.Fprint(out, render.Text(plans, rejections))
		}
		switch {
		case len(rejections) > 0:
			return &exitError{code: 1}
		case opts.exitCode && slices.ContainsFunc(plans, func(p plan.Plan) bool { return !render.Clean(p) }):
			return &exitError{code: 2}
		}
		return nil
	}
	var sum plan.Finished
	failed, held, superseded, notApplied := false, false, false, false
	for _, n := range res.names {
		c := res.clusters[n]
		if f := c.finished; f != nil {
			sum.Succeeded += f.Succeeded
			sum.Failed += f.Failed
			sum.Skipped += f.Skipped
			sum.Superseded += f.Superseded
			failed = failed || f.Outcome == plan.OutcomeFailed
			superseded = superseded || f.Outcome == plan.OutcomeSuperseded
			notApplied = notApplied || (f.Outcome == plan.OutcomeNotApplied && c.planned != nil && !c.planned.Plan.Empty())
		} else if c.held != nil {
			held = true
		}
	}
	slices.SortFunc(rejections, func(a, b plan.Rejection) int { return cmp.Compare(a.Cluster, b.Cluster) })
	ok := !failed && !held && !superseded && !notApplied && len(rejections) == 0
	if opts.output == "json" {
		_ = writeJSONLine(out, struct {
			Type       string   `json:"type"`
			OK         bool     `json:"ok"`
			Succeeded  int      `json:"succeeded"`
			Failed     int      `json:"failed"`
			Skipped    int      `json:"skipped"`
			Superseded int      `json:"superseded"`
			Rejected   []string `json:"rejected"`
		}{"summary", ok, sum.Succeeded, sum.Failed, sum.Skipped, sum.Superseded, rejectedNames(rejections)})
	} else {
		for _, rj := range rejections {
			fmt.Fprint(out, render.RejectionText(rj))
		}
		verdict := "Apply complete"
		if !ok {
			verdict = "Apply failed"
		}
		fmt.Fprintf(out, "%s: %d succeeded, %d failed, %d skipped.\n", verdict, sum.Succeeded, sum.Failed, sum.Skipped+sum.Superseded)
	}
	if !ok {
		return &exitError{code: 1}
	}
	return nil
}

func rejectedNames(rs []plan.Rejection) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Cluster)
	}
	return out
}
