package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/testcorpus"
)

// runCLI runs the proxops command with args and returns its standard output and the exit code it asks for.
func runCLI(t *testing.T, args ...string) (string, int, error) {
	t.Helper()
	cmd := newRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	code := 0
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code, err = ee.code, ee.err
	case err != nil:
		code = 1
	}
	return out.String(), code, err
}

func brokenCase(name string) string {
	return filepath.Join("..", "..", "internal", "repo", "testdata", "broken", name)
}

func TestValidateAcceptsTheUpstreamExamples(t *testing.T) {
	out, code, err := runCLI(t, "validate", "--repo", testcorpus.Dir("upstream-examples"))
	if err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, out)
	}
	if out != "1 cluster, 12 resources, 0 errors, 0 warnings\n" {
		t.Errorf("output = %q", out)
	}
}

func TestValidateListsDiagnosticsThenTheSummaryAndExitsOne(t *testing.T) {
	out, code, err := runCLI(t, "validate", "--repo", brokenCase("vmid-collision-across-nodes"))
	if code != 1 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	want := "vm/lab/web.yaml:7:9: VM/web: spec.vmid: PVE id 100 is claimed by both LXC/cache (lxc/lab/cache.yaml:7:9) and VM/web; vmids are unique across the whole cluster, whatever the node\n" +
		"1 cluster, 4 resources, 1 error, 0 warnings\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestValidateStrictFailsOnWarnings(t *testing.T) {
	dir := brokenCase("unknown-field-typo")
	if _, code, _ := runCLI(t, "validate", "--repo", dir); code != 0 {
		t.Errorf("warnings alone exit %d, want 0", code)
	}
	if _, code, _ := runCLI(t, "validate", "--repo", dir, "--strict"); code != 1 {
		t.Errorf("--strict with a warning exits %d, want 1", code)
	}
}

func TestValidateJSONIsStableAndComplete(t *testing.T) {
	out, code, _ := runCLI(t, "validate", "--repo", brokenCase("shared-endpoint"), "--output", "json")
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	var rep struct {
		Valid    bool
		Summary  struct{ Clusters, Resources, Errors, Warnings int }
		Clusters []struct {
			Name  string
			Valid bool
		}
		Diagnostics []struct {
			Severity, File, Field, Message, Text string
			Line, Column                         int
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Valid || rep.Summary.Clusters != 2 || rep.Summary.Errors != 2 || len(rep.Clusters) != 2 || rep.Clusters[0].Name != "lab" ||
		rep.Diagnostics[0].Line != 3 || rep.Diagnostics[0].Column != 5 || rep.Diagnostics[0].File != "clusters/lab/config.yaml" {
		t.Errorf("report = %+v", rep)
	}
	if !strings.HasPrefix(out, "{\n  \"valid\": false,\n  \"strict\": false,\n  \"summary\": {") {
		t.Errorf("field order changed:\n%s", out)
	}
	again, _, _ := runCLI(t, "validate", "--repo", brokenCase("shared-endpoint"), "--output", "json")
	if again != out {
		t.Error("two runs differ")
	}
}

func TestValidateClusterFilterKeepsRepositoryWideProblems(t *testing.T) {
	out, code, _ := runCLI(t, "validate", "--repo", brokenCase("shared-endpoint"), "--cluster", "lab2")
	if code != 1 || strings.Contains(out, "clusters/lab/config.yaml") || !strings.Contains(out, "clusters/lab2/config.yaml:3:5") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
	_, code, err := runCLI(t, "validate", "--repo", brokenCase("shared-endpoint"), "--cluster", "nope")
	if code != 1 || err == nil || !strings.Contains(err.Error(), `--cluster "nope" is not a cluster of this repository (known: [lab lab2])`) {
		t.Errorf("unknown cluster: exit %d, %v", code, err)
	}
	out, code, _ = runCLI(t, "validate", "--repo", brokenCase("legacy-flat-file"), "--cluster", "lab")
	if code != 1 || !strings.Contains(out, "legacy layout") {
		t.Errorf("repository-wide problem missing for one cluster: exit %d\n%s", code, out)
	}
}

func TestValidateDiscoversTheRepositoryFromTheCurrentDirectory(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".git/HEAD", "ref: refs/heads/main\n")
	write("clusters/home/config.yaml", "pve:\n  clusters:\n    home:\n      base-url: https://pve.home.invalid:8006\n")
	write("clusters/home/resources.yaml", "resources: []\n")
	write("vm/home/README.md", "notes\n")
	t.Chdir(filepath.Join(root, "vm", "home"))
	out, code, err := runCLI(t, "validate")
	if code != 0 || err != nil || out != "1 cluster, 0 resources, 0 errors, 0 warnings\n" {
		t.Errorf("exit %d, %v, output %q", code, err, out)
	}
	t.Chdir(t.TempDir())
	if _, code, err := runCLI(t, "validate"); code != 1 || err == nil || !strings.Contains(err.Error(), "no ProxOps GitOps repository found") {
		t.Errorf("outside a repository: exit %d, %v", code, err)
	}
}

func TestValidateRejectsAnUnknownOutputFormat(t *testing.T) {
	_, code, err := runCLI(t, "validate", "--repo", testcorpus.Dir("upstream-examples"), "-o", "yaml")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("exit %d, %v", code, err)
	}
}

