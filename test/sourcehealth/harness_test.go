// Package sourcehealth_test runs the watcher against the status service over a real NATS JetStream: what a
// watcher says about its repository is what /status, /healthz, the page and `proxops status` show.
package sourcehealth_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/status"
)

// system is an in-process NATS server with the status service running on it.
type system struct {
	t      *testing.T
	server *bus.Server
	bus    *bus.Bus
	url    string
}

func startSystem(t *testing.T) *system {
	t.Helper()
	srv, err := bus.StartServer(context.Background(), bus.ServerConfig{Dir: t.TempDir(), Listen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := srv.Connect(bus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.Provision(testContext(t), bus.ProvisionConfig{}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &system{t: t, server: srv, bus: b, url: "http://" + ln.Addr().String()}
	testkit.RunService(t, "status", func(ctx context.Context) error {
		return status.Run(ctx, status.Config{Bus: b, Logger: testLogger(), Registry: prometheus.NewRegistry(),
			Listener: ln, Refresh: 2 * time.Second, StaleAfter: 10 * time.Minute})
	})
	testkit.Eventually(t, 20*time.Second, "the service to be ready", func() bool {
		code, _ := s.get("/readyz")
		return code == http.StatusOK
	})
	return s
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger() *slog.Logger {
	if os.Getenv("PROXOPS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func (s *system) get(path string) (int, []byte) {
	s.t.Helper()
	resp, err := http.Get(s.url + path)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp.StatusCode, body
}

// statusDoc is the part of /status the test reads.
type statusDoc struct {
	LastCycle map[string]any `json:"last_cycle"`
	Sources   []sourceDoc    `json:"sources"`
}

type sourceDoc struct {
	Repo      string `json:"repo"`
	Branch    string `json:"branch"`
	Stale     bool   `json:"stale"`
	Commit    string `json:"commit"`
	LastError string `json:"last_error"`
}

func (s *system) status() statusDoc {
	s.t.Helper()
	code, body := s.get("/status")
	if code != http.StatusOK {
		s.t.Fatalf("/status: %d %s", code, body)
	}
	var d statusDoc
	if err := json.Unmarshal(body, &d); err != nil {
		s.t.Fatalf("/status: %v\n%s", err, body)
	}
	return d
}

// converge publishes one run of cluster alpha on commit that planned nothing and succeeded, as a planner
// would, and waits until the service shows it as the last cycle.
func (s *system) converge(commit string) {
	s.t.Helper()
	ctx := testContext(s.t)
	repo := "git@git.example.invalid:ops/infra.git"
	e := event.RepoChanged{Repo: repo, Branch: "main", Commit: commit, Tree: "tree-" + commit,
		Trigger: event.TriggerWebhook, EventID: event.CommitEventID(repo, commit), Subject: "change " + commit}
	info := plan.RunInfo{Cluster: "alpha", PlanID: "plan-alpha-" + commit, RunID: "run-alpha", Repo: repo,
		Commit: commit, Tree: e.Tree, EventID: e.EventID}
	changed, err := wire.RepoChangedToProto(e)
	check(s.t, err)
	_, err = s.bus.Publish(ctx, bus.SubjectRepoChanged, changed, bus.WithMsgID(e.EventID))
	check(s.t, err)
	planned, err := wire.PlannedToProto(plan.Planned{RunInfo: info, Plan: plan.Plan{ID: info.PlanID, Cluster: "alpha"}})
	check(s.t, err)
	subject, err := bus.PlanSubject("alpha", bus.PlanPlanned)
	check(s.t, err)
	_, err = s.bus.Publish(ctx, subject, planned, bus.WithMsgID(info.RunID+".planned"))
	check(s.t, err)
	finished, err := wire.FinishedToProto(plan.FinishedRun{RunInfo: info,
		Finished: plan.Finished{Outcome: plan.OutcomeSucceeded}, At: time.Now()})
	check(s.t, err)
	subject, err = bus.PlanSubject("alpha", bus.PlanFinished)
	check(s.t, err)
	_, err = s.bus.Publish(ctx, subject, finished, bus.WithMsgID(info.RunID+".finished"))
	check(s.t, err)
	testkit.Eventually(s.t, 20*time.Second, "the converged run as the last cycle", func() bool {
		return s.status().LastCycle != nil
	})
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// git runs git in dir with a fixed identity and no user or system configuration.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=ops", "GIT_AUTHOR_EMAIL=ops@example.com", "GIT_COMMITTER_NAME=ops", "GIT_COMMITTER_EMAIL=ops@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
