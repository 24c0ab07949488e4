package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/watcher"
)

// deployedSystem is the demo on a deployed system with the deploy/ users: a NATS server, the services of a
// proxops up joined to it, and the committed HEAD applied.
type deployedSystem struct {
	ctx context.Context
	url string
	up  *upRun
	t   *testing.T
	e   *demoEnv
}

// deployed starts the deployed system and waits for the committed HEAD to be applied.
func (e *demoEnv) deployed() *deployedSystem {
	t := e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	services, err := bus.ServiceUsers(bus.ExampleDeploy().Topology)
	if err != nil {
		t.Fatal(err)
	}
	var users []bus.User
	for _, u := range services {
		users = append(users, bus.User{Name: u.Name, Password: "pw-" + u.Name, Permissions: u.Permissions})
	}
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: t.TempDir(), Listen: true, Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	d := &deployedSystem{ctx: ctx, url: srv.ClientInfo().URL, t: t, e: e}
	d.as("admin", 0, "provision")
	// The services join as the server's own user, as a deployment's would each as theirs; they follow the
	// committed HEAD and apply it.
	t.Setenv("PROXOPS_NATS_PASSWORD", srv.ClientInfo().Password)
	d.up = e.startUp("--nats", d.url, "--nats-user", srv.ClientInfo().User)
	cli := d.connect("cli")
	d.waitFor("the committed HEAD applied", func() bool {
		st, err := readStatuses(ctx, cli, nil)
		return err == nil && len(st) == 1 && st[0].Phase == report.PhaseConverged && st[0].LastCommitApplied == e.head()
	})
	return d
}

// connect connects to the deployed system as a user of deploy/.
func (d *deployedSystem) connect(user string) *bus.Bus {
	d.t.Helper()
	b, err := bus.Connect(d.ctx, bus.ConnectConfig{URL: d.url, User: user, Password: "pw-" + user}, bus.Options{APITimeout: 2 * time.Second})
	if err != nil {
		d.t.Fatalf("connect as %s: %v", user, err)
	}
	d.t.Cleanup(func() { _ = b.Close() })
	return b
}

// as runs proxops against the deployed system as a user of deploy/ and fails the test unless it exits with
// want; diff, apply and rollback also get the repository and the data directory.
func (d *deployedSystem) as(user string, want int, args ...string) string {
	d.t.Helper()
	d.t.Setenv("PROXOPS_NATS_PASSWORD", "pw-"+user)
	args = append(args, "--nats", d.url, "--nats-user", user)
	if args[0] == "diff" || args[0] == "apply" || args[0] == "rollback" {
		args = append(args, "--repo", d.e.repo, "--data-dir", d.e.data)
	}
	out, errOut, code := runCommand(d.t, args...)
	if code != want {
		d.t.Fatalf("proxops %s as %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), user, code, want, out, errOut)
	}
	return out + errOut
}

// waitFor polls cond for up to two minutes.
func (d *deployedSystem) waitFor(what string, cond func() bool) {
	d.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			d.t.Fatalf("no %s after 2 minutes; proxops up's log:\n%s", what, d.up.errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// On a deployed system with the deploy/ users, the cli user previews a work tree but cannot apply it: its
// apply on the operator subject is denied, and a reconcile request naming its tree with dry_run false is
// planned as a dry run that writes nothing to PVE. The operator user applies the work tree, and the status
// records that user and the tree's hash.
func TestOnlyAnOperatorAppliesAWorkTreeOnADeployedSystem(t *testing.T) {
	e := newDemoEnv(t)
	d := e.deployed()
	ctx, as, cli, waitFor := d.ctx, d.as, d.connect("cli"), d.waitFor
	memory := func() string {
		cfg, _ := e.sim.Config(101)
		return cfg["memory"]
	}
	before := memory()

	e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "memory: 2GiB", "memory: 3GiB", 1) })
	snap, err := watcher.SnapshotWorktree(ctx, e.repo)
	if err != nil {
		t.Fatal(err)
	}

	// The cli user previews the work tree...
	if out := as("cli", 0, "diff", "--worktree"); !strings.Contains(out, "web-01") {
		t.Fatalf("diff --worktree as cli shows no change of web-01:\n%s", out)
	}
	// ...but cannot ask for its apply on the operator subject,
	out := as("cli", 1, "apply", "--worktree")
	if !strings.Contains(out, "ask for a reconcile") {
		t.Fatalf("apply --worktree as cli failed otherwise:\n%s", out)
	}
	// and a request on the reconcile subject that names the tree with dry_run false is a dry run.
	if _, err := treestore.PutPreview(ctx, cli, snap); err != nil {
		t.Fatal(err)
	}
	req := event.ReconcileRequest{RequestID: "forged-apply", Tree: snap.Tree, RequestedBy: "operator"}
	if _, err := cli.Publish(ctx, bus.SubjectReconcileRequest, wire.ReconcileRequestToProto(req)); err != nil {
		t.Fatal(err)
	}
	var answer event.RepoChanged
	var finished plan.FinishedRun
	waitFor("the forged apply planned", func() bool {
		_ = cli.ReadStream(ctx, bus.StreamRepo, bus.SubjectRepoChanged, 0, func(m *bus.Message) error {
			if ev, err := wire.DecodeRepoChanged(ctx, m.Decode); err == nil && ev.RequestID == req.RequestID {
				answer = ev
			}
			return nil
		})
		_ = cli.ReadStream(ctx, bus.StreamPlans, bus.FilterPlans, 0, func(m *bus.Message) error {
			if fr, err := wire.DecodeFinished(ctx, m.Decode); err == nil && fr.Answers(req.RequestID) {
				finished = fr
			}
			return nil
		})
		return finished.RunID != ""
	})
	if !answer.DryRun || answer.RequestedBy != "" || finished.Outcome != plan.OutcomeNotApplied {
		t.Fatalf("the cli's apply request was announced as %+v and finished %s; want a dry run not applied", answer, finished.Outcome)
	}
	if got := memory(); got != before {
		t.Fatalf("web-01's memory changed from %s to %s on the cli's request", before, got)
	}

	// The operator applies the work tree; the status says who did, and which tree.
	as("operator", 0, "apply", "--worktree")
	if got := memory(); got == before {
		t.Fatalf("web-01's memory is still %s after the operator's apply", got)
	}
	st, err := readStatuses(ctx, cli, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].LastAppliedBy != "operator" || st[0].LastTreeApplied != snap.Tree {
		t.Fatalf("status after the operator's apply: applied by %q tree %q, want operator %s", st[0].LastAppliedBy, st[0].LastTreeApplied, snap.Tree)
	}
	if out := as("cli", 0, "status"); !strings.Contains(out, "worktree="+snap.Tree+" by=operator") {
		t.Fatalf("proxops status does not show the operator's work-tree apply:\n%s", out)
	}
	if out := as("cli", 0, "events"); !strings.Contains(out, "apply requested by operator operator") ||
		!strings.Contains(out, "(work tree "+snap.Tree+" applied by operator)") {
		t.Fatalf("proxops events as cli does not show the operator's work-tree apply:\n%s", out)
	}
}
