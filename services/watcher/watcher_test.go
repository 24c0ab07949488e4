package watcher_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	natsbus "github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/watcher"
)

// seed writes a small manifest repository, with files that are not part of a snapshot beside it.
func seed(r *workRepo) {
	r.write("proxops.yaml", "reconcile:\n  drift-interval: 5m\n")
	r.write("clusters/lab/config.yaml", "pve:\n  clusters:\n    lab:\n      base-url: https://pve.lab.invalid:8006\n")
	r.write("clusters/lab/resources.yaml", "resources:\n  - ../../vm/base/web.yaml\n")
	r.write("clusters/lab/secrets.sops.yaml", "secrets:\n  token: ENC[AES256_GCM,data:abc,type:str]\n")
	r.write("vm/base/web.yaml", "apiVersion: proxops/v1\nkind: VM\nmetadata:\n  name: web\nspec:\n  vmid: 101\n")
	r.write("README.md", "# infrastructure\n")
	r.write("docs/example.yaml", "not: a manifest\n")
}

// remoteSetup is a repository served over http with one commit on main.
type remoteSetup struct {
	repo   *workRepo
	server *gitHTTPServer
	first  string
	cfg    watcher.Config
}

func newRemoteSetup(t *testing.T) *remoteSetup {
	t.Helper()
	root := t.TempDir()
	repo := newWorkRepo(t, root)
	seed(repo)
	first := repo.commitAndPush("initial manifests")
	srv := newGitHTTPServer(t, root, false, "", "")
	return &remoteSetup{
		repo: repo, server: srv, first: first,
		cfg: watcher.Config{
			URL:           srv.url("repo.git"),
			DataDir:       t.TempDir(),
			PollInterval:  time.Hour,
			DriftInterval: -1,
			RetryMin:      10 * time.Millisecond,
			RetryMax:      50 * time.Millisecond,
		},
	}
}

func TestStartupAnnouncesTheCurrentCommitAtOnce(t *testing.T) {
	s := newRemoteSetup(t)
	r := startWatcher(t, s.cfg, newTestBus(t))

	ev := r.waitCommit(s.first, watcher.TriggerStartup)
	want := watcher.RepoChanged{
		Repo: s.server.url("repo.git"), Branch: "main", Commit: s.first, Tree: s.repo.treeOf(s.first),
		Trigger: watcher.TriggerStartup, EventID: s.server.url("repo.git") + "@" + s.first, Subject: "initial manifests",
	}
	if diff := cmp.Diff(want, ev); diff != "" {
		t.Errorf("startup event (-want +got):\n%s", diff)
	}
	snap, err := r.bus.getTree(ev.Tree)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range snap.Files {
		paths = append(paths, f.Path)
	}
	wantPaths := []string{"clusters/lab/config.yaml", "clusters/lab/resources.yaml", "clusters/lab/secrets.sops.yaml", "proxops.yaml", "vm/base/web.yaml"}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("snapshot paths (-want +got):\n%s", diff)
	}
	if snap.Commit != s.first || snap.Tree != ev.Tree {
		t.Errorf("snapshot names commit %s tree %s, want %s %s", snap.Commit, snap.Tree, s.first, ev.Tree)
	}
	// The status follows once the publish returned.
	testkit.Eventually(t, waitTimeout, "the status to name the first commit", func() bool {
		st := r.w.Status()
		return st.Commit == s.first && !st.Stale
	})
}

func TestPollingPicksUpAPush(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 50 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	s.repo.write("vm/base/db.yaml", "kind: VM\nmetadata:\n  name: db\n")
	second := s.repo.commitAndPush("add db")
	ev := r.waitCommit(second, watcher.TriggerPoll)

	if ev.EventID != s.server.url("repo.git")+"@"+second {
		t.Errorf("event id = %q, want <repo>@<commit>", ev.EventID)
	}
	snap, err := r.bus.getTree(ev.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileContent(snap, "vm/base/db.yaml"); got != "kind: VM\nmetadata:\n  name: db\n" {
		t.Errorf("vm/base/db.yaml in the snapshot = %q", got)
	}
	testkit.Eventually(t, waitTimeout, "the revision metric of "+second, func() bool {
		return r.metric("proxops_watcher_revision_info", map[string]string{"commit": second}) == 1
	})
}

func TestPollWithoutChangeDoesNotFetch(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	fetches := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "fetch"})
	lists := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"})
	testkit.Eventually(t, waitTimeout, "five more polls", func() bool {
		return r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"}) >= lists+5
	})
	if got := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "fetch"}); got != fetches {
		t.Errorf("fetches went from %v to %v while the branch did not move", fetches, got)
	}
	if n := len(r.bus.pub.all()); n != 1 {
		t.Errorf("%d events published, want only the startup one", n)
	}
}

