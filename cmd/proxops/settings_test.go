package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
)

// parseGlobal parses the global flags as proxops up sees them: the root's persistent flags merged with
// up's own.
func parseGlobal(t *testing.T, args ...string) (globalOptions, string) {
	t.Helper()
	up, _, err := newRootCommand().Find([]string{"up"})
	if err != nil {
		t.Fatal(err)
	}
	if err := up.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	repoFlag, err := up.Flags().GetString("repo")
	if err != nil {
		t.Fatal(err)
	}
	return globalsOf(up), repoFlag
}

// gitRepo makes a directory holding a git repository (nothing committed).
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	return dir
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func writeFile(t *testing.T, p, content string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The predecessor's loading modes: where the repository is, from flags, the environment and a --config
// file, each flag applying only when given.
func TestSourceFollowsTheLoadingModesAndTheirPrecedence(t *testing.T) {
	local, other := gitRepo(t), gitRepo(t)
	t.Chdir(local)
	outside := t.TempDir()
	urlConfig := writeFile(t, filepath.Join(outside, "url.yaml"), "git:\n  url: https://git.example.invalid/ops/gitops.git\n  branch: prod\n")
	pathConfig := writeFile(t, filepath.Join(outside, "path.yaml"), "git:\n  path: "+other+"\n")
	insideConfig := writeFile(t, filepath.Join(local, "etc", "cluster.yaml"),
		"pve:\n  clusters:\n    lab:\n      base-url: https://pve.example.invalid:8006\n      secrets-file: lab.sops.yaml\n")
	dotConfig := writeFile(t, filepath.Join(outside, "dot.yaml"), "git:\n  path: .\n")
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		root    string
		url     string
		branch  string
		wantErr string
	}{
		{name: "repository-first: the current directory's repository", root: local},
		{name: "--git-path", args: []string{"--git-path", other}, root: other},
		{name: "--repo is --git-path", args: []string{"--repo", other}, root: other},
		{name: "PROXOPS_GIT_PATH", env: map[string]string{envGitPath: other}, root: other},
		{name: "--git-path beats PROXOPS_GIT_PATH", args: []string{"--git-path", local}, env: map[string]string{envGitPath: other}, root: local},
		{name: "--git-url switches to URL mode", args: []string{"--git-url", "https://git.example.invalid/x.git"}, url: "https://git.example.invalid/x.git", branch: "main"},
		{name: "--git-url with --git-branch", args: []string{"--git-url", "https://git.example.invalid/x.git", "--git-branch", "prod"}, url: "https://git.example.invalid/x.git", branch: "prod"},
		{name: "--git-url and --git-path", args: []string{"--git-url", "https://h/x.git", "--git-path", local}, wantErr: "give one"},
		{name: "--config in URL mode", args: []string{"--config", urlConfig}, url: "https://git.example.invalid/ops/gitops.git", branch: "prod"},
		{name: "PROXOPS_CONFIG in URL mode", env: map[string]string{envConfig: urlConfig}, url: "https://git.example.invalid/ops/gitops.git", branch: "prod"},
		{name: "--config beats PROXOPS_CONFIG", args: []string{"--config", pathConfig}, env: map[string]string{envConfig: urlConfig}, root: other},
		{name: "--git-path clears the configuration's URL", args: []string{"--config", urlConfig, "--git-path", other}, root: other, branch: "prod"},
		{name: "--git-branch beats git.branch", args: []string{"--config", urlConfig, "--git-branch", "main"}, url: "https://git.example.invalid/ops/gitops.git", branch: "main"},
		{name: "a configuration without a git source belongs to its repository", args: []string{"--config", insideConfig}, root: local},
		{name: "git.path . needs a repository around the configuration", args: []string{"--config", dotConfig}, wantErr: "no ProxOps GitOps repository found"},
		{name: "a missing --config", args: []string{"--config", filepath.Join(outside, "nope.yaml")}, wantErr: "--config"},
		{name: "a missing --git-path", args: []string{"--git-path", filepath.Join(outside, "nope")}, wantErr: "repository"},
		{name: "--git-poll-sec 0", args: []string{"--git-poll-sec", "0"}, wantErr: "--git-poll-sec 0: must be greater than zero"},
		{name: "--prune-budget -2", args: []string{"--prune-budget", "-2"}, wantErr: "--prune-budget -2"},
		{name: "--pve-auth password", args: []string{"--pve-auth", "password"}, wantErr: `--pve-auth "password": want token or ticket`},
		{name: "--log-level loud", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "--listen without a port", args: []string{"--listen", "localhost"}, wantErr: "--listen"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, repoFlag := parseGlobal(t, c.args...)
			src, err := resolveSource(g, repoFlag, lookupIn(c.env))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if src.Root != c.root || src.URL != c.url || src.Branch != c.branch {
				t.Fatalf("root %q url %q branch %q, want %q %q %q", src.Root, src.URL, src.Branch, c.root, c.url, c.branch)
			}
		})
	}
	t.Run("a configuration inside the repository names its clusters by their repository path", func(t *testing.T) {
		g, _ := parseGlobal(t, "--config", insideConfig)
		src, err := resolveSource(g, "", lookupIn(nil))
		if err != nil {
			t.Fatal(err)
		}
		cl := src.Process.PVE.Clusters["lab"]
		if cl == nil || cl.File != "etc/cluster.yaml" || cl.SecretsPath() != "etc/lab.sops.yaml" {
			t.Fatalf("cluster lab: %+v", cl)
		}
	})
}

