package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

// proxops up --nats URL runs the services as clients of a provisioned NATS server instead of starting its
// own: it converges the demo, and the server's streams and status bucket hold the run; the
// data directory holds no JetStream store and no nats.json of its own.
func TestUpWithAnExternalNATSServerKeepsTheRunThere(t *testing.T) {
	e := newDemoEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	serverDir := t.TempDir()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Dir: serverDir, Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ci := srv.ClientInfo()
	t.Setenv("PROXOPS_NATS_PASSWORD", ci.Password)

	// Before its operator provisions it, up refuses the server, naming what is missing.
	out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0", "--nats", ci.URL, "--nats-user", ci.User)
	if code == 0 || !strings.Contains(out+errOut, "the NATS server is not provisioned for ProxOps (run proxops provision against it)") {
		t.Fatalf("up --nats on a bare server: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// A deployed system is provisioned once by its operator, before any service joins it; a second run
	// changes nothing.
	for _, want := range []string{"created", "unchanged"} {
		out, code, err := runCLI(t, "provision", "--nats", ci.URL, "--nats-user", ci.User)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if code != 0 || err != nil || len(lines) != 19 {
			t.Fatalf("provision (want %s): exit %d, err %v\n%s", want, code, err, out)
		}
		for _, l := range lines {
			if f := strings.Fields(l); len(f) != 3 || f[2] != want {
				t.Fatalf("provision (want %s): line %q\n%s", want, l, out)
			}
		}
		if !strings.Contains(out, "PROXOPS_REPO") || !strings.Contains(out, "proxops_status") {
			t.Fatalf("provision names no stream or bucket:\n%s", out)
		}
	}

	out, errOut, code = e.run("up", "--once", "--listen", "127.0.0.1:0", "--nats", ci.URL, "--nats-user", ci.User)
	if code != 0 || !strings.Contains(out, "demo: converged (17 operations applied)\n") || !strings.Contains(out, "(NATS "+ci.URL+")") {
		t.Fatalf("up --once --nats: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	finished := logLines(errOut, "run finished")
	if len(finished) != 1 || finished[0]["outcome"] != "succeeded" {
		t.Fatalf("runs finished: %v\n%s", finished, errOut)
	}
	runID, _ := finished[0]["run_id"].(string)

	subject, err := bus.PlanSubject("demo", bus.PlanFinished)
	if err != nil {
		t.Fatal(err)
	}
	m, err := b.LastMessage(ctx, bus.StreamPlans, subject)
	if err != nil {
		t.Fatalf("the server holds no finished run: %v", err)
	}
	run, err := wire.DecodeFinished(ctx, m.Decode)
	if err != nil {
		t.Fatal(err)
	}
	if run.RunID != runID || run.Commit != e.head() || run.Outcome != plan.OutcomeSucceeded || run.Succeeded != 17 {
		t.Errorf("finished run on the server: %+v, want run %s of %s with 17 operations succeeded", run.Finished, runID, e.head())
	}
	results := 0
	err = b.Follow(ctx, bus.StreamResults, []string{bus.FilterResults}, 1, func(m *bus.Message, _ time.Time) error {
		r, err := wire.DecodeResult(ctx, m.Decode)
		if err != nil {
			return err
		}
		if r.RunID == runID && r.Status == plan.StatusSucceeded {
			results++
		}
		if last, err := b.LastSequence(ctx, bus.StreamResults, bus.FilterResults); err != nil || m.Sequence >= last {
			return errStopFollowing
		}
		return nil
	})
	if !errors.Is(err, errStopFollowing) || results != 17 {
		t.Errorf("results of run %s on the server: %d succeeded (%v), want 17", runID, results, err)
	}
	statuses, err := readStatuses(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(statuses) != 1 || statuses[0].Phase != report.PhaseConverged || statuses[0].LastCommitApplied != e.head() {
		t.Errorf("status on the server: %+v", statuses)
	}

	for _, p := range []string{filepath.Join(e.data, bus.ClientInfoFile), filepath.Join(e.data, "jetstream")} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v; up --nats keeps no NATS state of its own", p, err)
		}
	}
}

// errStopFollowing ends a Follow that has read what it needs.
var errStopFollowing = errors.New("read to the end")