func TestPollAndWebhookForTheSameCommitPublishOneEvent(t *testing.T) {
	lists := func(r *running) float64 {
		return r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"})
	}
	// plainEvents are the commit's announcements other than drift ticks and answers to requests.
	plainEvents := func(r *running, commit string) []watcher.RepoChanged {
		return r.bus.pub.matching(func(ev watcher.RepoChanged) bool {
			return ev.Commit == commit && !strings.Contains(ev.EventID, "#")
		})
	}
	t.Run("poll first", func(t *testing.T) {
		s := newRemoteSetup(t)
		s.cfg.PollInterval = 20 * time.Millisecond
		r := startWatcher(t, s.cfg, newTestBus(t))
		r.waitCommit(s.first, watcher.TriggerStartup)

		second := s.repo.commitAndPush("second")
		r.waitCommit(second, watcher.TriggerPoll)
		if code, body := r.send(pushHook(watcher.ProviderGitHub, second)); code != http.StatusAccepted {
			t.Fatalf("webhook: %d %s", code, body)
		}
		n := lists(r)
		testkit.Eventually(t, waitTimeout, "the webhook's look and more polls", func() bool { return lists(r) >= n+3 })
		if evs := plainEvents(r, second); len(evs) != 1 || evs[0].EventID != s.server.url("repo.git")+"@"+second {
			t.Errorf("events for %s = %+v, want one with id <repo>@<commit>", second, evs)
		}
	})
	t.Run("webhook first", func(t *testing.T) {
		s := newRemoteSetup(t)
		s.cfg.PollInterval = 300 * time.Millisecond
		r := startWatcher(t, s.cfg, newTestBus(t))
		r.waitCommit(s.first, watcher.TriggerStartup)

		// Push and deliver right after a poll, so the webhook is seen well before the next one.
		n := lists(r)
		testkit.Eventually(t, waitTimeout, "a poll", func() bool { return lists(r) > n })
		second := s.repo.commitAndPush("second")
		if code, body := r.send(pushHook(watcher.ProviderGitHub, second)); code != http.StatusAccepted {
			t.Fatalf("webhook: %d %s", code, body)
		}
		r.waitEvent("the second commit", func(ev watcher.RepoChanged) bool { return ev.Commit == second })
		n = lists(r)
		testkit.Eventually(t, waitTimeout, "two more polls", func() bool { return lists(r) >= n+2 })
		evs := plainEvents(r, second)
		if len(evs) != 1 || evs[0].EventID != s.server.url("repo.git")+"@"+second {
			t.Fatalf("events for %s = %+v, want one with id <repo>@<commit>", second, evs)
		}
		if evs[0].Trigger != watcher.TriggerWebhook {
			t.Logf("the poll noticed the commit before the webhook (%s)", evs[0].Trigger)
		}
	})
	t.Run("two watchers share the id", func(t *testing.T) {
		// Two replicas of the watcher, one woken by the webhook, one polling: the bus deduplicates their
		// announcements because they carry the same id.
		s := newRemoteSetup(t)
		bus := newTestBus(t)
		hooked := startWatcher(t, s.cfg, bus)
		polling := s.cfg
		polling.DataDir = t.TempDir()
		polling.PollInterval = 20 * time.Millisecond
		poller := startWatcher(t, polling, bus)
		testkit.Eventually(t, waitTimeout, "both startup events", func() bool { return len(bus.pub.forCommit(s.first)) == 2 })

		second := s.repo.commitAndPush("second")
		if code, body := hooked.send(pushHook(watcher.ProviderGitLab, second)); code != http.StatusAccepted {
			t.Fatalf("webhook: %d %s", code, body)
		}
		hooked.waitCall(second, watcher.TriggerWebhook)
		poller.waitCall(second, watcher.TriggerPoll)
		evs := bus.pub.forCommit(second)
		if len(evs) != 2 || evs[0].EventID != evs[1].EventID {
			t.Errorf("replicas announced %+v, want two announcements with one id", evs)
		}
		if stored := bus.storedMatching(func(ev watcher.RepoChanged) bool { return ev.Commit == second }); len(stored) != 1 {
			t.Errorf("the stream holds %+v for %s, want the one announcement it kept", stored, second)
		}
	})
}

func TestSignedWebhookOfEachProviderTriggersAnEvent(t *testing.T) {
	for _, provider := range []string{watcher.ProviderGitHub, watcher.ProviderGitea, watcher.ProviderGitLab} {
		t.Run(provider, func(t *testing.T) {
			s := newRemoteSetup(t)
			r := startWatcher(t, s.cfg, newTestBus(t))
			r.waitCommit(s.first, watcher.TriggerStartup)

			second := s.repo.commitAndPush("pushed")
			code, body := r.send(pushHook(provider, second))
			if code != http.StatusAccepted {
				t.Fatalf("webhook answered %d %q, want 202", code, body)
			}
			ev := r.waitCommit(second, watcher.TriggerWebhook)
			if ev.EventID != s.server.url("repo.git")+"@"+second {
				t.Errorf("event id = %q", ev.EventID)
			}
			if got := r.metric("proxops_watcher_webhook_requests_total", map[string]string{"provider": provider, "result": "accepted"}); got != 1 {
				t.Errorf("accepted webhooks of %s = %v, want 1", provider, got)
			}
		})
	}
}

func TestForgejoSignatureHeaderIsAccepted(t *testing.T) {
	s := newRemoteSetup(t)
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)
	second := s.repo.commitAndPush("pushed")

	h := pushHook(watcher.ProviderGitea, second)
	req := h.request("http://" + r.w.ListenAddr())
	req.URL.Path = watcher.WebhookPath("forgejo")
	for _, pair := range [][2]string{{"X-Gitea-Signature", "X-Forgejo-Signature"}, {"X-Gitea-Event", "X-Forgejo-Event"}} {
		req.Header.Set(pair[1], req.Header.Get(pair[0]))
		req.Header.Del(pair[0])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("forgejo webhook answered %d, want 202", resp.StatusCode)
	}
	r.waitCommit(second, watcher.TriggerWebhook)
}