// defaults < the repository's proxops.yaml < the --config file < flags given explicitly; a flag left at its
// default changes nothing.
func TestSettingsPrecedence(t *testing.T) {
	local := gitRepo(t)
	t.Chdir(local)
	tree, diags := repo.ParseConfigFile(repo.ProcessConfigFile, []byte(
		"listen: 127.0.0.1:7000\nreconcile:\n  poll-interval: 45s\n  prune-budget: 5\n  drift-interval: 10m\npve:\n  user: yaml@pve\n  auth: token\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	cfgFile := writeFile(t, filepath.Join(t.TempDir(), "proxops.yaml"),
		"git:\n  path: "+local+"\nlisten: 127.0.0.1:8000\nreconcile:\n  poll-interval: 20s\n")
	cases := []struct {
		name                 string
		args                 []string
		listen               string
		poll, drift          time.Duration
		budget               int
		user, auth, logLevel string
	}{
		{name: "the tree's proxops.yaml over the defaults", listen: "127.0.0.1:7000", poll: 45 * time.Second, drift: 10 * time.Minute, budget: 5, user: "yaml@pve", auth: "token", logLevel: "info"},
		{name: "the --config file over proxops.yaml", args: []string{"--config", cfgFile}, listen: "127.0.0.1:8000", poll: 20 * time.Second, drift: 10 * time.Minute, budget: 5, user: "yaml@pve", auth: "token", logLevel: "info"},
		{name: "flags over both", args: []string{"--config", cfgFile, "--listen", "127.0.0.1:9000", "--git-poll-sec", "7", "--prune-budget", "0", "--pve-user", "flag@pve", "--pve-auth", "ticket", "--log-level", "debug"},
			listen: "127.0.0.1:9000", poll: 7 * time.Second, drift: 10 * time.Minute, budget: 0, user: "flag@pve", auth: "ticket", logLevel: "debug"},
		{name: "--prune-budget -1 keeps the configuration's", args: []string{"--prune-budget", "-1"}, listen: "127.0.0.1:7000", poll: 45 * time.Second, drift: 10 * time.Minute, budget: 5, user: "yaml@pve", auth: "token", logLevel: "info"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, repoFlag := parseGlobal(t, c.args...)
			src, err := resolveSource(g, repoFlag, lookupIn(nil))
			if err != nil {
				t.Fatal(err)
			}
			got := src.effectiveConfig(tree)
			if got.Listen != c.listen || got.Reconcile.PollInterval != c.poll || got.Reconcile.DriftInterval != c.drift ||
				got.Reconcile.PruneBudget != c.budget || got.PVE.User != c.user || got.PVE.Auth != c.auth || got.Log.Level != c.logLevel {
				t.Fatalf("listen %s poll %s drift %s budget %d user %s auth %s log %s", got.Listen, got.Reconcile.PollInterval,
					got.Reconcile.DriftInterval, got.Reconcile.PruneBudget, got.PVE.User, got.PVE.Auth, got.Log.Level)
			}
		})
	}
}

