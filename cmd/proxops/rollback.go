package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/services/planner"
)

func init() { register(newRollbackCommand) }

func newRollbackCommand() *cobra.Command {
	var opts reconcileOptions
	cmd := &cobra.Command{
		Use:   "rollback CLUSTER/GUEST [SNAPSHOT]",
		Short: "Roll a guest back to a ProxOps safety snapshot, then leave it alone until its manifest changes",
		Long: `rollback rolls one guest back to one of ProxOps' own safety snapshots (the newest when SNAPSHOT is not
given): a snapshot whose name starts with proxops- and that the ownership inventory records. It never rolls back to
a snapshot someone else took. GUEST is the guest's name, Kind/name or vmid.

It first plans the rollback and shows it (which snapshot, when it was taken, before what change), then asks
for confirmation on the terminal; --yes confirms without asking, and without a terminal --yes is required.
The rollback is then planned, signed and run by the guest's executor like any other plan, and the status
records it. What the guest wrote to its disks since the snapshot is lost; a guest that ran is started again.

Afterwards the guest is suspended from correction: plans show it as suspended and report its drift from git,
and change nothing on it, so the next drift tick does not undo the rollback. The suspension ends when a
commit changes the guest's manifest, or with proxops resume CLUSTER/GUEST. A suspended cluster (proxops
suspend) does not stop an operator's rollback.

Without --nats it runs on the data directory like apply (or talks to the proxops up running there); with
--nats it asks a deployed system, as the operator user --nats-user. With --output json (and --yes) every
line is one JSON object: the preview, what apply prints, and the outcome.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.useGlobals(cmd)
			cluster, guest, ok := strings.Cut(args[0], "/")
			if !ok || guest == "" {
				return fmt.Errorf("%q: want CLUSTER/GUEST (the guest's name, Kind/name or vmid)", args[0])
			}
			if err := bus.ValidateCluster(cluster); err != nil {
				return err
			}
			rb := &event.Rollback{Guest: guest}
			if len(args) == 2 {
				rb.Snapshot = args[1]
			}
			opts.clusters, opts.rollback = []string{cluster}, rb
			switch {
			case opts.output != "text" && opts.output != "json":
				return fmt.Errorf("--output %q: want text or json", opts.output)
			case opts.output == "json" && !opts.yes:
				return errors.New("--output json needs --yes: a rollback printed for a program is not asked about on a terminal")
			}
			if !opts.yes {
				if !stdinIsTerminal() {
					return errors.New("a rollback needs confirmation and there is no terminal to ask on: give --yes to confirm it")
				}
				opts.confirm = askOnTerminal(cmd.InOrStdin(), cmd.OutOrStdout())
			}
			return runReconcile(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts, true)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.repo, "repo", "", "repository root (default: the repository containing the current directory)")
	opts.nats.flags(f)
	f.StringVar(&opts.pve.tokenID, "pve-token-id", "", "PVE API token name (its secret from PROXOPS_PVE_TOKEN)")
	f.BoolVar(&opts.yes, "yes", false, "confirm the rollback without asking")
	f.StringVarP(&opts.output, "output", "o", "text", "output format: text, or json (one object per line, as apply prints them; needs --yes)")
	f.DurationVar(&opts.timeout, "timeout", 30*time.Minute, "how long to wait for the rollback to finish")
	return cmd
}

// stdinIsTerminal reports whether standard input is a terminal a person can answer on (not a pipe, a file or
// /dev/null).
func stdinIsTerminal() bool { return term.IsTerminal(int(os.Stdin.Fd())) }

// askOnTerminal asks a person to confirm a rollback by typing yes.
func askOnTerminal(in io.Reader, out io.Writer) func(what string) bool {
	r := bufio.NewReader(in)
	return func(what string) bool {
		fmt.Fprintf(out, "%s\nOnly 'yes' confirms: ", what)
		answer, _ := r.ReadString('\n')
		return strings.TrimSpace(answer) == "yes"
	}
}

// runRollback is rollback on a prepared request: plan it as a dry run and show it, confirm, then ask for it
// with the snapshot the preview named (a newer snapshot taken meanwhile is not rolled back to unasked). With
// --output json every line is one JSON object: the preview (the diff's document), then what apply prints,
// then the outcome.
func runRollback(ctx context.Context, out, errOut io.Writer, opts reconcileOptions, q reconcileRequest) error {
	preview := q
	preview.apply, preview.operator, preview.yes = false, "", false
	res, err := preview.run(ctx, newReporter(out, errOut, opts, false))
	if err != nil {
		return err
	}
	if err := showPreview(out, res, opts); err != nil {
		return err
	}
	op, ok := rollbackOf(res, q.clusters[0])
	if !ok {
		return fmt.Errorf("no rollback was planned for %s/%s: nothing was changed", q.clusters[0], q.rollback.Guest)
	}
	name, _ := op.Param(plan.SnapshotNameParam)
	if opts.confirm != nil && !opts.confirm(fmt.Sprintf("Roll %s (vmid %d, cluster %s, node %s) back to %s? What it wrote to its disks since is lost.",
		op.Ref, op.VMID, op.Cluster, op.Node, name)) {
		return &exitError{code: 1, err: errors.New("not confirmed: nothing was rolled back")}
	}
	pinned := *q.rollback
	pinned.Snapshot = name
	q.rollback = &pinned
	res, err = q.run(ctx, newReporter(out, errOut, opts, true))
	if err != nil {
		return err
	}
	if _, ok := rollbackOf(res, q.clusters[0]); !ok && res.clusters[q.clusters[0]] != nil && res.clusters[q.clusters[0]].planned != nil {
		return &exitError{code: 1, err: fmt.Errorf("the rollback of %s was superseded by a newer event before it was planned: nothing was rolled back; run proxops rollback again", op.Ref)}
	}
	if err := res.exit(out, opts, true); err != nil {
		return err
	}
	resume := fmt.Sprintf("proxops resume %s/%s", op.Cluster, shortRef(op.Ref))
	if opts.output == "json" {
		return writeJSONLine(out, struct {
			Type      string `json:"type"`
			Cluster   string `json:"cluster"`
			Ref       string `json:"ref"`
			VMID      int    `json:"vmid"`
			Node      string `json:"node"`
			Snapshot  string `json:"snapshot"`
			Suspended bool   `json:"suspended"`
			Resume    string `json:"resume"`
		}{"rolled-back", op.Cluster, op.Ref, op.VMID, op.Node, name, true, resume})
	}
	fmt.Fprintf(out, "%s was rolled back to %s and is suspended from correction: plans report its drift from git and change nothing on it,\n"+
		"until a commit changes its manifest or you run: %s\n", op.Ref, name, resume)
	return nil
}

// showPreview prints the rollback's preview as diff prints it, or with --output json as one line
// {"type":"preview","report":…} holding the diff's document; it returns the preview's outcome (a refused
// rollback ends there).
func showPreview(out io.Writer, res *reconcileResult, opts reconcileOptions) error {
	if opts.output != "json" {
		return res.exit(out, opts, false)
	}
	var doc, report bytes.Buffer
	outcome := res.exit(&doc, opts, false)
	if err := json.Compact(&report, doc.Bytes()); err != nil {
		return fmt.Errorf("the rollback's preview: %w", err)
	}
	if err := writeJSONLine(out, struct {
		Type   string          `json:"type"`
		Report json.RawMessage `json:"report"`
	}{"preview", report.Bytes()}); err != nil {
		return err
	}
	return outcome
}

// rollbackOf finds the rollback operation of a cluster's plan in a request's result.
func rollbackOf(res *reconcileResult, cluster string) (plan.Operation, bool) {
	c := res.clusters[cluster]
	if c == nil || c.planned == nil {
		return plan.Operation{}, false
	}
	for _, op := range c.planned.Plan.Operations {
		if op.Action == plan.ActionRollback {
			return op, true
		}
	}
	return plan.Operation{}, false
}

// shortRef is the name of a Kind/name reference.
func shortRef(ref string) string {
	if _, name, ok := strings.Cut(ref, "/"); ok {
		return name
	}
	return ref
}

// runResumeGuests lifts the suspension of guests an operator rolled back (proxops resume CLUSTER/GUEST...).
func runResumeGuests(ctx context.Context, w io.Writer, opts natsOptions, guests []string) error {
	type target struct{ cluster, guest string }
	var targets []target
	for _, a := range guests {
		c, g, ok := strings.Cut(a, "/")
		if !ok || g == "" {
			return fmt.Errorf("%q: want CLUSTER/GUEST", a)
		}
		if err := bus.ValidateCluster(c); err != nil {
			return err
		}
		targets = append(targets, target{c, g})
	}
	return withBus(ctx, opts, func(b *bus.Bus) error {
		for _, t := range targets {
			s, changed, err := planner.ResumeGuest(ctx, b, t.cluster, t.guest)
			if err != nil {
				return err
			}
			if !changed {
				fmt.Fprintf(w, "%s/%s: not suspended\n", t.cluster, t.guest)
				continue
			}
			fmt.Fprintf(w, "%s/%s: resumed (%s, rolled back to %s by %s): the next plan corrects it\n", t.cluster, t.guest, s.Ref,
				s.Snapshot, s.By)
		}
		return nil
	})
}