func TestUnverifiedOrOversizedWebhooksAreRefusedAndTriggerNothing(t *testing.T) {
	s := newRemoteSetup(t)
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)
	// A new commit is waiting: anything that reached git would announce it.
	second := s.repo.commitAndPush("not yet announced")
	before := s.server.requests.Load()

	big := make([]byte, watcher.DefaultWebhookMaxBody+1)
	for i := range big {
		big[i] = ' '
	}
	cases := []struct {
		name string
		hook webhook
		code int
	}{
		{"github without signature", webhook{provider: watcher.ProviderGitHub, ref: "refs/heads/main", after: second}, http.StatusUnauthorized},
		{"github with another secret", webhook{provider: watcher.ProviderGitHub, ref: "refs/heads/main", after: second, secret: "guess"}, http.StatusUnauthorized},
		{"gitea without signature", webhook{provider: watcher.ProviderGitea, ref: "refs/heads/main", after: second}, http.StatusUnauthorized},
		{"gitea with another secret", webhook{provider: watcher.ProviderGitea, ref: "refs/heads/main", after: second, secret: "guess"}, http.StatusUnauthorized},
		{"gitlab without token", webhook{provider: watcher.ProviderGitLab, ref: "refs/heads/main", after: second}, http.StatusUnauthorized},
		{"gitlab with another token", webhook{provider: watcher.ProviderGitLab, ref: "refs/heads/main", after: second, secret: testSecret + "x"}, http.StatusUnauthorized},
		{"github oversized body", webhook{provider: watcher.ProviderGitHub, ref: "refs/heads/main", after: second, secret: testSecret, body: big}, http.StatusRequestEntityTooLarge},
		{"gitlab oversized body", webhook{provider: watcher.ProviderGitLab, ref: "refs/heads/main", after: second, secret: testSecret, body: big}, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := r.send(tc.hook); code != tc.code {
				t.Errorf("answered %d %q, want %d", code, body, tc.code)
			}
		})
	}
	// A signed body whose signature was made for another body.
	h := pushHook(watcher.ProviderGitHub, second)
	req := h.request("http://" + r.w.ListenAddr())
	other := pushHook(watcher.ProviderGitHub, s.first)
	other.body = []byte(`{"ref":"refs/heads/main","after":"` + s.first + `"}`)
	req.Header.Set("X-Hub-Signature-256", other.request("http://x").Header.Get("X-Hub-Signature-256"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("signature of another body: %d, want 401", resp.StatusCode)
	}

	if got := s.server.requests.Load(); got != before {
		t.Errorf("refused webhooks reached git: %d requests", got-before)
	}
	if evs := r.bus.pub.forCommit(second); len(evs) != 0 {
		t.Errorf("refused webhooks published %+v", evs)
	}
	if got := r.metric("proxops_watcher_webhook_requests_total", map[string]string{"provider": "github", "result": "unauthorized"}); got != 3 {
		t.Errorf("unauthorized github webhooks counted %v, want 3", got)
	}
	if got := r.metric("proxops_watcher_webhook_requests_total", map[string]string{"result": "too_large"}); got < 1 {
		t.Errorf("oversized webhooks counted %v", got)
	}
}

func TestWebhookIgnoresOtherBranchesAndOtherEvents(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	s.repo.write("vm/base/feature.yaml", "kind: VM\n")
	feature := s.repo.commit("feature work")
	s.repo.push("feature", false)

	hooks := []webhook{
		{provider: watcher.ProviderGitHub, ref: "refs/heads/feature", after: feature, secret: testSecret},
		{provider: watcher.ProviderGitea, ref: "refs/heads/feature", after: feature, secret: testSecret},
		{provider: watcher.ProviderGitLab, ref: "refs/heads/feature", after: feature, secret: testSecret},
		{provider: watcher.ProviderGitHub, ref: "refs/tags/v1", after: feature, secret: testSecret},
		{provider: watcher.ProviderGitHub, ref: "refs/heads/main", after: feature, secret: testSecret, event: "ping"},
		{provider: watcher.ProviderGitHub, ref: "refs/heads/main", after: feature, secret: testSecret, event: "issues"},
		{provider: watcher.ProviderGitLab, ref: "refs/heads/main", after: feature, secret: testSecret, event: "Tag Push Hook"},
		{provider: watcher.ProviderGitHub, ref: "refs/heads/main", after: strings.Repeat("0", 40), secret: testSecret},
	}
	for _, h := range hooks {
		if code, body := r.send(h); code != http.StatusOK {
			t.Errorf("%s %s %q: answered %d %q, want 200", h.provider, h.ref, h.event, code, body)
		}
	}
	// Polls of main go on and never see the feature branch.
	lists := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"})
	testkit.Eventually(t, waitTimeout, "more polls", func() bool {
		return r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "list"}) >= lists+3
	})
	if evs := r.bus.pub.forCommit(feature); len(evs) != 0 {
		t.Errorf("a push to another branch was announced: %+v", evs)
	}
	if got := r.metric("proxops_watcher_webhook_requests_total", map[string]string{"provider": "github", "result": "ignored"}); got != 5 {
		t.Errorf("ignored github webhooks = %v, want 5", got)
	}
}