// Credentials: the configuration and flags < the environment < the cluster's secrets file, whose PVE
// entries also silence a global token value.
func TestCredentialPrecedence(t *testing.T) {
	root := repoRoot(t)
	local := gitRepo(t)
	t.Chdir(local)
	keys, err := secrets.ParseAgeKeys("lab", mustRead(t, filepath.Join(root, "internal", "secrets", "testdata", "age", "lab.agekey")))
	if err != nil {
		t.Fatal(err)
	}
	store, err := secrets.Decrypt(t.Context(), "secrets.sops.yaml", mustRead(t, filepath.Join(root, "internal", "secrets", "testdata", "valid.sops.yaml")), keys)
	if err != nil {
		t.Fatal(err)
	}
	tree, _ := repo.ParseConfigFile(repo.ProcessConfigFile, []byte("pve:\n  user: yaml@pve\n  token-id: yaml\n  token: yaml-secret\n"))
	plain := &repo.ClusterConfig{Name: "lab"}
	sops := &repo.ClusterConfig{Name: "lab", SecretsFile: "secrets.sops.yaml",
		Secrets: &repo.ClusterSecrets{PVE: repo.PVESecretRefs{User: "proxops-user", TokenID: "proxops-token-id", Token: "proxops-token"}}}
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		cluster *repo.ClusterConfig
		id      string
	}{
		{name: "proxops.yaml", cluster: plain, id: "yaml@pve!yaml"},
		{name: "--pve-user over proxops.yaml", args: []string{"--pve-user", "flag@pve"}, cluster: plain, id: "flag@pve!yaml"},
		{name: "PROXOPS_PVE_USER over --pve-user", args: []string{"--pve-user", "flag@pve"}, env: map[string]string{secrets.EnvPVEUser: "env@pve"}, cluster: plain, id: "env@pve!yaml"},
		{name: "PROXOPS_PVE_TOKEN_VALUE over the pair", env: map[string]string{secrets.EnvPVETokenValue: "tv@pve!tv=tv-secret"}, cluster: plain, id: "tv@pve!tv"},
		{name: "the secrets file over everything", args: []string{"--pve-user", "flag@pve"}, env: map[string]string{secrets.EnvPVEUser: "env@pve", secrets.EnvPVETokenValue: "tv@pve!tv=tv-secret"}, cluster: sops, id: "proxops@pve!proxops"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, repoFlag := parseGlobal(t, c.args...)
			src, err := resolveSource(g, repoFlag, lookupIn(nil))
			if err != nil {
				t.Fatal(err)
			}
			var st *secrets.Store
			if c.cluster.SecretsFile != "" {
				st = store
			}
			auth, err := secrets.ResolvePVECredentials(credentialInput(src.effectiveConfig(tree), c.cluster, st, c.env, pveFlags{}))
			if err != nil {
				t.Fatal(err)
			}
			id, _, ok := auth.APIToken()
			if !ok || id.Reveal() != c.id {
				t.Fatalf("token id %q, want %q", id.Reveal(), c.id)
			}
		})
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The token of a remote repository: a cluster's secrets file (next to the configuration) over
// PROXOPS_GIT_TOKEN over git.token; two clusters with different tokens are a conflict.
func TestGitTokenPrecedence(t *testing.T) {
	root := repoRoot(t)
	etc := t.TempDir()
	if err := os.WriteFile(filepath.Join(etc, "lab.sops.yaml"), mustRead(t, filepath.Join(root, "internal", "secrets", "testdata", "valid.sops.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOPS_AGE_KEY", "")
	t.Setenv("SOPS_AGE_KEY_FILE", filepath.Join(root, "internal", "secrets", "testdata", "age", "lab.agekey"))
	cluster := func(name, ref string) string {
		return "    " + name + ":\n      base-url: https://" + name + ".example.invalid:8006\n      secrets-file: lab.sops.yaml\n" +
			"      secrets:\n        git:\n          token: " + ref + "\n"
	}
	cases := []struct {
		name, config, env, want, wantErr string
	}{
		{name: "git.token", config: "git:\n  token: yaml-token\n", want: "yaml-token"},
		{name: "PROXOPS_GIT_TOKEN over git.token", config: "git:\n  token: yaml-token\n", env: "env-token", want: "env-token"},
		{name: "the secrets file over both", config: "git:\n  token: yaml-token\npve:\n  clusters:\n" + cluster("lab", "proxops-git-token"),
			env: "env-token", want: "glpat-lab-Hq83tK2mWx9vPz"},
		{name: "two clusters, one token", config: "pve:\n  clusters:\n" + cluster("lab", "proxops-git-token") + cluster("edge", "proxops-git-token"),
			want: "glpat-lab-Hq83tK2mWx9vPz"},
		{name: "two clusters, two tokens", config: "pve:\n  clusters:\n" + cluster("lab", "proxops-git-token") + cluster("edge", "proxops-token"),
			wantErr: "git token conflict: clusters edge and lab"},
		{name: "a missing entry fails closed", config: "pve:\n  clusters:\n" + cluster("lab", "nope"), env: "env-token",
			wantErr: "pve.clusters.lab.secrets.git.token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(etc, "proxops.yaml")
			cfg, diags := repo.ParseConfigFile(file, []byte(c.config))
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			got, err := gitToken(t.Context(), cfg, lookupIn(map[string]string{envGitToken: c.env}))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				if strings.Contains(err.Error(), "glpat") {
					t.Fatalf("the error shows a token: %v", err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("token %q, err %v; want %q", got, err, c.want)
			}
		})
	}
}
