package status_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/plan"
)

// chromium runs headless Chromium with a throwaway profile and no network but loopback.
func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian package chromium; .ci/run installs it): skipping the browser test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.Bytes()
}

// outDir is out/ at the repository root, which git ignores.
func outDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestStatusPageShowsEveryClusterAndResourceInABrowser(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	e := p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook)
	converge(p, e)
	failBeta(p, e)
	hostile := argsGap
	hostile.Key, hostile.Value = "description", `<script>document.title="owned"</script>`
	p.gaps("alpha", hostile)
	sys.settle()

	sys.mu.Lock()
	url := sys.url + "/"
	sys.mu.Unlock()
	dom := string(chromium(t, "--dump-dom", url))

	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`data-cluster="alpha" data-phase="converged"`),
		regexp.MustCompile(`data-cluster="beta" data-phase="failed"`),
		regexp.MustCompile(`data-resource="VM/web-01" data-state="converged"`),
		regexp.MustCompile(`data-resource="ISO/debian-12" data-state="converged"`),
		regexp.MustCompile(`data-resource="VM/legacy" data-state="skipped"`),
		regexp.MustCompile(`data-resource="LXC/cache" data-state="converged"`),
		regexp.MustCompile(`data-resource="VM/db-01" data-state="failed"`),
		regexp.MustCompile(`VM 102 is locked \(backup\)`),
		regexp.MustCompile(`data-finding="anomaly"`),
		regexp.MustCompile(`disk scsi0 would shrink from 40G to 32G`),
		regexp.MustCompile(`data-gap="VM/db-01:args"`),
		regexp.MustCompile(`data-attention`),
		regexp.MustCompile(`2 clusters: 1 failed, 1 converged`),
		regexp.MustCompile(`&lt;script&gt;document.title="owned"&lt;/script&gt;`),
	} {
		if !want.MatchString(dom) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(dom, "<title>owned") || strings.Contains(dom, `<script>document.title`) {
		t.Error("a value from PVE was not escaped")
	}

	shot := filepath.Join(outDir(t), "status-page.png")
	_ = os.Remove(shot)
	chromium(t, "--screenshot="+shot, "--window-size=1280,900", "--hide-scrollbars", url)
	info, err := os.Stat(shot)
	if err != nil || info.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v (size %d)", shot, err, sizeOf(info))
	}
	t.Logf("status page screenshot: %s", shot)
}

func sizeOf(info os.FileInfo) int64 {
	if info == nil {
		return 0
	}
	return info.Size()
}