func TestReplayedDeliveryAfterRestartTriggersNothing(t *testing.T) {
	s := newRemoteSetup(t)
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)
	second := s.repo.commitAndPush("second")
	delivery := pushHook(watcher.ProviderGitHub, second)
	if code, _ := r.send(delivery); code != http.StatusAccepted {
		t.Fatalf("first delivery answered %d", code)
	}
	r.waitCommit(second, watcher.TriggerWebhook)
	r.stop()

	// Restart on the same KV; a newer commit waits, so anything that reached git would announce it.
	third := s.repo.commitAndPush("third")
	r2 := startWatcher(t, s.cfg, bus)
	r2.waitCommit(third, watcher.TriggerStartup)
	s.repo.write("vm/base/fourth.yaml", "kind: VM\n")
	fourth := s.repo.commitAndPush("fourth")
	before := s.server.requests.Load()

	code, body := r2.send(delivery)
	if code != http.StatusOK || !strings.Contains(body, "already delivered") {
		t.Errorf("replayed delivery answered %d %q, want 200 already delivered", code, body)
	}
	if got := s.server.requests.Load(); got != before {
		t.Errorf("the replay reached git: %d requests", got-before)
	}
	if evs := bus.pub.forCommit(fourth); len(evs) != 0 {
		t.Errorf("the replay announced %+v", evs)
	}
	if got := r2.metric("proxops_watcher_webhook_requests_total", map[string]string{"result": "replayed"}); got != 1 {
		t.Errorf("replayed webhooks = %v, want 1", got)
	}
	// The next real push is delivered normally.
	if code, _ := r2.send(pushHook(watcher.ProviderGitHub, fourth)); code != http.StatusAccepted {
		t.Fatalf("new delivery answered %d", code)
	}
	r2.waitCommit(fourth, watcher.TriggerWebhook)
}

func TestForcePushIsFollowed(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	s.repo.write("vm/base/web.yaml", "kind: VM\nversion: 2\n")
	second := s.repo.commitAndPush("v2")
	r.waitCommit(second, watcher.TriggerPoll)

	// Rewrite history: drop v2, push v3 on top of the first commit.
	runGit(t, s.repo.dir, "reset", "-q", "--hard", s.first)
	s.repo.write("vm/base/web.yaml", "kind: VM\nversion: 3\n")
	rewritten := s.repo.commit("v3 rewritten")
	s.repo.push("main", true)
	ev := r.waitCommit(rewritten, watcher.TriggerPoll)
	snap, err := r.bus.getTree(ev.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileContent(snap, "vm/base/web.yaml"); got != "kind: VM\nversion: 3\n" {
		t.Errorf("after the force-push web.yaml = %q", got)
	}

	// Force-push back to a commit the mirror already holds.
	runGit(t, s.repo.dir, "reset", "-q", "--hard", second)
	s.repo.push("main", true)
	testkit.Eventually(t, waitTimeout, "the rollback to the second commit", func() bool {
		evs := r.bus.pub.forCommit(second)
		return len(evs) == 2
	})
	testkit.Eventually(t, waitTimeout, "the status to name the second commit", func() bool { return r.w.Status().Commit == second })
}

func TestTreeIsStoredOnceHoweverManyTriggersFire(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	s.cfg.DriftInterval = 200 * time.Millisecond
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)
	tree := s.repo.treeOf(s.first)

	// The same tree under a new commit, by webhook, poll, drift and request.
	again := s.repo.commitAndPush("empty commit, same tree")
	if code, _ := r.send(pushHook(watcher.ProviderGitea, again)); code != http.StatusAccepted {
		t.Fatal("webhook refused")
	}
	r.waitEvent("the second commit", func(ev watcher.RepoChanged) bool { return ev.Commit == again })
	r.waitEvent("a drift tick", func(ev watcher.RepoChanged) bool { return ev.Trigger == watcher.TriggerDrift })
	if err := bus.send(watcher.ReconcileRequest{RequestID: "r1"}); err != nil {
		t.Fatal(err)
	}
	r.stop()
	r2 := startWatcher(t, s.cfg, bus)
	// The stream drops this announcement: the webhook's event for the same commit has its id.
	r2.waitCall(again, watcher.TriggerStartup)

	for _, ev := range bus.pub.all() {
		if ev.Tree != tree {
			t.Errorf("event %s names tree %s, want %s", ev.EventID, ev.Tree, tree)
		}
	}
	if n := bus.writes.of(tree); n != 1 {
		t.Errorf("tree written %d times, want once", n)
	}
	if got := r2.metric("proxops_watcher_trees_stored_total", nil); got != 0 {
		t.Errorf("the restarted watcher stored %v trees, want 0", got)
	}
}

func TestDriftScheduleReannouncesWithADriftID(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.DriftInterval = 150 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	var drifts []watcher.RepoChanged
	testkit.Eventually(t, waitTimeout, "two drift ticks", func() bool {
		drifts = r.bus.pub.matching(func(ev watcher.RepoChanged) bool { return ev.Trigger == watcher.TriggerDrift })
		return len(drifts) >= 2
	})
	prefix := s.server.url("repo.git") + "@" + s.first + "#drift-"
	var slots []int64
	for _, ev := range drifts[:2] {
		if ev.Commit != s.first || !strings.HasPrefix(ev.EventID, prefix) {
			t.Fatalf("drift event %+v, want commit %s and id %s<slot>", ev, s.first, prefix)
		}
		slot, err := strconv.ParseInt(strings.TrimPrefix(ev.EventID, prefix), 10, 64)
		if err != nil {
			t.Fatalf("drift id %q: %v", ev.EventID, err)
		}
		slots = append(slots, slot)
	}
	if slots[1] <= slots[0] {
		t.Errorf("drift slots %v do not increase", slots)
	}
	now := watcher.DriftSlot(time.Now(), s.cfg.DriftInterval)
	if slots[1] > now || slots[1] < now-100 {
		t.Errorf("drift slot %d is not unix time / interval (now %d)", slots[1], now)
	}
}

