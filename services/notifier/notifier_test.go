package notifier_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/bustest"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/testkit"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/notifier"
)

// A failed run is told to Slack once: what failed, on which cluster, from which commit, with a link to the
// cluster's status page, under a delivery id made of the run and the event.
func TestNotificationToSlackOnFailedRun(t *testing.T) {
	env := bustest.Start(t)
	slack := newReceiver(t)
	start(t, env, repo.NotificationsConfig{ExternalURL: "https://proxops.example.com",
		Providers: []repo.NotificationProvider{{Name: "chat", Type: "slack", URL: slack.URL + "/services/T0/B0/x"}}}, nil)
	id := publishFinished(t, env.Bus, failedRun("lab", "run-1"))
	got := slack.waitRequests(t, 1)[0]
	if got.Method != http.MethodPost || got.Path != "/services/T0/B0/x" || got.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("request %s %s %v", got.Method, got.Path, got.Header)
	}
	if d := got.Header.Get(notifier.HeaderDelivery); d != id+".run-failed" {
		t.Errorf("delivery id %q, want %q", d, id+".run-failed")
	}
	var body struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(got.Body, &body); err != nil {
		t.Fatal(err)
	}
	want := "ProxOps: run on cluster lab failed (commit 3f9a1c2e77d0): 1 of 2 operations failed, 0 skipped\n" +
		"- VM/db-01 configure failed: VM 102 is locked (backup)\n" +
		"https://proxops.example.com/status/lab"
	if body.Text != want {
		t.Errorf("text:\n%s\nwant:\n%s", body.Text, want)
	}
}

// Every provider gets a rejected plan, with its diagnostics, in its own format; the generic webhook's
// signature verifies with the key from the secrets file, and secrets go where the provider expects them.
func TestNotificationInEveryProviderFormat(t *testing.T) {
	env := bustest.Start(t)
	recv := map[string]*receiver{}
	var providers []repo.NotificationProvider
	for _, p := range []repo.NotificationProvider{
		{Name: "hook", Type: "webhook", TokenRef: "proxops-token"},
		{Name: "slack", Type: "slack"},
		{Name: "mm", Type: "mattermost"},
		{Name: "matrix", Type: "matrix", Room: "!ops:example.org", TokenRef: "proxops-token"},
		{Name: "ntfy", Type: "ntfy"},
		{Name: "gotify", Type: "gotify", TokenRef: "proxops-token"},
		{Name: "discord", Type: "discord"},
		{Name: "teams", Type: "teams"},
		{Name: "am", Type: "alertmanager"},
	} {
		r := newReceiver(t)
		recv[p.Name] = r
		p.URL = r.URL
		if p.Type == "ntfy" {
			p.URL = r.URL + "/proxops-alerts"
		}
		providers = append(providers, p)
	}
	start(t, env, repo.NotificationsConfig{SecretsFile: "notify.sops.yaml", Providers: providers}, nil)
	id := publishRejected(t, env.Bus, rejectedPlan("lab", "run-2")) + ".plan-rejected"
	diagnostic := "vm/lab/web-01.yaml:6:1: VM/web-01: spec.memory: required"
	title := "ProxOps: commit 9d8e7f6a5b4c rejected for cluster lab (parse_error); nothing was applied"
	for name, r := range recv {
		got := r.waitRequests(t, 1)
		if len(got) != 1 {
			t.Errorf("%s: %d requests", name, len(got))
		}
		g := got[0]
		if g.Header.Get(notifier.HeaderDelivery) != id || g.Header.Get(notifier.HeaderEvent) != "plan-rejected" {
			t.Errorf("%s: headers %v", name, g.Header)
		}
		if !contains(g.Body, "spec.memory: required") {
			t.Errorf("%s: the diagnostic is not in the body: %s", name, g.Body)
		}
		switch name {
		case "hook":
			if sig := g.Header.Get(notifier.HeaderSignature); sig != notifier.Sign([]byte(labToken), g.Body) {
				t.Errorf("webhook signature %q does not verify", sig)
			}
			var n notifier.Notification
			if err := json.Unmarshal(g.Body, &n); err != nil {
				t.Fatal(err)
			}
			if n.ID != id || n.Event != "plan-rejected" || n.Cluster != "lab" || n.Commit != "9d8e7f6a5b4c3d2e" ||
				n.Title != title || len(n.Details) != 1 || n.Details[0] != diagnostic || n.Severity != "critical" {
				t.Errorf("webhook body %+v", n)
			}
		case "slack", "mm":
			if !contains(g.Body, `"text":"`+title) {
				t.Errorf("%s body %s", name, g.Body)
			}
		case "discord":
			if !contains(g.Body, `"content":"`+title) {
				t.Errorf("discord body %s", g.Body)
			}
		case "teams":
			if !contains(g.Body, `"contentType":"application/vnd.microsoft.card.adaptive"`) || !contains(g.Body, title) {
				t.Errorf("teams body %s", g.Body)
			}
		case "matrix":
			if g.Method != http.MethodPut || g.Path != "/_matrix/client/v3/rooms/!ops:example.org/send/m.room.message/"+id ||
				g.Header.Get("Authorization") != "Bearer "+labToken || !contains(g.Body, `"msgtype":"m.text"`) {
				t.Errorf("matrix %s %s %v %s", g.Method, g.Path, g.Header, g.Body)
			}
		case "ntfy":
			if g.Path != "/proxops-alerts" || g.Header.Get("Title") != title || g.Header.Get("Priority") != "5" {
				t.Errorf("ntfy %s %v", g.Path, g.Header)
			}
		case "gotify":
			if g.Path != "/message" || g.Header.Get("X-Gotify-Key") != labToken || !contains(g.Body, `"priority":8`) {
				t.Errorf("gotify %s %v %s", g.Path, g.Header, g.Body)
			}
		case "am":
			var alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			}
			if err := json.Unmarshal(g.Body, &alerts); err != nil || g.Path != "/api/v2/alerts" || len(alerts) != 1 ||
				alerts[0].Labels["alertname"] != "ProxOpsPlanRejected" || alerts[0].Labels["cluster"] != "lab" ||
				alerts[0].Annotations["summary"] != title {
				t.Errorf("alertmanager %s %s (%v)", g.Path, g.Body, err)
			}
		}
	}
}

