package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/yamldecode"
	"github.com/proxops/proxops/services/watcher"
)

// The predecessor's command line: its global flags, its environment and its two ways of loading the
// configuration (upstream-surface §3). The precedence is built-in defaults < the repository's proxops.yaml <
// the --config file < flags given explicitly < environment (credentials) < a cluster's secrets file.

// Environment variables of the command line.
const (
	envConfig   = "PROXOPS_CONFIG"
	envGitPath  = "PROXOPS_GIT_PATH"
	envGitToken = "PROXOPS_GIT_TOKEN"
	envDataDir  = "PROXOPS_DATA_DIR"
)

// globalOptions are the predecessor's global flags: persistent flags of the root command, so every command
// accepts them (the predecessor's scripts pass them everywhere). Each applies only when given explicitly; a
// command where one has no meaning accepts it and ignores it.
type globalOptions struct {
	config      string
	gitPath     string
	gitURL      string
	gitBranch   string
	gitPollSec  int
	listen      string
	logLevel    string
	pruneBudget int
	pveUser     string
	pveAuth     string
	caFile      string

	flags *pflag.FlagSet
}

// register defines the global flags on f (the root command's persistent flags).
func (g *globalOptions) register(f *pflag.FlagSet) {
	g.flags = f
	g.pruneBudget = -1
	f.StringVar(&g.config, "config", "", "process configuration file: inline pve.clusters and a git source, or one cluster-local config.yaml (env "+envConfig+")")
	f.StringVar(&g.gitPath, "git-path", "", "local repository: its work tree or a directory below it (env "+envGitPath+")")
	f.StringVar(&g.gitURL, "git-url", "", "remote repository URL (https or ssh): follow it instead of a local repository")
	f.StringVar(&g.gitBranch, "git-branch", "", "branch to follow (default: git.branch, else the checked-out branch of a local repository, else main)")
	f.IntVar(&g.gitPollSec, "git-poll-sec", 0, "seconds between looks at the repository (reconcile.poll-interval; > 0)")
	f.StringVar(&g.listen, "listen", "", "address of the status HTTP server: /status, /healthz, /metrics and the page / (default: listen, 127.0.0.1:9494)")
	f.StringVar(&g.logLevel, "log-level", "", "log level: debug, info, warn or error (default: log.level, info; diff, apply and adopt log only when it is given)")
	f.IntVar(&g.pruneBudget, "prune-budget", -1, "deletions allowed per plan and cluster; 0 = unlimited, -1 = reconcile.prune-budget")
	f.StringVar(&g.pveUser, "pve-user", "", "PVE user (user@realm); "+"PROXOPS_PVE_USER wins")
	f.StringVar(&g.pveAuth, "pve-auth", "", "PVE authentication: token or ticket (default: pve.auth, token)")
	f.StringVar(&g.caFile, "ca-file", "", "PEM CA bundle that verifies the PVE endpoints (pve.ca-file)")
}

// globalsOf reads the global flags from a command's parsed flags (its own merged with the inherited
// persistent ones). A command's own flag of the same name (sim's --listen) shadows the global one.
func globalsOf(cmd *cobra.Command) globalOptions {
	f := cmd.Flags()
	g := globalOptions{flags: f, pruneBudget: -1}
	str := func(name string, into *string) {
		if fl := f.Lookup(name); fl != nil {
			*into = fl.Value.String()
		}
	}
	num := func(name string, into *int) {
		if v, err := f.GetInt(name); err == nil {
			*into = v
		}
	}
	str("config", &g.config)
	str("git-path", &g.gitPath)
	str("git-url", &g.gitURL)
	str("git-branch", &g.gitBranch)
	num("git-poll-sec", &g.gitPollSec)
	str("listen", &g.listen)
	str("log-level", &g.logLevel)
	num("prune-budget", &g.pruneBudget)
	str("pve-user", &g.pveUser)
	str("pve-auth", &g.pveAuth)
	str("ca-file", &g.caFile)
	return g
}

func (g globalOptions) changed(name string) bool {
	if g.flags == nil {
		return false
	}
	f := g.flags.Lookup(name)
	return f != nil && f.Changed
}