func TestDryRunRequestsDoNotHoldBackDriftTicks(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.DriftInterval = 200 * time.Millisecond
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			req := watcher.ReconcileRequest{RequestID: "preview-" + strconv.Itoa(i), DryRun: true, Clusters: []string{"lab"}}
			if err := bus.send(req); err != nil {
				t.Errorf("request: %v", err)
				return
			}
		}
	}()
	testkit.Eventually(t, waitTimeout, "two drift ticks among the requests", func() bool {
		return len(bus.pub.matching(func(ev watcher.RepoChanged) bool { return ev.Trigger == watcher.TriggerDrift })) >= 2
	})
	close(stop)
	<-done
}

func TestFetchFailureKeepsTheLastGoodTreeAndRetries(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)

	s.server.down.Store(true)
	second := s.repo.commitAndPush("second")
	testkit.Eventually(t, waitTimeout, "repeated failures", func() bool { return r.w.Status().ConsecutiveFailures >= 3 })
	st := r.w.Status()
	if !st.Stale || st.Commit != s.first || st.LastError == "" {
		t.Errorf("status while failing = %+v, want stale on %s with an error", st, s.first)
	}
	if got := r.metric("proxops_watcher_stale", nil); got != 1 {
		t.Errorf("stale metric = %v, want 1", got)
	}
	if got := r.metric("proxops_watcher_fetch_failures_total", nil); got < 3 {
		t.Errorf("fetch failures metric = %v, want ≥ 3", got)
	}
	if got := r.metric("proxops_desired_stale", nil); got != 1 {
		t.Errorf("proxops_desired_stale = %v while the remote is down, want 1", got)
	}
	if got := r.metric("proxops_git_fetch_duration_seconds", map[string]string{"result": "error"}); got < 3 {
		t.Errorf("failed git reads observed = %v, want ≥ 3", got)
	}
	testkit.Eventually(t, waitTimeout, "the last-read age to grow", func() bool { return r.metric("proxops_git_last_fetch_age_seconds", nil) >= 0.2 })
	if code, _ := r.get("/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while stale = %d, want 503", code)
	}
	if evs := bus.pub.forCommit(second); len(evs) != 0 {
		t.Errorf("announced %+v while the remote was down", evs)
	}
	// One report when the source turned stale, however many polls failed since.
	if hs := bus.healthReports(); len(hs) != 2 || hs[0].Stale || !hs[1].Stale || hs[1].Commit != s.first || hs[1].LastError == "" {
		t.Errorf("health reports while failing: %+v; want healthy, then stale on %s with the error", hs, s.first)
	}

	s.server.down.Store(false)
	r.waitCommit(second, watcher.TriggerPoll)
	testkit.Eventually(t, waitTimeout, "recovery", func() bool { return !r.w.Status().Stale })
	testkit.Eventually(t, waitTimeout, "a healthy report", func() bool { return len(bus.healthReports()) == 3 })
	if h := bus.healthReports()[2]; h.Stale || h.LastError != "" || h.Failures != 0 {
		t.Errorf("health report after recovery: %+v", h)
	}
	if code, _ := r.get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after recovery = %d, want 200", code)
	}
	if got := r.metric("proxops_desired_stale", nil); got != 0 {
		t.Errorf("proxops_desired_stale = %v after recovery, want 0", got)
	}
	// The age grew past 0.2 s while the remote was down; polls every 20 ms reset it.
	testkit.Eventually(t, waitTimeout, "the last-read age to reset", func() bool {
		age := r.metric("proxops_git_last_fetch_age_seconds", nil)
		return age >= 0 && age < 0.1
	})
}

func TestOversizedCommitKeepsTheLastGoodTreeUntilTheBranchMoves(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	s.repo.write("vm/base/huge.yaml", strings.Repeat("x", watcher.MaxSnapshotFileSize+1))
	huge := s.repo.commitAndPush("a file too large")
	testkit.Eventually(t, waitTimeout, "the refusal", func() bool { return strings.Contains(r.w.Status().LastError, "too large") })
	fetches := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "fetch"})
	testkit.Eventually(t, waitTimeout, "more failed polls", func() bool { return r.w.Status().ConsecutiveFailures >= 4 })
	if got := r.metric("proxops_watcher_git_duration_seconds", map[string]string{"operation": "fetch"}); got != fetches {
		t.Errorf("the refused commit was fetched again (%v fetches, then %v)", fetches, got)
	}
	if st := r.w.Status(); st.Commit != s.first || !st.Stale {
		t.Errorf("status = %+v, want the first commit kept, stale", st)
	}
	if evs := r.bus.pub.forCommit(huge); len(evs) != 0 {
		t.Errorf("announced the oversized commit: %+v", evs)
	}

	runGit(t, s.repo.dir, "rm", "-q", "vm/base/huge.yaml")
	fixed := s.repo.commitAndPush("remove the large file")
	r.waitCommit(fixed, watcher.TriggerPoll)
}