// A receiver that answers 500 gets the notification again, after a delay, with the same delivery id; the
// failure shows in the metrics until the retry succeeds.
func TestNotificationRetriedOn500WithTheSameDeliveryID(t *testing.T) {
	env := bustest.Start(t)
	hook := newReceiver(t, http.StatusInternalServerError, http.StatusBadGateway)
	reg := prometheus.NewRegistry()
	start(t, env, repo.NotificationsConfig{Providers: []repo.NotificationProvider{{Name: "hook", Type: "webhook", URL: hook.URL}}}, reg)
	id := publishFinished(t, env.Bus, failedRun("lab", "run-3")) + ".run-failed"
	got := hook.waitRequests(t, 3)
	for i, g := range got {
		if g.Header.Get(notifier.HeaderDelivery) != id || string(g.Body) != string(got[0].Body) {
			t.Errorf("attempt %d: delivery id %q, body %s", i+1, g.Header.Get(notifier.HeaderDelivery), g.Body)
		}
	}
	testkit.Eventually(t, 30*time.Second, "the metrics to count the two failures and the send", func() bool {
		return testutil.ToFloat64(counter(t, reg, "hook", "failed")) == 2 && testutil.ToFloat64(counter(t, reg, "hook", "sent")) == 1
	})
	if n := len(hook.requests()); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}

