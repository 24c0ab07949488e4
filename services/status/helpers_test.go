package status_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/status"
)

// system is an in-process NATS server with the status service running on it.
type system struct {
	t      *testing.T
	dir    string
	server *bus.Server
	bus    *bus.Bus
	now    atomic.Pointer[time.Time]

	mu      sync.Mutex
	url     string
	stop    context.CancelFunc
	stopped chan error
	last    map[string]uint64 // stream → last sequence published
}

func startSystem(t *testing.T) *system {
	t.Helper()
	dir := t.TempDir()
	srv, err := bus.StartServer(context.Background(), bus.ServerConfig{Dir: dir, Listen: true})
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
	s := &system{t: t, dir: dir, server: srv, bus: b, last: map[string]uint64{}}
	now := time.Now()
	s.now.Store(&now)
	s.startService()
	t.Cleanup(s.stopService)
	return s
}

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("PROXOPS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// startService runs the status service on a fresh loopback port.
func (s *system) startService() {
	s.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- status.Run(ctx, status.Config{Bus: s.bus, Logger: testLogger(s.t), Registry: prometheus.NewRegistry(),
			Listener: ln, Refresh: 2 * time.Second, StaleAfter: 10 * time.Minute,
			Now: func() time.Time { return *s.now.Load() }})
	}()
	s.mu.Lock()
	s.url, s.stop, s.stopped = "http://"+ln.Addr().String(), cancel, done
	s.mu.Unlock()
	testkit.Eventually(s.t, 20*time.Second, "the service to be ready", func() bool {
		code, _ := s.get("/readyz")
		return code == http.StatusOK
	})
}

func (s *system) stopService() {
	s.mu.Lock()
	stop, done := s.stop, s.stopped
	s.stop = nil
	s.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	if err := <-done; err != nil {
		s.t.Errorf("status.Run: %v", err)
	}
}

func (s *system) restartService() {
	s.stopService()
	s.startService()
}

func (s *system) advance(d time.Duration) {
	now := s.now.Load().Add(d)
	s.now.Store(&now)
}