func TestCommitWithALinkLeavingTheRepositoryIsNotAnnounced(t *testing.T) {
	s := newRemoteSetup(t)
	s.cfg.PollInterval = 20 * time.Millisecond
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)

	if err := os.Symlink("../../../../etc/passwd", filepath.Join(s.repo.dir, "vm", "base", "passwd.yaml")); err != nil {
		t.Fatal(err)
	}
	bad := s.repo.commitAndPush("a link out of the repository")
	testkit.Eventually(t, waitTimeout, "the refusal", func() bool {
		return strings.Contains(r.w.Status().LastError, "symbolic link vm/base/passwd.yaml leads outside the repository")
	})
	if st := r.w.Status(); st.Commit != s.first || !st.Stale {
		t.Errorf("status = %+v, want the first commit kept, stale", st)
	}
	if evs := r.bus.pub.forCommit(bad); len(evs) != 0 {
		t.Errorf("announced the commit with the link: %+v", evs)
	}

	runGit(t, s.repo.dir, "rm", "-q", "vm/base/passwd.yaml")
	fixed := s.repo.commitAndPush("remove the link")
	r.waitCommit(fixed, watcher.TriggerPoll)
}

func TestStartupWhenTheRemoteIsDownAnnouncesTheLastGoodTree(t *testing.T) {
	s := newRemoteSetup(t)
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)
	r.stop()

	s.server.down.Store(true)
	r2 := startWatcher(t, s.cfg, bus)
	testkit.Eventually(t, waitTimeout, "a second startup event", func() bool {
		return len(bus.pub.matching(func(ev watcher.RepoChanged) bool {
			return ev.Trigger == watcher.TriggerStartup && ev.Commit == s.first
		})) == 2
	})
	if st := r2.w.Status(); !st.Stale {
		t.Errorf("status = %+v, want stale", st)
	}
}

// After an upgrade from a version that named committed snapshots by git's tree hash, a watcher that cannot
// reach its repository at start still announces its last good commit, under the snapshot's content name.
func TestLastGoodCommitRecordedUnderAGitTreeHashIsAnnouncedUnderItsContentName(t *testing.T) {
	s := newRemoteSetup(t)
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)
	r.stop()
	ctx := context.Background()
	keys, err := bus.env.Bus.Keys(ctx, natsbus.BucketDeliveries)
	if err != nil {
		t.Fatal(err)
	}
	gitTree := runGit(t, s.repo.dir, "rev-parse", s.first+"^{tree}")
	rewritten := 0
	for _, k := range keys {
		if strings.HasSuffix(k, ".state") {
			state := fmt.Sprintf(`{"commit":%q,"tree":%q,"subject":"initial manifests"}`, s.first, gitTree)
			if _, err := bus.env.Bus.PutBytes(ctx, natsbus.BucketDeliveries, k, []byte(state)); err != nil {
				t.Fatal(err)
			}
			rewritten++
		}
	}
	if rewritten != 1 {
		t.Fatalf("found %d recorded announcements, want 1", rewritten)
	}

	s.server.down.Store(true)
	startWatcher(t, s.cfg, bus)
	testkit.Eventually(t, waitTimeout, "a second startup event", func() bool {
		return len(bus.pub.matching(func(ev watcher.RepoChanged) bool { return ev.Trigger == watcher.TriggerStartup })) == 2
	})
	startups := bus.pub.matching(func(ev watcher.RepoChanged) bool { return ev.Trigger == watcher.TriggerStartup })
	if ev := startups[1]; ev.Commit != s.first || ev.Tree != s.repo.treeOf(s.first) {
		t.Fatalf("startup event after the upgrade: commit %s tree %s, want %s %s", ev.Commit, ev.Tree, s.first, s.repo.treeOf(s.first))
	}
}

func TestPublishFailureIsRetried(t *testing.T) {
	s := newRemoteSetup(t)
	bus := newTestBus(t)
	bus.pub.setFail(errors.New("bus unavailable"))
	r := startWatcher(t, s.cfg, bus)
	testkit.Eventually(t, waitTimeout, "failed publishes", func() bool { return r.metric("proxops_watcher_publish_failures_total", nil) >= 2 })
	bus.pub.setFail(nil)
	r.waitCommit(s.first, watcher.TriggerStartup)
}

