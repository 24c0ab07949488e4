package status_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildProxops builds the proxops command from this workspace.
func buildProxops(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "proxops")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/proxops/proxops/cmd/proxops")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build proxops: %v\n%s", err, out)
	}
	return bin
}

func TestProxopsStatusReadsTheRunningSystemThroughItsDataDirectory(t *testing.T) {
	t.Parallel()
	bin := buildProxops(t)
	sys := startSystem(t)
	twoClusters(sys.publisher())
	served := sys.settle()

	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"status", "--data-dir", sys.dir}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("proxops status %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.String()
	}

	text := run()
	for _, want := range []string{
		"last cycle: incomplete (1 failed action) (commit 3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f)\n",
		"objects=7 actions_ok=4 actions_err=1 pruned=0 prune_deferred=0 skipped=1 anomalies=1 gaps=1\n",
		"[alpha] phase=converged commit=3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f applied=3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f\n",
		"  VM web-01 101 converged\n",
		"  VM legacy 300 skipped live object without proxops tag; never touched\n",
		"[beta] phase=failed commit=3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f applied=-: 1 operation failed; the next plan retries\n",
		"  VM db-01 102 failed VM/db-01: config drift (memory) err: VM 102 is locked (backup)\n",
		"  finding: anomaly VM/db-01 pve2/102 spec.disks[0].size: disk scsi0 would shrink from 40G to 32G; not written\n",
		"  gap: VM/db-01 pve2/102 args=-cpu host (not modelled: cpu flags)\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("proxops status lacks %q:\n%s", want, text)
		}
	}

	var doc statusDoc
	if err := json.Unmarshal([]byte(run("--output", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if got, want := doc.deterministic(), served.deterministic(); got != want {
		t.Errorf("proxops status --output json and /status disagree:\n%s\n%s", got, want)
	}
}
