package main

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/pvesim"
	"github.com/proxops/proxops/internal/testcorpus"
)

// predecessorGlobals are the predecessor's global flags with a value each, as its scripts pass them.
var predecessorGlobals = []string{
	"--config", "/etc/proxops/config.yaml", "--git-path", "/srv/infra", "--log-level", "debug",
	"--listen", "127.0.0.1:9595", "--git-url", "https://git.example.invalid/ops/infra.git", "--git-branch", "prod",
	"--git-poll-sec", "30", "--prune-budget", "3", "--pve-user", "proxops@pve", "--pve-auth", "ticket",
	"--ca-file", "/etc/proxops/ca.pem",
}

// Every command accepts the predecessor's global flags, before or after its name, and reads each one as
// given (a command's own flag of the same name, such as sim's --listen, keeps its own meaning).
func TestEveryCommandAcceptsThePredecessorsGlobalFlags(t *testing.T) {
	var names []string
	for _, c := range newRootCommand().Commands() {
		names = append(names, c.Name())
	}
	for _, want := range []string{"adopt", "apply", "diff", "resume", "sim", "status", "suspend", "up", "validate", "version"} {
		if !slices.Contains(names, want) {
			t.Fatalf("no %s command among %v", want, names)
		}
	}
	for _, name := range names {
		for _, order := range []string{"before", "after"} {
			t.Run(name+"/"+order, func(t *testing.T) {
				args := append([]string{name}, predecessorGlobals...)
				if order == "before" {
					args = append(slices.Clone(predecessorGlobals), name)
				}
				cmd, rest, err := newRootCommand().Find(args)
				if err != nil || cmd.Name() != name {
					t.Fatalf("find %v: %v, %v", args, cmd, err)
				}
				if err := cmd.ParseFlags(rest); err != nil {
					t.Fatalf("flags refused: %v", err)
				}
				g := globalsOf(cmd)
				for i := 0; i < len(predecessorGlobals); i += 2 {
					flag := strings.TrimPrefix(predecessorGlobals[i], "--")
					if !g.changed(flag) {
						t.Errorf("--%s not seen as given", flag)
					}
				}
				if g.config != "/etc/proxops/config.yaml" || g.gitPath != "/srv/infra" || g.logLevel != "debug" ||
					g.gitURL != "https://git.example.invalid/ops/infra.git" || g.gitBranch != "prod" || g.gitPollSec != 30 ||
					g.pruneBudget != 3 || g.pveUser != "proxops@pve" || g.pveAuth != "ticket" || g.caFile != "/etc/proxops/ca.pem" {
					t.Errorf("globals read as %+v", g)
				}
				if want := "127.0.0.1:9595"; name != "sim" && g.listen != want {
					t.Errorf("--listen = %q, want %q", g.listen, want)
				}
			})
		}
	}
}

// A command where a global flag has no meaning runs as without it; where it has one, it applies.
func TestGlobalFlagsRunWithCommandsThatIgnoreThem(t *testing.T) {
	dir := localSystem(t, statusHistory()...)
	out, code, err := runCLI(t, "--config", filepath.Join(t.TempDir(), "absent.yaml"), "status", "--data-dir", dir, "--log-level", "debug")
	if err != nil || code != 0 || !strings.HasPrefix(out, "last cycle:") {
		t.Errorf("status with global flags: code %d, err %v\n%s", code, err, out)
	}
	out, code, err = runCLI(t, "--prune-budget", "2", "--pve-auth", "ticket", "version")
	if err != nil || code != 0 || !strings.HasPrefix(out, "proxops ") {
		t.Errorf("version with global flags: code %d, err %v\n%s", code, err, out)
	}
	// validate reads the repository --git-path names, as diff does.
	out, code, err = runCLI(t, "validate", "--git-path", testcorpus.Dir("upstream-examples"), "--log-level", "warn")
	if err != nil || code != 0 || out != "1 cluster, 12 resources, 0 errors, 0 warnings\n" {
		t.Errorf("validate --git-path: code %d, err %v\n%s", code, err, out)
	}
	// A value that cannot be right is refused where the flag applies.
	_, code, err = runCLI(t, "up", "--once", "--git-poll-sec", "0", "--data-dir", t.TempDir())
	if code != 1 || err == nil || !strings.Contains(err.Error(), "--git-poll-sec 0: must be greater than zero") {
		t.Errorf("up --git-poll-sec 0: code %d, err %v", code, err)
	}
}

// commitRepo makes a git repository holding files, committed on branch main.
func commitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := gitRepo(t)
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	e := &demoEnv{t: t, repo: dir}
	e.git("checkout", "-q", "-b", "main")
	e.commit("configuration")
	return dir
}

