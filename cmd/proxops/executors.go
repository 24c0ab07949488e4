package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/pve"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/services/executor"
)

// pveFlags are the global PVE credentials given on the command line (the environment wins over them).
type pveFlags struct {
	user    string
	tokenID string
}

// localExecutors decides the executors a single-host run needs: one per allowed node of each selected
// cluster (every node PVE lists when the allowlist is empty), on the repository's base-url, with the
// credentials the predecessor's precedence gives (secrets file, environment, flags, proxops.yaml). A cluster
// whose credentials or nodes cannot be had gets no executor: the problem is reported on w and the
// cluster's plan is then rejected by the planner (fail closed).
func localExecutors(ctx context.Context, w io.Writer, r *repo.Repository, fsys fs.FS, root string, clusters []string, flags pveFlags) []executorSpec {
	decryptor := secrets.NewDecryptor(secretsKeys())
	env := secrets.PVEEnvironment(os.LookupEnv)
	var out []executorSpec
	for _, name := range clusters {
		cs, ok := setupCluster(ctx, r, fsys, root, name, flags, decryptor, env)
		switch {
		case !ok || cs.secretsBroken:
			// Not plannable, or its secrets file cannot be read: the planner rejects the cluster with the
			// diagnostics; no executor is needed.
			continue
		case cs.problem != nil:
			fmt.Fprintf(w, "warning: cluster %s: %v\n", name, cs.problem)
			continue
		}
		out = append(out, cs.specs(nil)...)
	}
	return out
}

// clusterSetup is what one cluster's executors need, as a tree and this host's environment say.
type clusterSetup struct {
	name string
	// endpoint is the PVE endpoint without credentials.
	endpoint pve.Config
	creds    executor.Credentials
	// problem is why the cluster cannot have working executors (credentials, CA file, node list); its text
	// never carries a secret. nodes may still be known.
	problem error
	// secretsBroken: the secrets file cannot be decrypted (the planner rejects the cluster).
	secretsBroken      bool
	nodes, allowed     []string
	baseURL            string
	concurrency        int
	storageConcurrency int
	lockWait           time.Duration
	// hostFiles are the files of this host the setup read (a CA file, a secrets file outside the
	// repository): a change of one may change what the cluster's plans find.
	hostFiles []string
	// caSum is the digest of the CA file's content ("" without one): an executor is restarted when it changes.
	caSum string
}

// specs are the cluster's executors: with the credentials of the setup, or from source when it is set.
func (c clusterSetup) specs(source executor.CredentialSource) []executorSpec {
	var out []executorSpec
	for _, n := range c.nodes {
		spec := executorSpec{Cluster: c.name, Node: n, AllowedNodes: c.allowed, PVE: c.creds.Apply(c.endpoint),
			RepoBaseURL: c.baseURL, Secrets: c.creds.Secrets, Concurrency: c.concurrency,
			StorageConcurrency: c.storageConcurrency, LockWait: c.lockWait, Credentials: source, CASum: c.caSum}
		out = append(out, spec)
	}
	return out
}