func (s *system) get(path string) (int, []byte) {
	s.t.Helper()
	s.mu.Lock()
	url := s.url
	s.mu.Unlock()
	resp, err := http.Get(url + path)
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

// statusDoc is the part of /status the tests read.
type statusDoc struct {
	ProcessStart string            `json:"process_start"`
	LastCycle    map[string]any    `json:"last_cycle"`
	Objects      []map[string]any  `json:"objects"`
	Clusters     []clusterDoc      `json:"clusters"`
	Sources      []sourceDoc       `json:"sources"`
	Sequences    map[string]uint64 `json:"sequences"`
}

type sourceDoc struct {
	Repo      string `json:"repo"`
	Branch    string `json:"branch"`
	Stale     bool   `json:"stale"`
	Commit    string `json:"commit"`
	LastError string `json:"last_error"`
}

type clusterDoc struct {
	Cluster  string          `json:"cluster"`
	Report   json.RawMessage `json:"report"`
	Revision int64           `json:"revision"`
}

type reportDoc struct {
	Phase             string `json:"phase"`
	Reason            string `json:"reason"`
	LastCommitSeen    string `json:"last_commit_seen"`
	LastCommitApplied string `json:"last_commit_applied"`
	Counters          struct {
		Objects    int `json:"objects"`
		ActionsOK  int `json:"actions_ok"`
		ActionsErr int `json:"actions_err"`
		Anomalies  int `json:"anomalies"`
		Gaps       int `json:"gaps"`
		Drifted    int `json:"drifted"`
		Plans      int `json:"plans"`
		Rejections int `json:"rejections"`
	} `json:"counters"`
	Resources []struct {
		Kind, Name, Node, State string
		VMID                    int    `json:"vmid"`
		LastAction              string `json:"last_action"`
		LastError               string `json:"last_error"`
		Reason                  string `json:"reason"`
	} `json:"resources"`
	HeldPrunes  []string          `json:"held_prunes"`
	Diagnostics []json.RawMessage `json:"diagnostics"`
	Gaps        []json.RawMessage `json:"gaps"`
	Findings    []json.RawMessage `json:"findings"`
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

// settle waits until the service has read everything published so far.
func (s *system) settle() statusDoc {
	s.t.Helper()
	var d statusDoc
	testkit.Eventually(s.t, 20*time.Second, "the service to read every published event", func() bool {
		d = s.status()
		s.mu.Lock()
		defer s.mu.Unlock()
		for stream, seq := range s.last {
			if d.Sequences[stream] < seq {
				return false
			}
		}
		return true
	})
	// The HTTP snapshot is taken after the KV bucket is written: once the sequences are there, so is the rest.
	return d
}

func (d statusDoc) report(t *testing.T, cluster string) reportDoc {
	t.Helper()
	for _, c := range d.Clusters {
		if c.Cluster == cluster {
			var r reportDoc
			if err := json.Unmarshal(c.Report, &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("no cluster %q in /status", cluster)
	return reportDoc{}
}

// deterministic returns the deterministic parts of every cluster, as served.
func (d statusDoc) deterministic() string {
	var out string
	for _, c := range d.Clusters {
		out += string(c.Report) + "\n"
	}
	return out
}

// publisher publishes what the watcher, planner, executors and adopter would.
type publisher struct {
	s    *system
	repo string
}

func (s *system) publisher() *publisher {
	return &publisher{s: s, repo: "git@git.example.invalid:ops/infra.git"}
}

func (p *publisher) publish(subject string, m proto.Message, msgID string) {
	p.s.t.Helper()
	var opts []bus.PublishOption
	if msgID != "" {
		opts = append(opts, bus.WithMsgID(msgID))
	}
	ack, err := p.s.bus.Publish(testContext(p.s.t), subject, m, opts...)
	if err != nil {
		p.s.t.Fatal(err)
	}
	p.s.mu.Lock()
	p.s.last[ack.Stream] = max(p.s.last[ack.Stream], ack.Sequence)
	p.s.mu.Unlock()
}

func (p *publisher) check(err error) {
	p.s.t.Helper()
	if err != nil {
		p.s.t.Fatal(err)
	}
}

// repoChanged announces a commit; it returns the event the planner answers.
func (p *publisher) repoChanged(commit string, trigger event.Trigger) event.RepoChanged {
	e := event.RepoChanged{Repo: p.repo, Branch: "main", Commit: commit, Tree: "tree-" + commit, Trigger: trigger,
		EventID: event.CommitEventID(p.repo, commit), Subject: "change " + commit}
	if trigger == event.TriggerDrift {
		e.EventID = event.DriftEventID(p.repo, commit, int64(len(p.s.last)+int(p.s.last[bus.StreamRepo])))
	}
	m, err := wire.RepoChangedToProto(e)
	p.check(err)
	p.publish(bus.SubjectRepoChanged, m, e.EventID)
	return e
}

func runOf(cluster, run string, e event.RepoChanged) plan.RunInfo {
	return plan.RunInfo{Cluster: cluster, PlanID: "plan-" + cluster + "-" + e.Commit, RunID: run, Repo: e.Repo,
		Commit: e.Commit, Tree: e.Tree, EventID: e.EventID}
}

func (p *publisher) planned(info plan.RunInfo, pl plan.Plan) {
	pl.ID, pl.Cluster = info.PlanID, info.Cluster
	for i := range pl.Operations {
		pl.Operations[i].Cluster, pl.Operations[i].RunID, pl.Operations[i].PlanID = info.Cluster, info.RunID, info.PlanID
	}
	subject, err := bus.PlanSubject(info.Cluster, bus.PlanPlanned)
	p.check(err)
	m, err := wire.PlannedToProto(plan.Planned{RunInfo: info, Plan: pl})
	p.check(err)
	p.publish(subject, m, runKey(info)+".planned")
}

func runKey(info plan.RunInfo) string {
	if info.RunID != "" {
		return info.RunID
	}
	return info.PlanID + "@" + info.EventID
}

func (p *publisher) rejected(info plan.RunInfo, reason string, ds ...diag.Diagnostic) {
	subject, err := bus.PlanSubject(info.Cluster, bus.PlanRejected)
	p.check(err)
	m, err := wire.RejectedToProto(plan.Rejected{RunInfo: info, Rejection: plan.Rejection{Cluster: info.Cluster, Reason: reason, Diagnostics: ds}})
	p.check(err)
	p.publish(subject, m, runKey(info)+".rejected")
}

func (p *publisher) held(info plan.RunInfo, reason string, prunes ...string) {
	subject, err := bus.PlanSubject(info.Cluster, bus.PlanHeld)
	p.check(err)
	p.publish(subject, wire.HeldToProto(plan.Held{RunInfo: info, Reason: reason, Prunes: prunes}), runKey(info)+".held")
}

var upidCounter atomic.Int64

func (p *publisher) result(info plan.RunInfo, op plan.Operation, st plan.ResultStatus, msg string) {
	n := upidCounter.Add(1)
	r := plan.Result{RunID: info.RunID, OpID: op.ID, PlanID: info.PlanID, Cluster: info.Cluster, Node: op.Node,
		VMID: op.VMID, GuestType: op.GuestType, Ref: op.Ref, Action: op.Action, Status: st, Message: msg,
		UPID:    fmt.Sprintf("UPID:%s:%08X:0000%04X:%08X:qmcreate:%d:root@pam:", op.Node, n, n, time.Now().Unix(), op.VMID),
		Attempt: 1, Executor: op.Node + "-" + fmt.Sprint(n), At: time.Now(), Elapsed: time.Duration(n) * time.Millisecond}
	subject, err := bus.ResultSubject(info.Cluster, op.Node)
	p.check(err)
	m, err := wire.ResultToProto(r)
	p.check(err)
	p.publish(subject, m, "")
}

func (p *publisher) finished(info plan.RunInfo, outcome plan.Outcome, outcomes ...plan.OpOutcome) {
	f := plan.Finished{Outcome: outcome, Operations: outcomes}
	for _, o := range outcomes {
		switch o.State {
		case plan.OpSucceeded:
			f.Succeeded++
		case plan.OpFailed:
			f.Failed++
		default:
			f.Skipped++
		}
	}
	subject, err := bus.PlanSubject(info.Cluster, bus.PlanFinished)
	p.check(err)
	m, err := wire.FinishedToProto(plan.FinishedRun{RunInfo: info, Finished: f, At: time.Now()})
	p.check(err)
	p.publish(subject, m, runKey(info)+".finished")
}

func (p *publisher) gaps(cluster string, gs ...inventory.Gap) {
	subject, err := bus.GapSubject(cluster)
	p.check(err)
	p.publish(subject, wire.GapReportToProto(inventory.GapReport{Cluster: cluster, Gaps: gs}), "")
}

func done(op plan.Operation, st plan.OpState, msg string) plan.OpOutcome {
	return plan.OpOutcome{ID: op.ID, Ref: op.Ref, Action: op.Action, State: st, Message: msg}
}