// flagConfig is a configuration holding the flags given explicitly, each recorded in Positions so it wins
// when laid over a file (repo.Overlay). The values are checked here.
func (g globalOptions) flagConfig() (*repo.Config, error) {
	c := repo.DefaultConfig()
	set := func(path string) { c.Positions[path] = yamldecode.Pos{} }
	var errs []error
	if g.changed("listen") {
		if _, _, err := net.SplitHostPort(g.listen); err != nil {
			errs = append(errs, fmt.Errorf("--listen %q: want host:port, e.g. 127.0.0.1:9494", g.listen))
		}
		c.Listen = g.listen
		set("listen")
	}
	if g.changed("log-level") && g.logLevel != "" {
		if _, err := parseLevel(g.logLevel); err != nil {
			errs = append(errs, fmt.Errorf("--log-level: %w", err))
		}
		c.Log.Level = g.logLevel
		set("log.level")
	}
	if g.changed("git-poll-sec") {
		if g.gitPollSec <= 0 {
			errs = append(errs, fmt.Errorf("--git-poll-sec %d: must be greater than zero", g.gitPollSec))
		}
		c.Reconcile.PollInterval = time.Duration(g.gitPollSec) * time.Second
		set("reconcile.poll-interval")
	}
	if g.changed("prune-budget") {
		switch {
		case g.pruneBudget < -1:
			errs = append(errs, fmt.Errorf("--prune-budget %d: want 0 (unlimited) or more, or -1 for the configuration's", g.pruneBudget))
		case g.pruneBudget >= 0:
			c.Reconcile.PruneBudget = g.pruneBudget
			set("reconcile.prune-budget")
		}
	}
	if g.changed("pve-user") && g.pveUser != "" {
		c.PVE.User = g.pveUser
		set("pve.user")
	}
	if g.changed("pve-auth") {
		if g.pveAuth != "token" && g.pveAuth != "ticket" {
			errs = append(errs, fmt.Errorf("--pve-auth %q: want token or ticket", g.pveAuth))
		}
		c.PVE.Auth = g.pveAuth
		set("pve.auth")
	}
	if g.changed("ca-file") {
		p, err := absPath(g.caFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--ca-file: %w", err))
		}
		c.PVE.CAFile = p
		set("pve.ca-file")
	}
	if g.changed("git-branch") {
		c.Git.Branch = g.gitBranch
		set("git.branch")
	}
	return c, errors.Join(errs...)
}

// parseLevel reads a log level; warning is accepted for warn.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "warning" {
		s = "warn"
	}
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// absPath expands ~ and makes a path absolute against the current directory.
func absPath(p string) (string, error) {
	p, err := secrets.ExpandHome(p)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// source is where the configuration and the manifests come from.
type source struct {
	// Root is the local repository's root; "" in URL mode.
	Root string
	// URL is the remote repository in URL mode.
	URL string
	// Branch is the branch to follow ("" for a local repository's checked-out branch).
	Branch string
	// ConfigFile is the --config file ("" for none).
	ConfigFile string
	// Process is the --config file with the explicit flags laid over it: what is laid over every tree's
	// proxops.yaml. Nil when neither sets anything.
	Process *repo.Config
	// File is the --config file's own configuration (nil without one): its git section says where the
	// repository is.
	File *repo.Config
}

// resolveSource applies the predecessor's loading modes: with --config (or PROXOPS_CONFIG) that file, and
// its git source; else the repository found from --git-path (PROXOPS_GIT_PATH) or the current directory.
// --git-url switches to URL mode; --git-path to a local repository. lookup reads the environment.
func resolveSource(g globalOptions, repoFlag string, lookup func(string) (string, bool)) (source, error) {
	env := func(name string) string {
		v, _ := lookup(name)
		return v
	}
	var src source
	flagCfg, err := g.flagConfig()
	if err != nil {
		return src, err
	}
	cfgPath := g.config
	if !g.changed("config") {
		cfgPath = env(envConfig)
	}
	if cfgPath != "" {
		p, err := absPath(cfgPath)
		if err != nil {
			return src, fmt.Errorf("--config: %w", err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return src, fmt.Errorf("--config: %w", err)
		}
		cfg, diags := repo.ParseConfigFile(p, data)
		if diags.HasErrors() {
			return src, fmt.Errorf("configuration %s:\n%s", p, diags.Errors().Error())
		}
		src.ConfigFile, src.File = p, cfg
	}

	path := repoFlag
	if path == "" && g.changed("git-path") {
		path = g.gitPath
	}
	pathGiven := path != ""
	switch {
	case pathGiven && g.changed("git-url"):
		return src, errors.New("--git-path (--repo) and --git-url name two repositories: give one")
	case g.changed("git-url"):
		src.URL = g.gitURL
	case pathGiven:
	case env(envGitPath) != "":
		path = env(envGitPath)
	case src.File != nil && src.File.Git.URL != "":
		src.URL = src.File.Git.URL
	case src.File != nil && src.File.Git.Path != "":
		if src.File.Git.Path == "." {
			path = filepath.Dir(src.ConfigFile)
		} else if path, err = secrets.ExpandHome(src.File.Git.Path); err == nil && !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(src.ConfigFile), path)
		}
		if err != nil {
			return src, fmt.Errorf("git.path: %w", err)
		}
	case src.File != nil:
		// A configuration without a git source belongs to the repository it sits in.
		path = filepath.Dir(src.ConfigFile)
	default:
		if path, err = os.Getwd(); err != nil {
			return src, err
		}
	}
	if src.URL == "" {
		if path, err = secrets.ExpandHome(path); err != nil {
			return src, err
		}
		if info, err := os.Stat(path); err != nil {
			return src, fmt.Errorf("repository: %w", err)
		} else if !info.IsDir() {
			return src, fmt.Errorf("repository %s is not a directory", path)
		}
		if src.Root, err = repo.Discover(path); err != nil {
			return src, err
		}
	}

	process := src.File
	if process == nil {
		process = repo.DefaultConfig()
	} else if src.Root != "" {
		process = relativeToRoot(process, src.Root)
	}
	process = repo.Overlay(process, flagCfg)
	if len(process.Positions) > 0 || len(process.PVE.Clusters) > 0 {
		src.Process = process
	}

	switch {
	case g.changed("git-branch"):
		src.Branch = g.gitBranch
	case src.File != nil && hasKey(src.File, "git.branch"):
		src.Branch = src.File.Git.Branch
	case src.URL != "":
		src.Branch = watcher.DefaultBranch
	}
	return src, nil
}