// A notifier stopped in the middle of a delivery sends it again when it starts, with the same delivery id;
// a refusal (4xx) is not retried.
func TestNotificationRedeliveredAfterARestartMidDelivery(t *testing.T) {
	env := bustest.Start(t)
	hook := newReceiver(t)
	hook.block = make(chan struct{})
	cfg := repo.NotificationsConfig{Providers: []repo.NotificationProvider{{Name: "hook", Type: "webhook", URL: hook.URL}}}
	first := start(t, env, cfg, nil)
	id := publishFinished(t, env.Bus, failedRun("lab", "run-4")) + ".run-failed"
	<-hook.arrived
	first.stop(t)
	hook.mu.Lock()
	hook.block = nil
	hook.mu.Unlock()
	start(t, env, cfg, nil)
	got := hook.waitRequests(t, 2)
	if got[0].Header.Get(notifier.HeaderDelivery) != id || got[1].Header.Get(notifier.HeaderDelivery) != id {
		t.Fatalf("delivery ids %q, %q; want %q twice", got[0].Header.Get(notifier.HeaderDelivery), got[1].Header.Get(notifier.HeaderDelivery), id)
	}
}

// A security warning of the adopter's gap report is told once: again with the same delivery id when the
// notifier stopped in the middle of telling it, never for the next report that still holds it.
func TestNotifSecurityWarningFromTheAdoptersGapReport(t *testing.T) {
	env := bustest.Start(t)
	hook := newReceiver(t)
	hook.block = make(chan struct{})
	cfg := repo.NotificationsConfig{Providers: []repo.NotificationProvider{{Name: "hook", Type: "webhook", URL: hook.URL}}}
	first := start(t, env, cfg, nil)
	publishGapReport(t, env.Bus, unconfinedReport("lab"))
	<-hook.arrived
	first.stop(t)
	hook.mu.Lock()
	hook.block = nil
	hook.mu.Unlock()
	start(t, env, cfg, nil)
	got := hook.waitRequests(t, 2)
	var n notifier.Notification
	if err := json.Unmarshal(got[1].Body, &n); err != nil {
		t.Fatal(err)
	}
	if n.Event != "security-warning" || n.Cluster != "lab" || n.ID != got[0].Header.Get(notifier.HeaderDelivery) ||
		n.ID != got[1].Header.Get(notifier.HeaderDelivery) || len(n.Details) != 1 ||
		!strings.Contains(n.Details[0], "LXC/build-01 (vmid 210 on pve1) lxc.apparmor.profile: unconfined") {
		t.Fatalf("notification %+v (first delivery id %q)", n, got[0].Header.Get(notifier.HeaderDelivery))
	}
	// The same warnings again, then a failed run: only the run is told.
	publishGapReport(t, env.Bus, unconfinedReport("lab"))
	publishFinished(t, env.Bus, failedRun("lab", "run-6"))
	got = hook.waitRequests(t, 3)
	if !contains(got[2].Body, `"event":"run-failed"`) {
		t.Fatalf("third notification %s, want only the failed run", got[2].Body)
	}
	testkit.Eventually(t, 30*time.Second, "the second gap report to be settled", func() bool {
		data, _, err := env.Bus.GetBytes(context.Background(), bus.BucketNotify, "lab.security")
		return err == nil && strings.Contains(string(data), `"seq":2`)
	})
	if n := len(hook.requests()); n != 3 {
		t.Fatalf("%d requests, want 3: an unchanged warning was told again", n)
	}
}