// validate finds the repository the way the other commands do when no --repo is given, and checks the
// configuration they would run with: a --config file laid over the repository's proxops.yaml.
func TestValidateUsesTheConfigurationAndRepositoryTheOtherCommandsUse(t *testing.T) {
	root := t.TempDir()
	write := func(p, s string) string {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return full
	}
	write(".git/HEAD", "ref: refs/heads/main\n")
	write("clusters/home/config.yaml", "pve:\n  clusters:\n    home:\n      base-url: https://pve.home.invalid:8006\n")
	write("clusters/home/resources.yaml", "resources: []\n")
	t.Chdir(t.TempDir())
	const ok = "1 cluster, 0 resources, 0 errors, 0 warnings\n"

	t.Setenv("PROXOPS_GIT_PATH", root)
	if out, code, err := runCLI(t, "validate"); code != 0 || err != nil || out != ok {
		t.Errorf("PROXOPS_GIT_PATH: exit %d, %v, output %q", code, err, out)
	}
	t.Setenv("PROXOPS_GIT_PATH", "")

	etc := t.TempDir()
	good := filepath.Join(etc, "proxops.yaml")
	if err := os.WriteFile(good, []byte("git:\n  path: "+root+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code, err := runCLI(t, "validate", "--config", good); code != 0 || err != nil || out != ok {
		t.Errorf("--config naming the repository: exit %d, %v, output %q", code, err, out)
	}
	bad := filepath.Join(etc, "bad.yaml")
	if err := os.WriteFile(bad, []byte("git:\n  path: "+root+"\nreconcile:\n  prune-budget: -5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"validate", "--config", bad}, {"validate", "--config", bad, "--repo", root}} {
		if out, code, err := runCLI(t, args...); code != 1 || err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "prune-budget") {
			t.Errorf("%v: exit %d, %v, output %q", args, code, err, out)
		}
	}
	if out, code, err := runCLI(t, "validate", "--git-url", "https://git.example.invalid/ops/infra.git"); code != 1 || err == nil || !strings.Contains(err.Error(), "give --repo DIR") {
		t.Errorf("--git-url: exit %d, %v, output %q", code, err, out)
	}
}

// A repository whose files link to files outside it (a key, an environment file, another YAML file) is
// reported link by link, and nothing of the files they point to reaches the output.
func TestLinksLeavingTheRepositoryAreRefusedAndNamed(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "repo")
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}
	const (
		ageKey = "AGE-SECRET-KEY-1QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7LQPZRY9X8GF2TVDW0S3JN54KHCE6M"
		token  = "PVEAPIToken=root@pam!ci=0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9"
		cloud  = "tok-7b1c9d2e4f6a8b0c1d3e5f7a9b1c3d5e"
	)
	write(filepath.Join(tmp, "keys", "age.txt"), "# created: 2025-01-01T00:00:00Z\n# public key: age1xyz\n"+ageKey+"\n")
	write(filepath.Join(tmp, "ci.env"), "PVE_TOKEN="+token+"\n")
	write(filepath.Join(tmp, "cloud.yaml"), "pve:\n  clusters:\n    home:\n      base-url: "+cloud+"\n")
	write(filepath.Join(root, ".git", "HEAD"), "ref: refs/heads/main\n")
	write(filepath.Join(root, "clusters", "home", "resources.yaml"), "resources:\n  - ../../vm/home/web.yaml\n")
	link("../../../keys/age.txt", "vm/home/web.yaml")
	link("../ci.env", "proxops.yaml")
	link("../../../cloud.yaml", "clusters/home/config.yaml")

	for _, format := range []string{"text", "json"} {
		out, code, err := runCLI(t, "validate", "--repo", root, "-o", format)
		if code != 1 || err != nil {
			t.Fatalf("%s: exit %d, %v\n%s", format, code, err, out)
		}
		for _, want := range []string{
			"symbolic link vm/home/web.yaml leads outside the repository: not followed",
			"symbolic link proxops.yaml leads outside the repository: not followed",
			"symbolic link clusters/home/config.yaml leads outside the repository: not followed",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output does not name the link (%q):\n%s", format, want, out)
			}
		}
		for _, secret := range []string{ageKey[:20], ageKey[30:50], "age1xyz", token[:16], token[30:], cloud[:12], "keys/age.txt", "ci.env", "cloud.yaml", tmp} {
			if strings.Contains(out, secret) {
				t.Errorf("%s: output carries %q from outside the repository:\n%s", format, secret, out)
			}
		}
	}
}
