package executor_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/pvesim"
)

// silentPVE forwards to the simulator, except that the first request matching method and path is never
// answered: it is held until the client gives up on it (or the test ends) and never reaches the simulator.
type silentPVE struct {
	sim          *pvesim.Sim
	method, path string
	release      chan struct{}

	mu        sync.Mutex
	held      bool
	heldAt    time.Time
	abandoned time.Time
}

func (s *silentPVE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	hold := !s.held && r.Method == s.method && r.URL.Path == s.path
	if hold {
		s.held, s.heldAt = true, time.Now()
	}
	s.mu.Unlock()
	if !hold {
		s.sim.ServeHTTP(w, r)
		return
	}
	// A request whose body is read is watched for the client closing the connection.
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
		s.mu.Lock()
		s.abandoned = time.Now()
		s.mu.Unlock()
	case <-s.release:
	}
}

func (s *silentPVE) times() (heldAt, abandoned time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heldAt, s.abandoned
}

// A PVE that never answers a request does not hang the operation: the call fails after the per-request
// timeout (pve.Config.RequestTimeout), the attempt is reported as a retryable failure naming the timeout,
// and the redelivery applies the operation. This holds for reads as for writes: the timeout bounds a read
// with all its in-place retries, so a read that times out is not tried again within the attempt.
func TestAnUnansweredPVERequestFailsAfterTheRequestTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name, method, path string
	}{
		{"write", http.MethodPost, "/api2/json/nodes/pve1/qemu/100/config"},
		{"read", http.MethodGet, "/api2/json/nodes/pve1/qemu/100/pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := pvesim.DefaultSpec()
			spec.Guests = []pvesim.GuestSpec{{VMID: 100, Type: "qemu", Node: "pve1", Config: seedVM}}
			e := newEnv(t, spec)
			silent := &silentPVE{sim: e.sim, method: tc.method, path: tc.path, release: make(chan struct{})}
			srv := httptest.NewServer(silent)
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(silent.release) })
			cfg := e.config()
			cfg.PVE.BaseURL, cfg.PVE.RequestTimeout = srv.URL, timeout
			e.start(cfg)

			op := e.dispatch(plan.Operation{Node: "pve1", VMID: 100, GuestType: inventory.QEMU, Action: plan.ActionConfigure,
				Values: kvs("memory", "4096")})
			r := e.final(op, 15*time.Second)
			if r.Status != plan.StatusSucceeded || r.Attempt != 2 {
				for _, r := range e.results() {
					t.Logf("result %s attempt %d class %s: %s", r.Status, r.Attempt, r.ErrorClass, r.Message)
				}
				t.Fatalf("result %s at attempt %d (%s), want success at attempt 2", r.Status, r.Attempt, r.Message)
			}
			heldAt, abandoned := silent.times()
			if heldAt.IsZero() {
				t.Fatalf("no %s %s was sent", tc.method, tc.path)
			}
			if abandoned.IsZero() {
				t.Fatal("the executor never gave up on the unanswered request")
			}
			// Bounded by the request timeout, not by the 30 s default nor by anything else. The client's clock
			// starts before the request reaches the server, so the server sees a little less than the timeout.
			if waited := abandoned.Sub(heldAt); waited < timeout/2 || waited > 10*timeout {
				t.Errorf("the unanswered request was abandoned after %s, want about the request timeout %s", waited, timeout)
			}
			if conf, _ := e.sim.Config(100); conf["memory"] != "4096" {
				t.Errorf("memory %q after the operation succeeded, want 4096", conf["memory"])
			}
			if n := e.sim.Count("POST", "/nodes/{node}/qemu/{vmid}/config"); n != 1 {
				t.Errorf("%d config writes reached PVE, want 1", n)
			}
			// The attempt whose request went unanswered was reported as a retryable failure naming the request
			// and the timeout.
			retries := countWhere(e.results(), func(r plan.Result) bool {
				return r.OpID == op.ID && r.Status == plan.StatusProgress && r.Attempt == 1 &&
					r.ErrorClass == plan.ErrorRetryable && strings.Contains(r.Message, tc.path) &&
					strings.Contains(r.Message, "no answer from PVE within 300ms (request timeout)")
			})
			if retries != 1 {
				for _, r := range e.results() {
					t.Logf("result %s attempt %d class %s: %s", r.Status, r.Attempt, r.ErrorClass, r.Message)
				}
				t.Errorf("%d retryable progress results naming the request and its timeout, want 1", retries)
			}
		})
	}
}
