package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proxops/proxops/internal/clock"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
)

// inputsCheckInterval is how often proxops up looks at its inputs from outside the repository: a stat of
// each file, and its content hashed only when its size or modification time moved.
const inputsCheckInterval = 2 * time.Second

// upInputs follows what proxops up reads from this host besides the repository: the --config file, the
// clusters' secrets files outside the repository, their CA files and the age key file. When one changes,
// the configuration is reloaded (what can be: see restartOnlyKeys), the executors are prepared again (new
// credentials, an executor restarted for a new CA file), and only then does the cluster's digest change:
// the planner plans again the clusters whose plan was rejected for a cause that stays.
type upInputs struct {
	opts upOptions
	set  *executorSet
	log  *slog.Logger
	// configFile is the --config file ("" for none); keyFiles the age key files.
	configFile string
	keyFiles   []string

	mu      sync.Mutex
	src     source
	process *repo.Config
	seen    map[string]fileState
	digests map[string]string
	global  string
}

// fileState is what was last seen of a file.
type fileState struct {
	size int64
	mod  time.Time
	sum  string
}

func newUpInputs(opts upOptions, src source, set *executorSet, log *slog.Logger) *upInputs {
	return &upInputs{opts: opts, set: set, log: log, configFile: src.ConfigFile, keyFiles: secrets.KeyFiles(os.LookupEnv),
		src: src, process: src.Process, seen: map[string]fileState{}, digests: map[string]string{}}
}

// currentProcess is the process configuration in effect (the planner reads it at each plan).
func (u *upInputs) currentProcess() *repo.Config {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.process
}

// digest is a cluster's digest of the inputs from outside the repository (planner.Config.Inputs).
func (u *upInputs) digest(cluster string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if d, ok := u.digests[cluster]; ok {
		return d
	}
	return u.global
}

// learn takes in the files the executors' setups read that are not followed yet, without treating them as
// changed: they are part of the digests from now on. A file already followed is left to run, which acts on
// its changes.
func (u *upInputs) learn() {
	files := u.set.files()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.followed(files) {
		if _, ok := u.seen[p]; !ok {
			u.seen[p] = stateOf(p, fileState{})
		}
	}
	u.recompute(files)
}

// run looks at the inputs every interval until ctx ends.
func (u *upInputs) run(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, interval, func() { u.check(ctx) })
}

// check acts on the files that changed since the last look.
func (u *upInputs) check(ctx context.Context) {
	files := u.set.files()
	u.mu.Lock()
	var changed []string
	for _, p := range u.followed(files) {
		was, ok := u.seen[p]
		now := stateOf(p, was)
		u.seen[p] = now
		if ok && now.sum != was.sum {
			changed = append(changed, p)
		}
	}
	u.mu.Unlock()
	if len(changed) == 0 {
		return
	}
	u.log.Info("inputs from outside the repository changed; applying them", "files", strings.Join(changed, ","))
	if u.configFile != "" && slices.Contains(changed, u.configFile) {
		u.reload()
	}
	u.set.refresh(ctx)
	u.learn()
	u.log.Info("inputs from outside the repository in effect; clusters whose plan was rejected for a cause that stays are planned again",
		"files", strings.Join(changed, ","))
}

// reload reads the --config file again. Keys that take effect only at a restart are named in a warning; the
// rest (the pve section and inline clusters, credentials, secrets-file, ca-file, executor and reconcile
// settings the plans read) is in effect for the next plan. A file that cannot be used leaves the one in
// effect.
func (u *upInputs) reload() {
	src, err := resolveSource(u.opts.global, u.opts.repo, os.LookupEnv)
	if err != nil {
		u.log.Error("the configuration file changed and cannot be used; the previous one stays in effect", "file", u.configFile, "err", err)
		return
	}
	u.mu.Lock()
	old := u.src
	u.src, u.process = src, src.Process
	u.mu.Unlock()
	restart := restartOnlyKeys(old, src)
	u.set.setProcess(src.Process)
	if len(restart) > 0 {
		u.log.Warn("the configuration file changed keys that take effect only when proxops up restarts; the rest is in effect",
			"file", u.configFile, "restart_keys", strings.Join(restart, ","))
		return
	}
	u.log.Info("configuration file reloaded", "file", u.configFile)
}

// restartOnlyKeys are the keys of the process configuration that changed between two sources and take
// effect only when proxops up restarts: the repository and what the process listens on or talks to.
func restartOnlyKeys(a, b source) []string {
	pa, pb := a.Process, b.Process
	if pa == nil {
		pa = repo.DefaultConfig()
	}
	if pb == nil {
		pb = repo.DefaultConfig()
	}
	var out []string
	for _, k := range []struct {
		key  string
		x, y any
	}{
		{"git", []string{a.Root, a.URL, a.Branch}, []string{b.Root, b.URL, b.Branch}},
		{"git.token", pa.Git.Token, pb.Git.Token},
		{"listen", pa.Listen, pb.Listen},
		{"data-dir", pa.DataDir, pb.DataDir},
		{"log", pa.Log, pb.Log},
		{"nats", pa.NATS, pb.NATS},
		{"webhook", pa.Webhook, pb.Webhook},
		{"notifications", pa.Notifications, pb.Notifications},
		{"reconcile.poll-interval", pa.Reconcile.PollInterval, pb.Reconcile.PollInterval},
		{"reconcile.drift-interval", pa.Reconcile.DriftInterval, pb.Reconcile.DriftInterval},
	} {
		if !reflect.DeepEqual(k.x, k.y) {
			out = append(out, k.key)
		}
	}
	return out
}

// followed lists every file followed: the --config file, the age key files and each cluster's files.
// Called with u.mu held.
func (u *upInputs) followed(files map[string][]string) []string {
	var out []string
	if u.configFile != "" {
		out = append(out, u.configFile)
	}
	out = append(out, u.keyFiles...)
	for _, list := range files {
		out = append(out, list...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// recompute sets the digests from the files' states. Called with u.mu held.
func (u *upInputs) recompute(files map[string][]string) {
	g := sha256.New()
	for _, p := range append([]string{u.configFile}, u.keyFiles...) {
		if p != "" {
			fmt.Fprintf(g, "%s %s\n", p, u.seen[p].sum)
		}
	}
	u.global = "sha256:" + hex.EncodeToString(g.Sum(nil))
	u.digests = map[string]string{}
	for c, list := range files {
		h := sha256.New()
		fmt.Fprintln(h, u.global)
		for _, p := range list {
			fmt.Fprintf(h, "%s %s\n", p, u.seen[p].sum)
		}
		u.digests[c] = "sha256:" + hex.EncodeToString(h.Sum(nil))
	}
}

// stateOf looks at a file: its content is hashed again only when its size or modification time differ
// from was.
func stateOf(path string, was fileState) fileState {
	info, err := os.Stat(path)
	switch {
	case err != nil && os.IsNotExist(err):
		return fileState{sum: "missing"}
	case err != nil:
		return fileState{sum: "unreadable: " + err.Error()}
	case !info.Mode().IsRegular():
		return fileState{sum: "not a file: " + info.Mode().Type().String()}
	}
	now := fileState{size: info.Size(), mod: info.ModTime()}
	if was.sum != "" && now.size == was.size && now.mod.Equal(was.mod) {
		now.sum = was.sum
		return now
	}
	now.sum = contentSum(path)
	return now
}