// setupCluster works out one cluster's executors from a tree (the repository r read from fsys, whose
// work tree is root). ok is false for a cluster the tree cannot plan (no configuration, errors).
func setupCluster(ctx context.Context, r *repo.Repository, fsys fs.FS, root, name string, flags pveFlags,
	decryptor *secrets.Decryptor, env map[string]string) (cs clusterSetup, ok bool) {
	c := r.Cluster(name)
	if c == nil || c.Config == nil || r.ClusterDiagnostics(name).HasErrors() {
		return cs, false
	}
	cc := c.Config
	cs = clusterSetup{name: name, allowed: cc.Nodes, nodes: cc.Nodes, baseURL: cc.BaseURL,
		concurrency: r.Config.Executor.Concurrency, storageConcurrency: r.Config.Executor.StorageConcurrency,
		lockWait: r.Config.Reconcile.LockWait,
		endpoint: pve.Config{BaseURL: cc.BaseURL, TaskTimeout: r.Config.Reconcile.TaskTimeout, Insecure: cc.Insecure != nil && *cc.Insecure}}
	caFile := cc.CAFile
	if caFile == "" {
		caFile = r.Config.PVE.CAFile
	}
	if caFile != "" {
		p, err := localPath(root, caFile)
		if err != nil {
			cs.problem = fmt.Errorf("ca-file: %w", err)
			return cs, true
		}
		cs.endpoint.CAFile, cs.hostFiles, cs.caSum = p, append(cs.hostFiles, p), contentSum(p)
	}
	var store *secrets.Store
	if cc.SecretsFile != "" && secrets.IsHostPath(cc.SecretsPath()) {
		if p, err := secrets.ExpandHome(cc.SecretsPath()); err == nil {
			cs.hostFiles = append(cs.hostFiles, p)
		}
	}
	if cc.SecretsFile != "" {
		s, err := decryptor.ReadClusterFile(ctx, fsys, cc.SecretsPath(), secrets.HostDisk)
		if err != nil {
			cs.secretsBroken, cs.problem = true, err
			return cs, true
		}
		store = s
	}
	auth, err := secrets.ResolvePVECredentials(credentialInput(r.Config, cc, store, env, flags))
	if err != nil {
		cs.problem = err
		return cs, true
	}
	if id, secret, ok := auth.APIToken(); ok {
		cs.creds.TokenID, cs.creds.TokenSecret = id.Reveal(), secret.Reveal()
	} else {
		cs.creds.User, cs.creds.Password = auth.User.Reveal(), auth.Password.Reveal()
	}
	if store != nil {
		cs.creds.Secrets = executor.StoreSecrets(store)
	}
	if len(cs.nodes) == 0 {
		if cs.nodes, err = listNodes(ctx, cs.creds.Apply(cs.endpoint)); err != nil {
			cs.problem = fmt.Errorf("cannot list its nodes (it has no allowlist): %w", err)
		}
	}
	return cs, true
}

// credentialInput gathers one cluster's credential sources: proxops.yaml's pve block with the flags over
// it, the cluster's secrets file and references, and the environment.
func credentialInput(cfg *repo.Config, cc *repo.ClusterConfig, store *secrets.Store, env map[string]string, flags pveFlags) secrets.PVECredentialInput {
	global := secrets.PVECredentials{User: secrets.New(cfg.PVE.User), TokenID: secrets.New(cfg.PVE.TokenID),
		Token: secrets.New(cfg.PVE.Token), TokenValue: secrets.New(cfg.PVE.TokenValue), Password: secrets.New(cfg.PVE.Password)}
	if flags.user != "" {
		global.User = secrets.New(flags.user)
	}
	if flags.tokenID != "" {
		global.TokenID = secrets.New(flags.tokenID)
	}
	// A composed token value names its user: PROXOPS_PVE_TOKEN_VALUE alone is enough.
	if global.User.IsEmpty() && env[secrets.EnvPVEUser] == "" {
		tv := env[secrets.EnvPVETokenValue]
		if tv == "" {
			tv = cfg.PVE.TokenValue
		}
		if user, _, ok := strings.Cut(tv, "!"); ok {
			global.User = secrets.New(user)
		}
	}
	in := secrets.PVECredentialInput{Cluster: cc.Name, Auth: secrets.AuthMode(cfg.PVE.Auth), Store: store, Global: global, Env: env}
	if cc.Secrets != nil {
		in.Refs = secrets.PVESecretRefs{User: cc.Secrets.PVE.User, TokenID: cc.Secrets.PVE.TokenID, Token: cc.Secrets.PVE.Token,
			Password: cc.Secrets.PVE.Password}
	}
	return in
}

// contentSum is the hex SHA-256 of a file's content, or why it cannot be read.
func contentSum(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// localPath expands ~ and makes a relative path relative to the repository root.
func localPath(root, p string) (string, error) {
	p, err := secrets.ExpandHome(p)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(root, filepath.FromSlash(p))
	}
	return p, nil
}

// listNodes asks PVE for the nodes of a cluster.
func listNodes(ctx context.Context, pc pve.Config) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := pve.New(lctx, pc, nil)
	if err != nil {
		return nil, err
	}
	return c.Nodes(lctx)
}
