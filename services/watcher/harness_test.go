package watcher_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/services/watcher"
)

const testSecret = "webhook-secret-for-tests"

// syncBuffer collects log output from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a watcher started by a test.
type running struct {
	t      testing.TB
	w      *watcher.Watcher
	bus    *testBus
	reg    *prometheus.Registry
	logs   *syncBuffer
	cancel context.CancelFunc
	// disconnect closes the watcher's own connection to the server.
	disconnect func()
	done       chan error
	once       sync.Once
}

// startWatcher runs a watcher on its own connection to the bus until the test ends or stop is called.
func startWatcher(t testing.TB, cfg watcher.Config, bus *testBus) *running {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.WebhookSecret == "" {
		cfg.WebhookSecret = testSecret
	}
	logs := &syncBuffer{}
	reg := prometheus.NewRegistry()
	deps, disconnect := bus.connect(reg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	w, err := watcher.New(cfg, deps)
	if err != nil {
		disconnect()
		t.Fatalf("new watcher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, w: w, bus: bus, reg: reg, logs: logs, cancel: cancel, disconnect: disconnect, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	t.Cleanup(func() { r.stop() })
	testkit.Eventually(t, waitTimeout, "the watcher's http server", func() bool { return w.ListenAddr() != "" })
	return r
}

// stop cancels the watcher and waits for Run to return.
func (r *running) stop() {
	r.t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				r.t.Errorf("watcher run: %v", err)
			}
		case <-time.After(waitTimeout):
			r.t.Error("watcher did not stop")
		}
		r.disconnect()
	})
}

// waitEvent waits for an event matching keep to be stored on the stream, and for the publish call that
// stored it to have returned to the watcher, and returns the first one stored.
func (r *running) waitEvent(what string, keep func(watcher.RepoChanged) bool) watcher.RepoChanged {
	r.t.Helper()
	var found watcher.RepoChanged
	testkit.Eventually(r.t, waitTimeout, what, func() bool {
		evs := r.bus.storedMatching(keep)
		if len(evs) == 0 {
			return false
		}
		found = evs[0]
		return len(r.bus.pub.matching(func(ev watcher.RepoChanged) bool { return ev.EventID == found.EventID })) > 0
	})
	return found
}

// waitCommit waits for an event announcing commit with the trigger.
func (r *running) waitCommit(commit string, trigger watcher.Trigger) watcher.RepoChanged {
	r.t.Helper()
	return r.waitEvent(fmt.Sprintf("%s event for %s", trigger, commit), func(ev watcher.RepoChanged) bool {
		return ev.Commit == commit && ev.Trigger == trigger
	})
}

// waitCall waits for a publish call announcing commit with the trigger, whether or not the stream kept it
// (a duplicate id is dropped), and returns it.
func (r *running) waitCall(commit string, trigger watcher.Trigger) watcher.RepoChanged {
	r.t.Helper()
	keep := func(ev watcher.RepoChanged) bool { return ev.Commit == commit && ev.Trigger == trigger }
	var found watcher.RepoChanged
	testkit.Eventually(r.t, waitTimeout, fmt.Sprintf("a %s publish for %s", trigger, commit), func() bool {
		evs := r.bus.pub.matching(keep)
		if len(evs) == 0 {
			return false
		}
		found = evs[0]
		return true
	})
	return found
}

// get fetches a path of the watcher's http server.
func (r *running) get(path string) (int, string) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.w.ListenAddr() + path)
	if err != nil {
		r.t.Fatalf("get %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// metric returns the value of one sample of the watcher's /metrics, or -1 when absent.
func (r *running) metric(name string, labels map[string]string) float64 {
	r.t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

// webhook is one push delivery as a provider sends it.
type webhook struct {
	provider string
	ref      string
	after    string
	delivery string
	// secret signs the body (or is the GitLab token); empty sends no signature.
	secret string
	// body replaces the generated payload when set.
	body []byte
	// event replaces the push event type when set.
	event string
}

// payload builds the provider's push payload.
func (h webhook) payload() []byte {
	if h.body != nil {
		return h.body
	}
	p := map[string]any{
		"ref":    h.ref,
		"before": strings.Repeat("0", 39) + "1",
		"after":  h.after,
		"repository": map[string]any{
			"full_name": "ops/infra",
			"clone_url": "https://git.example.invalid/ops/infra.git",
		},
		"commits": []any{map[string]any{"id": h.after, "message": "change"}},
	}
	if h.provider == watcher.ProviderGitLab {
		p["object_kind"] = "push"
		p["checkout_sha"] = h.after
	}
	data, _ := json.Marshal(p)
	return data
}

// request builds the signed http request for the webhook endpoint at base.
func (h webhook) request(base string) *http.Request {
	body := h.payload()
	req, _ := http.NewRequest(http.MethodPost, base+watcher.WebhookPath(h.provider), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	mac := hmac.New(sha256.New, []byte(h.secret))
	mac.Write(body)
	sig := hex.EncodeToString(mac.Sum(nil))
	event := h.event
	switch h.provider {
	case watcher.ProviderGitHub:
		if event == "" {
			event = "push"
		}
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", h.delivery)
		if h.secret != "" {
			req.Header.Set("X-Hub-Signature-256", "sha256="+sig)
		}
	case watcher.ProviderGitea:
		if event == "" {
			event = "push"
		}
		req.Header.Set("X-Gitea-Event", event)
		req.Header.Set("X-Gitea-Delivery", h.delivery)
		if h.secret != "" {
			req.Header.Set("X-Gitea-Signature", sig)
		}
	case watcher.ProviderGitLab:
		if event == "" {
			event = "Push Hook"
		}
		req.Header.Set("X-Gitlab-Event", event)
		req.Header.Set("X-Gitlab-Event-UUID", h.delivery)
		if h.secret != "" {
			req.Header.Set("X-Gitlab-Token", h.secret)
		}
	}
	return req
}

// send posts the webhook to the running watcher and returns the status code and body.
func (r *running) send(h webhook) (int, string) {
	r.t.Helper()
	resp, err := http.DefaultClient.Do(h.request("http://" + r.w.ListenAddr()))
	if err != nil {
		r.t.Fatalf("webhook: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// pushHook is a correctly signed push to main.
func pushHook(provider, after string) webhook {
	return webhook{provider: provider, ref: "refs/heads/main", after: after, delivery: "d-" + after[:8], secret: testSecret}
}