func TestReconcileRequests(t *testing.T) {
	s := newRemoteSetup(t)
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)
	repo := s.server.url("repo.git")

	t.Run("current commit", func(t *testing.T) {
		err := bus.send(watcher.ReconcileRequest{RequestID: "req-1", Clusters: []string{"lab"}, DryRun: true, RequestedBy: "cli:test"})
		if err != nil {
			t.Fatal(err)
		}
		ev := r.waitEvent("the manual event", func(ev watcher.RepoChanged) bool { return ev.RequestID == "req-1" })
		want := watcher.RepoChanged{
			Repo: repo, Branch: "main", Commit: s.first, Tree: s.repo.treeOf(s.first), Trigger: watcher.TriggerManual,
			EventID: repo + "@" + s.first + "#manual-req-1", RequestID: "req-1", Clusters: []string{"lab"}, DryRun: true,
			Subject: "initial manifests",
		}
		if diff := cmp.Diff(want, ev); diff != "" {
			t.Errorf("manual event (-want +got):\n%s", diff)
		}
	})
	t.Run("picks up a new commit first", func(t *testing.T) {
		second := s.repo.commitAndPush("second")
		if err := bus.send(watcher.ReconcileRequest{RequestID: "req-2"}); err != nil {
			t.Fatal(err)
		}
		ev := r.waitEvent("the manual event", func(ev watcher.RepoChanged) bool { return ev.RequestID == "req-2" })
		if ev.Commit != second || ev.EventID != repo+"@"+second+"#manual-req-2" {
			t.Errorf("manual event = %+v, want commit %s", ev, second)
		}
	})
	t.Run("requester's own tree", func(t *testing.T) {
		s.repo.write("vm/base/web.yaml", "apiVersion: proxops/v1\nkind: VM\nmetadata:\n  name: web\nspec:\n  vmid: 102\n")
		snap, err := watcher.SnapshotWorktree(context.Background(), s.repo.dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.putPreview(snap); err != nil {
			t.Fatal(err)
		}
		if err := bus.send(watcher.ReconcileRequest{RequestID: "preview-1", Tree: snap.Tree, DryRun: true}); err != nil {
			t.Fatal(err)
		}
		ev := r.waitEvent("the preview event", func(ev watcher.RepoChanged) bool { return ev.RequestID == "preview-1" })
		want := watcher.RepoChanged{
			Repo: repo, Branch: "main", Tree: snap.Tree, Trigger: watcher.TriggerManual,
			EventID: repo + "@" + snap.Tree + "#manual-preview-1", RequestID: "preview-1", DryRun: true,
		}
		if diff := cmp.Diff(want, ev); diff != "" {
			t.Errorf("preview event (-want +got):\n%s", diff)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, req := range []watcher.ReconcileRequest{
			{RequestID: ""},
			{RequestID: "has space"},
			{RequestID: "ok", Clusters: []string{"Bad.Name"}},
			{RequestID: "ok", Tree: "sha256-" + strings.Repeat("0", 64)},
			// A git tree hash is not a content-addressed snapshot name.
			{RequestID: "ok", Tree: strings.Repeat("a", 40)},
		} {
			if err := bus.send(req); !errors.Is(err, watcher.ErrInvalidRequest) {
				t.Errorf("request %+v: error %v, want ErrInvalidRequest", req, err)
			}
		}
		// Refused requests are terminated, not handed back for another delivery.
		testkit.Eventually(t, waitTimeout, "every request settled", bus.requestsSettled)
	})
}

func TestMetricsAndHealthAreServed(t *testing.T) {
	s := newRemoteSetup(t)
	r := startWatcher(t, s.cfg, newTestBus(t))
	r.waitCommit(s.first, watcher.TriggerStartup)
	r.send(webhook{provider: watcher.ProviderGitLab, ref: "refs/heads/main", after: s.first})

	code, body := r.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`proxops_watcher_revision_info{branch="main",commit="` + s.first + `"`,
		`proxops_watcher_webhook_requests_total{provider="gitlab",result="unauthorized"} 1`,
		`proxops_watcher_git_duration_seconds_count{operation="fetch"} 1`,
		`proxops_watcher_events_published_total{trigger="startup"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	code, body = r.get("/healthz")
	if code != http.StatusOK || !strings.Contains(body, s.first) {
		t.Errorf("/healthz: %d %s", code, body)
	}
}

func TestWebhookEndpointsNeedASecret(t *testing.T) {
	s := newRemoteSetup(t)
	deps, disconnect := newTestBus(t).connect(nil, nil)
	defer disconnect()
	w, err := watcher.New(s.cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	h := pushHook(watcher.ProviderGitHub, s.first)
	rec := httptest.NewRecorder()
	w.Handler().ServeHTTP(rec, h.request("http://watcher"))
	if rec.Code != http.StatusNotFound {
		t.Errorf("webhook without a configured secret answered %d, want 404", rec.Code)
	}
}

func fileContent(snap watcher.TreeSnapshot, path string) string {
	for _, f := range snap.Files {
		if f.Path == path {
			return string(f.Content)
		}
	}
	return "<absent>"
}

// A watcher that answers requests only announces nothing by itself (no start, no poll, no drift): it
// announces the trees requesters stored, with the commit a committed snapshot carries, as dry runs; only a
// work-tree apply on an operator's subject is announced to be applied, naming that operator. It refuses a
// request without a tree.
func TestRequestsOnlyWatcherAppliesOnlyOperatorsTrees(t *testing.T) {
	root := t.TempDir()
	repo := newWorkRepo(t, root)
	seed(repo)
	first := repo.commitAndPush("initial manifests")
	bus := newTestBus(t)
	cfg := watcher.Config{Path: repo.dir, PollInterval: 10 * time.Millisecond, DriftInterval: 10 * time.Millisecond, RequestsOnly: true}
	r := startWatcher(t, cfg, bus)
	snap, err := watcher.SnapshotBranch(context.Background(), repo.dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.putPreview(snap); err != nil {
		t.Fatal(err)
	}
	// A request on the ordinary subject that asks to apply a tree is planned as a dry run.
	if err := bus.send(watcher.ReconcileRequest{RequestID: "apply-1", Tree: snap.Tree, RequestedBy: "operator"}); err != nil {
		t.Fatal(err)
	}
	ev := r.waitEvent("the requested tree", func(ev watcher.RepoChanged) bool { return ev.RequestID == "apply-1" })
	if ev.Commit != first || ev.Tree != snap.Tree || !ev.DryRun || ev.RequestedBy != "" || ev.Trigger != watcher.TriggerManual {
		t.Fatalf("event %+v, want a dry run of commit %s tree %s asked by nobody", ev, first, snap.Tree)
	}
	// The same on an operator's subject is an apply, recorded as that operator's.
	if err := bus.sendAs("operator-alice", watcher.ReconcileRequest{RequestID: "apply-2", Tree: snap.Tree, RequestedBy: "someone else"}); err != nil {
		t.Fatal(err)
	}
	ev = r.waitEvent("the operator's tree", func(ev watcher.RepoChanged) bool { return ev.RequestID == "apply-2" })
	if ev.Tree != snap.Tree || ev.DryRun || ev.RequestedBy != "operator-alice" {
		t.Fatalf("event %+v, want an apply of tree %s requested by operator-alice", ev, snap.Tree)
	}
	if err := bus.send(watcher.ReconcileRequest{RequestID: "now"}); !errors.Is(err, watcher.ErrInvalidRequest) {
		t.Fatalf("request without a tree: %v, want ErrInvalidRequest", err)
	}
	if err := bus.sendAs("operator", watcher.ReconcileRequest{RequestID: "apply-head"}); !errors.Is(err, watcher.ErrInvalidRequest) {
		t.Fatalf("work-tree apply without a tree: %v, want ErrInvalidRequest", err)
	}
	if all := bus.pub.all(); len(all) != 2 {
		t.Fatalf("published %d events, want only the requested ones: %+v", len(all), all)
	}
}

// A snapshot whose content does not hash to the name it is stored under is refused, whoever names it.
func TestRequestForATamperedTreeIsRefused(t *testing.T) {
	root := t.TempDir()
	repo := newWorkRepo(t, root)
	seed(repo)
	repo.commitAndPush("initial manifests")
	bus := newTestBus(t)
	startWatcher(t, watcher.Config{Path: repo.dir, RequestsOnly: true}, bus)
	snap, err := watcher.SnapshotWorktree(context.Background(), repo.dir)
	if err != nil {
		t.Fatal(err)
	}
	forged := snap
	forged.Files = append(slices.Clone(snap.Files), watcher.TreeFile{Path: "vm/extra.yaml", Content: []byte("kind: VM\n")})
	if _, err := bus.env.Bus.PutObjectIfAbsent(context.Background(), natsbus.ObjectPreviews, snap.Tree, wire.TreeSnapshotToProto(forged)); err != nil {
		t.Fatal(err)
	}
	for _, send := range []func() error{
		func() error {
			return bus.send(watcher.ReconcileRequest{RequestID: "preview", Tree: snap.Tree, DryRun: true})
		},
		func() error {
			return bus.sendAs("operator", watcher.ReconcileRequest{RequestID: "apply", Tree: snap.Tree})
		},
	} {
		if err := send(); !errors.Is(err, watcher.ErrInvalidRequest) || !strings.Contains(err.Error(), snap.Tree) {
			t.Errorf("request for a tampered tree: %v, want ErrInvalidRequest naming %s", err, snap.Tree)
		}
	}
	if all := bus.pub.all(); len(all) != 0 {
		t.Fatalf("published %+v for a tampered tree", all)
	}
}

// A rollback is an operator's request: on an operator's subject it is announced for the current commit (no
// tree needed) with the operator as who asked; on the ordinary subject it may only be previewed (a dry run),
// and one that asks to apply is refused. A rollback names one cluster and a guest.
func TestARollbackIsAnnouncedOnlyForAnOperator(t *testing.T) {
	s := newRemoteSetup(t)
	bus := newTestBus(t)
	r := startWatcher(t, s.cfg, bus)
	r.waitCommit(s.first, watcher.TriggerStartup)
	rb := &event.Rollback{Guest: "web", Snapshot: "proxops-0123456789ab"}

	if err := bus.sendAs("operator-alice", watcher.ReconcileRequest{RequestID: "rb-1", Clusters: []string{"lab"}, Rollback: rb}); err != nil {
		t.Fatal(err)
	}
	ev := r.waitEvent("the operator's rollback", func(ev watcher.RepoChanged) bool { return ev.RequestID == "rb-1" })
	if ev.Commit != s.first || ev.DryRun || ev.RequestedBy != "operator-alice" || ev.Rollback == nil || *ev.Rollback != *rb {
		t.Fatalf("event %+v, want a rollback of %+v at %s asked by operator-alice", ev, rb, s.first)
	}
	if err := bus.send(watcher.ReconcileRequest{RequestID: "rb-2", Clusters: []string{"lab"}, DryRun: true, Rollback: rb}); err != nil {
		t.Fatal(err)
	}
	ev = r.waitEvent("the rollback preview", func(ev watcher.RepoChanged) bool { return ev.RequestID == "rb-2" })
	if !ev.DryRun || ev.RequestedBy != "" || ev.Rollback == nil {
		t.Fatalf("preview event %+v, want a dry run of the rollback", ev)
	}
	for _, req := range []watcher.ReconcileRequest{
		{RequestID: "rb-3", Clusters: []string{"lab"}, Rollback: rb},
		{RequestID: "rb-4", DryRun: true, Rollback: rb},
		{RequestID: "rb-5", Clusters: []string{"lab"}, DryRun: true, Rollback: &event.Rollback{}},
	} {
		if err := bus.send(req); !errors.Is(err, watcher.ErrInvalidRequest) {
			t.Errorf("request %+v: error %v, want ErrInvalidRequest", req, err)
		}
	}
	testkit.Eventually(t, waitTimeout, "every request settled", bus.requestsSettled)
}