// status, suspend and resume find the data directory the way up does: data-dir of the repository's
// committed proxops.yaml (from --git-path or the current directory), with a --config file laid over it;
// --data-dir and PROXOPS_DATA_DIR still win.
func TestStatusSuspendAndResumeUseTheConfiguredDataDirectory(t *testing.T) {
	for _, v := range []string{envDataDir, envConfig, envGitPath} {
		t.Setenv(v, "")
	}
	t.Setenv("HOME", t.TempDir())
	running := localSystem(t, statusHistory()...)
	if info, err := os.Stat(filepath.Join(running, bus.ClientInfoFile)); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", bus.ClientInfoFile, err, info)
	}
	idle := filepath.Join(t.TempDir(), "idle")
	tree := commitRepo(t, map[string]string{"proxops.yaml": "data-dir: " + running + "\n"})
	other := commitRepo(t, map[string]string{"proxops.yaml": "data-dir: " + idle + "\n"})
	config := writeFile(t, filepath.Join(t.TempDir(), "process.yaml"), "git:\n  path: "+other+"\ndata-dir: "+running+"\n")

	cases := []struct {
		name string
		args []string
		dir  string
	}{
		{"git-path", []string{"status", "--git-path", tree}, tree},
		{"config over the tree", []string{"--config", config, "status"}, tree},
		{"current directory", []string{"status"}, tree},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(c.dir)
			out, code, err := runCLI(t, c.args...)
			if err != nil || code != 0 || !strings.Contains(out, "[alpha] phase=failed commit=3f9a1c2e") {
				t.Errorf("code %d, err %v\n%s", code, err, out)
			}
		})
	}
	t.Run("the tree of another repository", func(t *testing.T) {
		_, code, err := runCLI(t, "status", "--git-path", other)
		if code != 1 || err == nil || !strings.Contains(err.Error(), "no running proxops up found in "+idle) {
			t.Errorf("code %d, err %v", code, err)
		}
	})
	t.Run("environment and flag win", func(t *testing.T) {
		t.Setenv(envDataDir, idle)
		if _, _, err := runCLI(t, "status", "--git-path", tree); err == nil || !strings.Contains(err.Error(), "found in "+idle) {
			t.Errorf("PROXOPS_DATA_DIR: %v", err)
		}
		if out, _, err := runCLI(t, "status", "--git-path", other, "--data-dir", running); err != nil || !strings.HasPrefix(out, "last cycle:") {
			t.Errorf("--data-dir: %v\n%s", err, out)
		}
	})
	t.Run("a named configuration that cannot be read", func(t *testing.T) {
		_, code, err := runCLI(t, "--config", filepath.Join(t.TempDir(), "absent.yaml"), "status")
		if code != 1 || err == nil || !strings.Contains(err.Error(), "--config") {
			t.Errorf("code %d, err %v", code, err)
		}
	})
	t.Run("suspend and resume", func(t *testing.T) {
		// No process holds the idle data directory: suspend keeps the flag in a store of its own there.
		steps := []struct {
			args []string
			want string
		}{
			{[]string{"suspend", "--cluster", "alpha", "--git-path", other}, "alpha: suspended\n"},
			{[]string{"--config", writeFile(t, filepath.Join(t.TempDir(), "p.yaml"), "git:\n  path: "+tree+"\ndata-dir: "+idle+"\n"),
				"suspend", "--cluster", "alpha"}, "alpha: already suspended\n"},
			{[]string{"resume", "--cluster", "alpha", "--git-path", other, "--log-level", "debug"}, "alpha: resumed\n"},
		}
		for _, s := range steps {
			out, code, err := runCLI(t, s.args...)
			if err != nil || code != 0 || out != s.want {
				t.Errorf("%v: code %d, err %v, out %q, want %q", s.args, code, err, out, s.want)
			}
		}
		if _, err := os.Stat(filepath.Join(idle, "jetstream")); err != nil {
			t.Errorf("the configured data directory holds no store: %v", err)
		}
	})
}

// proxops version prints the version, the commit and the Go version; --version prints cobra's line.
func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	out, code, err := runCLI(t, "version")
	if err != nil || code != 0 {
		t.Fatalf("version: code %d, err %v", code, err)
	}
	m := regexp.MustCompile(`^proxops (\S+) \(commit (\S+), (go\S+)\)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("version output %q", out)
	}
	v := buildInfo()
	if m[1] != v.Version || m[2] != v.Commit || m[3] != runtime.Version() {
		t.Errorf("version %q, commit %q, go %q; want %q, %q, %q", m[1], m[2], m[3], v.Version, v.Commit, runtime.Version())
	}
	out, code, err = runCLI(t, "--version")
	if err != nil || code != 0 || out != "proxops version "+v.Version+"\n" {
		t.Errorf("--version: code %d, err %v, out %q", code, err, out)
	}
}

// --help lists every command and the global flags.
func TestHelpListsEveryCommandAndTheGlobalFlags(t *testing.T) {
	out, code, err := runCLI(t, "--help")
	if err != nil || code != 0 {
		t.Fatalf("--help: code %d, err %v", code, err)
	}
	for _, want := range []string{"adopt", "apply", "diff", "resume", "sim", "status", "suspend", "up", "validate", "version",
		"--config", "--git-path", "--prune-budget", "--pve-auth"} {
		if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(want) + `\b`).MatchString(out) {
			t.Errorf("--help does not list %s:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, "status", "--help")
	if err != nil || !strings.Contains(out, "Global Flags:") || !strings.Contains(out, "--git-url") {
		t.Errorf("status --help: %v\n%s", err, out)
	}
}

// up --once exits 1 when a cluster does not converge: its plan is rejected, or an operation fails.
func TestUpOnceFailsWhenAClusterDoesNotConverge(t *testing.T) {
	t.Run("rejected", func(t *testing.T) {
		e := newDemoEnv(t)
		e.edit("vm/demo/web-01.yaml", func(s string) string { return strings.Replace(s, "vmid: 101", "vmid: 99", 1) })
		e.commit("a vmid PVE refuses")
		out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0")
		if code != 1 || !strings.Contains(out, "demo: rejected") || !strings.Contains(out, "not every cluster converged") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
	t.Run("failed operation", func(t *testing.T) {
		e := newDemoEnvWith(t, func(s *pvesim.Spec) {
			s.Faults = pvesim.Faults{TaskFailureRate: 1, TaskTypes: []string{"qmcreate"}, TaskFailureMessage: "storage 'local-lvm' is full"}
		})
		out, errOut, code := e.run("up", "--once", "--listen", "127.0.0.1:0")
		if code != 1 || !strings.Contains(out, "demo: failed") || !strings.Contains(out, "not every cluster converged") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
}
