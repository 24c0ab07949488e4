package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/report"
)

// clusterDoc reads up's /status/<cluster> document.
func clusterDoc(addr, cluster string) (render.ClusterDocument, error) {
	var doc render.ClusterDocument
	res, err := http.Get("http://" + addr + "/status/" + cluster)
	if err != nil {
		return doc, err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("status %s", res.Status)
	}
	return doc, json.NewDecoder(res.Body).Decode(&doc)
}

// pollStatus polls up's status of a cluster every 100 ms until cond holds; it fails the test when up exits
// or after timeout.
func pollStatus(t *testing.T, u *upRun, addr, cluster string, timeout time.Duration, what string, cond func(render.ClusterDocument) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		doc, err := clusterDoc(addr, cluster)
		if err == nil && cond(doc) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: phase %q, reason %q (%v)\nstderr:\n%s", what, timeout, doc.Report.Phase,
				doc.Report.Reason, err, u.errOut)
		}
		select {
		case <-u.done:
			t.Fatalf("proxops up exited %d while waiting for %s\nstderr:\n%s", u.code, what, u.errOut)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Beside a running up that polls every second, an operator commits and applies, fifty times: the poll and
// the apply announce the same commit within moments of each other. Every apply returns (within its own
// timeout) with the outcome of the run that answers it, none is superseded by the poll of its own commit, and
// PVE holds each commit's change when the apply returns.
func TestApplyBesideUpWithAFastPollAnswersEveryCommit(t *testing.T) {
	e := newDemoEnv(t)
	u := e.startUp("--git-poll-sec", "1")
	addr := u.addr()
	waitConverged(t, u, addr, "demo", e.head())
	for i := range 50 {
		e.edit("vm/demo/web-01.yaml", func(s string) string {
			if j := strings.Index(s, "\n  pve-description: "); j >= 0 {
				s = s[:j] + s[j+strings.Index(s[j+1:], "\n")+1:]
			}
			return strings.Replace(s, "\n  vmid: 101\n", fmt.Sprintf("\n  vmid: 101\n  pve-description: iteration %d\n", i), 1)
		})
		e.commit(fmt.Sprintf("iteration %d", i))
		out, errOut, code := e.run("apply", "--timeout", "90s")
		if code != 0 || !strings.Contains(out, "Apply complete:") || strings.Contains(out+errOut, "superseded") {
			t.Fatalf("apply %d: exit %d\nstdout:\n%s\nstderr:\n%s\nup:\n%s", i, code, out, errOut, u.errOut)
		}
		cfg, ok := e.sim.Config(101)
		if !ok || !strings.Contains(cfg["description"], fmt.Sprintf("iteration %d", i)) {
			t.Fatalf("apply %d returned, and web-01's description is %q", i, cfg["description"])
		}
	}
}

// up started while PVE refuses connections rejects the plan with the cause and says when it plans again;
// once PVE serves again (after 20 s) the cluster converges within 30 s, without waiting for the drift tick.
func TestUpConvergesSoonAfterPVEComesBack(t *testing.T) {
	e := newDemoEnv(t)
	pveAddr := closedAddress(t)
	e.pointAt("http://" + pveAddr)
	head := e.head()
	started := time.Now()
	u := e.startUp()
	addr := u.addr()

	pollStatus(t, u, addr, "demo", time.Minute, "a rejection naming the refused connection and the next attempt",
		func(doc render.ClusterDocument) bool {
			return doc.Report.Phase == "rejected" && strings.Contains(doc.Report.Reason, "connection refused") &&
				strings.Contains(doc.Report.Reason, "planned again at")
		})

	// The outage lasts 20 s from up's start; then PVE serves on the same address.
	time.Sleep(time.Until(started.Add(20 * time.Second)))
	l, err := net.Listen("tcp", pveAddr)
	if err != nil {
		t.Fatalf("serve PVE again on %s: %v", pveAddr, err)
	}
	srv := &http.Server{Handler: e.sim, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve PVE: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	pollStatus(t, u, addr, "demo", 30*time.Second, "convergence after PVE came back", func(doc render.ClusterDocument) bool {
		return doc.Report.Phase == "converged" && doc.Report.LastCommitApplied == head
	})
}

// waitTicks polls up's status of a cluster until its last trigger has moved n times (drift ticks the
// planner may skip still show there), and returns the status then.
func waitTicks(t *testing.T, u *upRun, addr, cluster string, n int) render.ClusterDocument {
	t.Helper()
	var last *time.Time
	var doc render.ClusterDocument
	moved := 0
	pollStatus(t, u, addr, cluster, time.Minute, fmt.Sprintf("%d drift ticks", n), func(d render.ClusterDocument) bool {
		doc = d
		at := d.Timing.LastTriggerAt
		if at != nil && (last == nil || !at.Equal(*last)) {
			if last != nil {
				moved++
			}
			last = at
		}
		return moved >= n
	})
	return doc
}

// waitingForAChange reports whether a cluster's status is a rejection naming cause that waits for a change.
func waitingForAChange(cause string) func(render.ClusterDocument) bool {
	return func(doc render.ClusterDocument) bool {
		return doc.Report.Phase == "rejected" && strings.Contains(doc.Report.Reason, cause) &&
			strings.HasSuffix(doc.Report.Reason, report.WaitsForChange)
	}
}

// copyInto copies a file of the demo secrets test data to path.
func copyInto(t *testing.T, name, path string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "secrets", "testdata", "demo", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A cluster whose secrets file on this host holds a token PVE refuses is rejected once: the drift ticks
// that follow are skipped (the status keeps the rejection and says what it waits for). Once the file holds
// the right token, up plans the cluster again by itself, and it converges.
func TestUpPlansARejectedClusterAgainWhenItsSecretsFileChanges(t *testing.T) {
	e := newDemoEnv(t)
	host := filepath.Join(t.TempDir(), "demo.sops.yaml")
	copyInto(t, "rotated.sops.yaml", host)
	e.edit("clusters/demo/config.yaml", func(s string) string {
		return strings.Replace(s, "secrets-file: secrets.sops.yaml", "secrets-file: "+host, 1)
	})
	e.edit("proxops.yaml", func(s string) string {
		return strings.Replace(s, "reconcile:\n", "reconcile:\n  drift-interval: 1s\n", 1)
	})
	e.commit("the demo cluster's secrets live on the host; drift every second")
	head := e.head()
	u := e.startUp()
	addr := u.addr()
	pollStatus(t, u, addr, "demo", time.Minute, "a rejection for the refused token that waits for a change", waitingForAChange("401"))

	doc := waitTicks(t, u, addr, "demo", 3)
	if doc.Report.Counters.Rejections != 1 || doc.Report.Phase != "rejected" {
		t.Fatalf("after three drift ticks: phase %s, %d rejections, want the one rejection", doc.Report.Phase, doc.Report.Counters.Rejections)
	}

	copyInto(t, "secrets.sops.yaml", host)
	pollStatus(t, u, addr, "demo", 30*time.Second, "convergence once the secrets file holds the right token", func(doc render.ClusterDocument) bool {
		return doc.Report.Phase == "converged" && doc.Report.LastCommitApplied == head
	})
}

// The same for up's --config file: a token PVE refuses is rejected once and not planned again by the drift
// ticks; once the file holds the right token, it is reloaded and the cluster converges.
func TestUpPlansARejectedClusterAgainWhenItsConfigFileChanges(t *testing.T) {
	e := newDemoEnv(t)
	t.Setenv("PROXOPS_PVE_TOKEN_VALUE", "")
	// The cluster takes its token from the process configuration, not from its secrets file.
	e.edit("clusters/demo/config.yaml", func(s string) string {
		i := strings.Index(s, "      secrets:\n")
		if i < 0 {
			t.Fatal("no secrets block in the demo cluster's config")
		}
		return s[:i]
	})
	e.commit("the demo cluster's token comes from the configuration")
	head := e.head()
	config := filepath.Join(t.TempDir(), "proxops.yaml")
	write := func(token string) {
		t.Helper()
		text := "reconcile:\n  drift-interval: 1s\npve:\n  token-value: \"" + token + "\"\n"
		if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("root@pam!demo=00000000-0000-0000-0000-000000000000")
	u := e.startUp("--config", config)
	addr := u.addr()
	pollStatus(t, u, addr, "demo", time.Minute, "a rejection for the refused token that waits for a change", waitingForAChange("401"))

	doc := waitTicks(t, u, addr, "demo", 3)
	if doc.Report.Counters.Rejections != 1 || doc.Report.Phase != "rejected" {
		t.Fatalf("after three drift ticks: phase %s, %d rejections, want the one rejection", doc.Report.Phase, doc.Report.Counters.Rejections)
	}

	write(demoToken)
	pollStatus(t, u, addr, "demo", 30*time.Second, "convergence once the configuration holds the right token", func(doc render.ClusterDocument) bool {
		return doc.Report.Phase == "converged" && doc.Report.LastCommitApplied == head
	})
	if !strings.Contains(u.errOut.String(), "configuration file reloaded") {
		t.Fatalf("up did not say it reloaded its configuration:\n%s", u.errOut)
	}
}