func hasKey(c *repo.Config, path string) bool {
	_, ok := c.Positions[path]
	return ok
}

// relativeToRoot makes a configuration file that lies inside the repository name itself, and its clusters,
// by their path in the repository: a relative secrets-file is then read from the committed tree, as the
// repository's own cluster files are.
func relativeToRoot(c *repo.Config, root string) *repo.Config {
	rel, err := filepath.Rel(root, c.File)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return c
	}
	out := *c
	out.File = filepath.ToSlash(rel)
	out.PVE.Clusters = map[string]*repo.ClusterConfig{}
	for name, cl := range c.PVE.Clusters {
		cc := *cl
		cc.File = out.File
		out.PVE.Clusters[name] = &cc
	}
	return &out
}

// effectiveConfig is the process configuration a command starts with: the tree's proxops.yaml (nil: the
// defaults) with the process configuration laid over it.
func (s source) effectiveConfig(tree *repo.Config) *repo.Config {
	if tree == nil {
		tree = repo.DefaultConfig()
	}
	return repo.Overlay(tree, s.Process)
}

// dataDir is --data-dir when given, else PROXOPS_DATA_DIR, else the configuration's data-dir.
func dataDir(flags *pflag.FlagSet, flag string, cfg *repo.Config, lookup func(string) (string, bool)) (string, error) {
	d := cfg.DataDir
	if v, ok := lookup(envDataDir); ok && v != "" {
		d = v
	}
	if f := flags.Lookup("data-dir"); f != nil && f.Changed {
		d = flag
	}
	if d == "" {
		d = repo.DefaultConfig().DataDir
	}
	return absPath(d)
}

// loadTreeConfig reads the proxops.yaml of the committed head of a local repository's branch, for the
// settings a process needs before any tree is announced (listen address, data directory, log level, poll
// and drift intervals). A repository whose proxops.yaml is broken starts on the defaults: its plans are then
// rejected with the file's diagnostics, which the status page shows.
func loadTreeConfig(ctx context.Context, root, branch string) (*repo.Config, error) {
	snap, err := watcher.SnapshotBranch(ctx, root, branch)
	if err != nil {
		return nil, err
	}
	r := repo.LoadWith(snap.FS(), repo.LoadOptions{ConfigOnly: true})
	for _, d := range r.Diagnostics {
		if d.File == repo.ProcessConfigFile && d.Severity == diag.Error {
			return repo.DefaultConfig(), nil
		}
	}
	return r.Config, nil
}

// configuredDataDir is the data directory a proxops up started with the same flags, environment and
// configuration uses, for the commands that talk to it (status, suspend, resume): --data-dir when given,
// else PROXOPS_DATA_DIR, else data-dir from --config laid over the repository's committed proxops.yaml
// (found as up finds it: --git-path, PROXOPS_GIT_PATH, the configuration's git source or the current
// directory), else the default. Outside a repository, with no configuration or repository named, it is
// the default; a configuration or repository that is named but cannot be read is an error.
func configuredDataDir(ctx context.Context, cmd *cobra.Command, flag string, lookup func(string) (string, bool)) (string, error) {
	flags := cmd.Flags()
	defaults := repo.DefaultConfig()
	if f := flags.Lookup("data-dir"); f != nil && f.Changed {
		return dataDir(flags, flag, defaults, lookup)
	}
	if v, ok := lookup(envDataDir); ok && v != "" {
		return dataDir(flags, flag, defaults, lookup)
	}
	g := globalsOf(cmd)
	env := func(name string) bool {
		v, ok := lookup(name)
		return ok && v != ""
	}
	named := g.changed("config") || g.changed("git-path") || g.changed("git-url") || env(envConfig) || env(envGitPath)
	src, err := resolveSource(g, "", lookup)
	if err != nil {
		if named {
			return "", err
		}
		return dataDir(flags, flag, defaults, lookup)
	}
	var tree *repo.Config
	if src.Root != "" {
		branch := src.Branch
		if branch == "" {
			branch, err = watcher.CurrentBranch(src.Root)
		}
		if err == nil {
			tree, err = loadTreeConfig(ctx, src.Root, branch)
		}
		if err != nil && named {
			return "", fmt.Errorf("data directory of the repository %s: %w", src.Root, err)
		}
	}
	return dataDir(flags, flag, src.effectiveConfig(tree), lookup)
}