func TestStatusPageNeedsNoScriptAndRefreshesItself(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	e := p.repoChanged("3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f", event.TriggerWebhook)
	r := runOf("alpha", uniqueRun("a"), e)
	p.planned(r, plan.Plan{Resources: alphaResources, Operations: []plan.Operation{pruneOld}, Held: true,
		HeldReason: "would prune 3 of 4 owned LXC guests"})
	p.held(r, "would prune 3 of 4 owned LXC guests", "LXC/old-ct")
	p.gaps("alpha", inventory.Gap{Setting: inventory.Setting{Kind: "VM", Name: "web-01", Node: "pve1", VMID: 101, Key: "hookscript", Value: "local:snippets/x.sh"}})
	sys.settle()
	sys.mu.Lock()
	url := sys.url + "/"
	sys.mu.Unlock()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	page := body.String()
	for _, want := range []string{`<meta http-equiv="refresh" content="2">`, `data-phase="held"`, `data-held-prunes`, "LXC/old-ct",
		"would prune 3 of 4 owned LXC guests", `data-gap="VM/web-01:hookscript"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, banned := range []string{"<script", "src=\"http", "href=\"http", "@import"} {
		if strings.Contains(page, banned) {
			t.Errorf("the page contains %q: it must need no script and no external asset", banned)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
}

// Snapshots on the page, as an on-call engineer needs them after a change went wrong: alpha's failed change
// names the safety snapshot it kept, in the resource's error and in the Needs attention box; beta's guest,
// rolled back by an operator, is shown suspended, with the snapshot and who asked, then with its drift from
// git once the next plan reports it, and needs attention too.
func TestStatusPageShowsKeptSnapshotsAndRolledBackGuestsInABrowser(t *testing.T) {
	t.Parallel()
	sys := startSystem(t)
	p := sys.publisher()
	e := p.repoChanged("5e0c3a1b2d4f6e8a0b1c2d3e4f5a6b7c8d9e0f1a", event.TriggerWebhook)
	snapDB := plan.Operation{ID: "op-010", Node: "pve2", VMID: 102, GuestType: inventory.QEMU, Ref: "VM/db-01",
		Action: plan.ActionSnapshot, Reason: "VM/db-01: safety snapshot before restart"}
	kept := "start failed: injected; the safety snapshot proxops-0123456789ab taken before it is kept (roll back to it in PVE if the guest needs it)"
	r := runOf("alpha", uniqueRun("a"), e)
	p.planned(r, plan.Plan{Resources: []string{"VM/db-01"}, Operations: []plan.Operation{snapDB, configureDB}})
	p.result(r, snapDB, plan.StatusSucceeded, "TASK OK")
	p.result(r, configureDB, plan.StatusFailed, kept)
	p.finished(r, plan.OutcomeFailed, done(snapDB, plan.OpSucceeded, "TASK OK"), done(configureDB, plan.OpFailed, kept))

	rollbackDB := plan.Operation{ID: "vm-102-rollback", Node: "pve2", VMID: 102, GuestType: inventory.QEMU, Ref: "VM/db-01",
		Action: plan.ActionRollback, Reason: "VM/db-01: roll back to the snapshot proxops-0123456789ab taken 2026-01-02T03:04:05Z, as alice asked",
		Params: []plan.KV{{Key: plan.SnapshotNameParam, Value: "proxops-0123456789ab"}, {Key: plan.RequestedByParam, Value: "alice"}}}
	r = runOf("beta", uniqueRun("b"), e)
	p.planned(r, plan.Plan{Resources: []string{"VM/db-01"}, Operations: []plan.Operation{rollbackDB}})
	p.result(r, rollbackDB, plan.StatusSucceeded, "TASK OK")
	p.finished(r, plan.OutcomeSucceeded, done(rollbackDB, plan.OpSucceeded, "TASK OK"))
	sys.settle()

	sys.mu.Lock()
	url := sys.url + "/"
	sys.mu.Unlock()
	dom := string(chromium(t, "--dump-dom", url))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`data-cluster="alpha" data-phase="failed"`),
		regexp.MustCompile(`data-resource="VM/db-01" data-state="failed"`),
		regexp.MustCompile(`the safety snapshot proxops-0123456789ab taken before it is kept`),
		regexp.MustCompile(`data-resource="VM/db-01" data-state="suspended"`),
		regexp.MustCompile(`rolled back: VM/db-01: roll back to the snapshot proxops-0123456789ab taken 2026-01-02T03:04:05Z, as alice asked`),
		regexp.MustCompile(`<li><strong>beta</strong> VM/db-01: <span class="badge state-suspended phase-suspended">suspended</span> rolled back: `),
		regexp.MustCompile(`<li><strong>alpha</strong> VM/db-01: <span class="badge state-failed phase-failed">failed</span> [^<]*proxops-0123456789ab taken before it is kept`),
	} {
		if !want.MatchString(dom) {
			t.Errorf("after the failure and the rollback, the page lacks %s", want)
		}
	}

	// The next plan of beta reports the suspended guest's drift and changes nothing.
	e = p.repoChanged("5e0c3a1b2d4f6e8a0b1c2d3e4f5a6b7c8d9e0f1a", event.TriggerDrift)
	r = runOf("beta", uniqueRun("b"), e)
	p.planned(r, plan.Plan{Resources: []string{"VM/db-01"}, Findings: []plan.Finding{{Kind: plan.FindingSuspended, Ref: "VM/db-01",
		Node: "pve2", VMID: 102, Message: "suspended from correction: rolled back to proxops-0123456789ab by alice; drift from git, not corrected: memory: 2048 → 4096"}}})
	p.finished(r, plan.OutcomeSucceeded)
	sys.settle()
	dom = string(chromium(t, "--dump-dom", url))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`data-resource="VM/db-01" data-state="suspended"`),
		regexp.MustCompile(`data-finding="suspended"`),
		regexp.MustCompile(`drift from git, not corrected: memory: 2048 → 4096`),
	} {
		if !want.MatchString(dom) {
			t.Errorf("after the drift plan, the page lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", dom)
	}
}
