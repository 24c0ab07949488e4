package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// headlessChromium runs headless Chromium with a throwaway profile and no network but loopback, and
// returns what it printed; the test is skipped when no Chromium is installed.
func headlessChromium(t *testing.T, args ...string) string {
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
	return stdout.String()
}

// The status page of a running proxops up on the demo repository, loaded in a browser once the demo
// converged, shows the cluster converged at the committed head and every one of the demo's resources
// converged.
func TestStatusPageOfARunningUpShowsTheConvergedDemoInABrowser(t *testing.T) {
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("chromium is not installed (Debian package chromium; .ci/run installs it): skipping the browser test")
	}
	e := newDemoEnv(t)
	u := e.startUp()
	addr := u.addr()
	head := e.head()
	doc := waitConverged(t, u, addr, "demo", head)
	if len(doc.Report.Resources) != 13 {
		t.Fatalf("the demo has 13 resources, /status/demo lists %d", len(doc.Report.Resources))
	}

	dom := headlessChromium(t, "--dump-dom", "http://"+addr+"/")
	wants := []string{
		`data-cluster="demo" data-phase="converged"`,
		"1 cluster: 1 converged",
		"<dt>commit applied</dt><dd>" + head + "</dd>",
		`data-resource="VM/web-01" data-state="converged"`,
		`data-resource="LXC/cache-01" data-state="converged"`,
	}
	for _, r := range doc.Report.Resources {
		wants = append(wants, `data-resource="`+r.Kind+"/"+r.Name+`" data-state="converged"`)
	}
	for _, want := range wants {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(dom, "data-attention") {
		t.Error("a converged demo needs no attention, yet the page has a Needs attention box")
	}
	if t.Failed() {
		t.Logf("page:\n%s", dom)
	}
	if code := u.stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, u.errOut)
	}
}
