package notifier_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/bustest"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/notifier"
)

// The notifier's secrets in these tests: the committed lab fixture (throwaway test values), whose
// proxops-token entry serves as a signing key or access token.
const labToken = "bdada1ed-2934-4ec1-8628-42f4fdc982d3"

func labSecrets(t *testing.T) *secrets.Store {
	t.Helper()
	root := filepath.Join("..", "..", "internal", "secrets", "testdata")
	keyFile, err := os.ReadFile(filepath.Join(root, "age", "lab.agekey"))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := secrets.ParseAgeKeys("lab.agekey", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "valid.sops.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := secrets.NewDecryptor(keys).Decrypt(context.Background(), "notify.sops.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// request is one request a receiver got.
type request struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// receiver is a local HTTP endpoint that records what it gets and answers with the status codes it is
// given in turn (200 once they run out); block, when set, holds a request until it is closed or the
// client gives up.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []request
	statuses []int
	block    chan struct{}
	arrived  chan struct{}
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	r := &receiver{statuses: statuses, arrived: make(chan struct{}, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, request{Method: req.Method, Path: req.URL.Path, Header: req.Header.Clone(), Body: body})
		status := http.StatusOK
		if len(r.statuses) > 0 {
			status, r.statuses = r.statuses[0], r.statuses[1:]
		}
		block := r.block
		r.mu.Unlock()
		r.arrived <- struct{}{}
		if block != nil {
			select {
			case <-block:
			case <-req.Context().Done():
				return
			}
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.got...)
}

// waitRequests waits until the receiver got n requests.
func (r *receiver) waitRequests(t *testing.T, n int) []request {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got := r.requests(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests after 30 s, want %d: %+v", len(r.requests()), n, r.requests())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// running is a notifier started by start.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Errorf("notifier: %v", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the notifier did not stop")
	}
}

// start runs a notifier on its own connection with fast retries.
func start(t *testing.T, env *bustest.Env, n repo.NotificationsConfig, reg prometheus.Registerer) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	b := env.Connect(t)
	var store *secrets.Store
	for _, p := range n.Providers {
		if p.TokenRef != "" || p.URLRef != "" {
			store = labSecrets(t)
		}
	}
	go func() {
		defer close(r.done)
		r.err = notifier.Run(ctx, notifier.Config{Bus: b, Notifications: n, Secrets: store, Backoff: 50 * time.Millisecond,
			MaxBackoff: 200 * time.Millisecond, Timeout: 5 * time.Second, Registry: reg, Attempts: 5})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func wireFinished(f plan.FinishedRun) (proto.Message, error) { return wire.FinishedToProto(f) }

// publishPlanEvent publishes a plan event as the planner does, with the message id <run>.<event>, and
// returns the id.
func publishPlanEvent(t *testing.T, b *bus.Bus, cluster, run string, ev bus.PlanEvent, m proto.Message, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := bus.PlanSubject(cluster, ev)
	id := run + "." + string(ev)
	if _, err := b.Publish(context.Background(), subject, m, bus.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	return id
}

// publishFinished publishes a finished run.
func publishFinished(t *testing.T, b *bus.Bus, f plan.FinishedRun) string {
	t.Helper()
	m, err := wire.FinishedToProto(f)
	return publishPlanEvent(t, b, f.Cluster, f.RunID, bus.PlanFinished, m, err)
}

// publishRejected publishes a rejection.
func publishRejected(t *testing.T, b *bus.Bus, r plan.Rejected) string {
	t.Helper()
	m, err := wire.RejectedToProto(r)
	return publishPlanEvent(t, b, r.Cluster, r.RunID, bus.PlanRejected, m, err)
}

func failedRun(cluster, run string) plan.FinishedRun {
	return plan.FinishedRun{
		RunInfo: plan.RunInfo{Cluster: cluster, PlanID: "p-" + run, RunID: run, Repo: "/srv/infra", Commit: "3f9a1c2e77d0aa11", EventID: "/srv/infra@3f9a1c2e77d0aa11"},
		Finished: plan.Finished{Outcome: plan.OutcomeFailed, Succeeded: 1, Failed: 1, Operations: []plan.OpOutcome{
			{ID: "vm-101-create", Ref: "VM/web-01", Action: plan.ActionCreate, State: plan.OpSucceeded},
			{ID: "vm-102-configure", Ref: "VM/db-01", Action: plan.ActionConfigure, State: plan.OpFailed, Message: "VM 102 is locked (backup)"},
		}},
		At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func rejectedPlan(cluster, run string) plan.Rejected {
	return plan.Rejected{
		RunInfo: plan.RunInfo{Cluster: cluster, RunID: run, Repo: "/srv/infra", Commit: "9d8e7f6a5b4c3d2e"},
		Rejection: plan.Rejection{Cluster: cluster, Reason: plan.RejectParse, Diagnostics: diag.List{
			{Severity: diag.Error, File: "vm/lab/web-01.yaml", Line: 6, Column: 1, Ref: "VM/web-01", Field: "spec.memory", Message: "required"},
		}},
	}
}

// publishGapReport publishes a cluster's gap report as the adopter does.
func publishGapReport(t *testing.T, b *bus.Bus, r inventory.GapReport) {
	t.Helper()
	subject, err := bus.GapSubject(r.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Publish(context.Background(), subject, wire.GapReportToProto(r)); err != nil {
		t.Fatal(err)
	}
}

// unconfinedReport is a gap report with one security warning: a container without AppArmor.
func unconfinedReport(cluster string) inventory.GapReport {
	return inventory.GapReport{Cluster: cluster, Security: []inventory.SecurityWarning{{
		Setting: inventory.Setting{Kind: "LXC", Name: "build-01", Node: "pve1", VMID: 210, Key: "lxc.apparmor.profile", Value: "unconfined"},
		Why:     "the container runs without an AppArmor profile"}}}
}

func contains(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

// counter is proxops_notifications_total of a provider and result, summed over events.
func counter(t *testing.T, reg *prometheus.Registry, provider, result string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != "proxops_notifications_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["provider"] == provider && labels["result"] == result {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	c := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	c.Set(sum)
	return c
}