// A provider that keeps failing shows in the cluster's delivery health, published for the status service,
// with why (naming its host only); once a delivery to it succeeds it shows as recovered.
func TestNotificationFailuresArePublishedForTheStatusAndClearedOnRecovery(t *testing.T) {
	env := bustest.Start(t)
	hook := newReceiver(t, http.StatusBadGateway, http.StatusBadGateway)
	start(t, env, repo.NotificationsConfig{Providers: []repo.NotificationProvider{{Name: "hook", Type: "webhook", URL: hook.URL + "/secret-path"}}}, nil)
	subject, _ := bus.NotifySubject("lab")
	health := func() (report.NotificationHealth, bool) {
		m, err := env.Bus.LastMessage(context.Background(), bus.StreamNotify, subject)
		if err != nil {
			return report.NotificationHealth{}, false
		}
		h, err := wire.DecodeNotificationHealth(context.Background(), m.Decode)
		return h, err == nil
	}
	publishFinished(t, env.Bus, failedRun("lab", "run-7"))
	testkit.Eventually(t, 30*time.Second, "the failing provider to be published", func() bool {
		h, ok := health()
		return ok && len(h.Providers) == 1 && h.Providers[0].Failing
	})
	h, _ := health()
	d := h.Providers[0]
	if h.Cluster != "lab" || d.Provider != "hook" || d.Type != "webhook" || d.Event != "run-failed" ||
		!strings.Contains(d.Message, "502") || strings.Contains(d.Message, "secret-path") {
		t.Errorf("health %+v", h)
	}
	hook.waitRequests(t, 3)
	testkit.Eventually(t, 30*time.Second, "the provider to show as recovered", func() bool {
		h, ok := health()
		return ok && len(h.Providers) == 1 && !h.Providers[0].Failing
	})
}

// E-mail goes over SMTP to every recipient, with the delivery id as its Message-ID.
func TestNotificationByEmailOverSMTP(t *testing.T) {
	env := bustest.Start(t)
	mail := newSMTPServer(t)
	start(t, env, repo.NotificationsConfig{Providers: []repo.NotificationProvider{{Name: "mail", Type: "smtp",
		URL: "smtp://" + mail.addr, From: "proxops@example.org", To: []string{"ops@example.org", "oncall@example.org"}}}}, nil)
	id := publishFinished(t, env.Bus, failedRun("lab", "run-5")) + ".run-failed"
	msg := mail.wait(t)
	if msg.from != "<proxops@example.org>" || strings.Join(msg.to, ",") != "<ops@example.org>,<oncall@example.org>" {
		t.Errorf("envelope from %s to %v", msg.from, msg.to)
	}
	for _, want := range []string{"Subject: ProxOps: run on cluster lab failed (commit 3f9a1c2e77d0)", "Message-ID: <" + id + "@proxops>",
		"- VM/db-01 configure failed: VM 102 is locked (backup)"} {
		if !strings.Contains(msg.data, want) {
			t.Errorf("no %q in the mail:\n%s", want, msg.data)
		}
	}
}

// smtpServer is a minimal SMTP server on loopback that keeps the first message it receives.
type smtpServer struct {
	addr string
	mu   sync.Mutex
	msgs []smtpMessage
}

type smtpMessage struct {
	from string
	to   []string
	data string
}

func newSMTPServer(t *testing.T) *smtpServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s := &smtpServer{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *smtpServer) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	reply := func(line string) { _, _ = fmt.Fprintf(c, "%s\r\n", line) }
	reply("220 test ESMTP")
	var m smtpMessage
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimRight(line, "\r\n")
		upper := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(upper, "EHLO"), strings.HasPrefix(upper, "HELO"):
			reply("250 test")
		case strings.HasPrefix(upper, "MAIL FROM:"):
			m.from = strings.TrimSpace(cmd[len("MAIL FROM:"):])
			reply("250 ok")
		case strings.HasPrefix(upper, "RCPT TO:"):
			m.to = append(m.to, strings.TrimSpace(cmd[len("RCPT TO:"):]))
			reply("250 ok")
		case upper == "DATA":
			reply("354 go on")
			var data strings.Builder
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
				data.WriteString(l)
			}
			m.data = data.String()
			s.mu.Lock()
			s.msgs = append(s.msgs, m)
			s.mu.Unlock()
			reply("250 queued")
		case upper == "QUIT":
			reply("221 bye")
			return
		default:
			reply("250 ok")
		}
	}
}

func (s *smtpServer) wait(t *testing.T) smtpMessage {
	t.Helper()
	var m smtpMessage
	testkit.Eventually(t, 30*time.Second, "a mail", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.msgs) > 0 {
			m = s.msgs[0]
			return true
		}
		return false
	})
	return m
}
