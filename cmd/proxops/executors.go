package main

import (
	"context"
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
		c := r.Cluster(name)
		if c == nil || c.Config == nil || r.ClusterDiagnostics(name).HasErrors() {
			continue
		}
		cc := c.Config
		var store *secrets.Store
		if cc.SecretsFile != "" {
			s, err := readSecrets(ctx, decryptor, fsys, root, cc.SecretsPath())
			if err != nil {
				// The planner rejects the cluster with the secrets diagnostic; no executor is needed.
				continue
			}
			store = s
		}
		auth, err := secrets.ResolvePVECredentials(credentialInput(r.Config, cc, store, env, flags))
		if err != nil {
			fmt.Fprintf(w, "warning: cluster %s: %v\n", name, err)
			continue
		}
		pc := pve.Config{BaseURL: cc.BaseURL, TaskTimeout: r.Config.Reconcile.TaskTimeout}
		if id, secret, ok := auth.APIToken(); ok {
			pc.TokenID, pc.TokenSecret = id.Reveal(), secret.Reveal()
		} else {
			pc.User, pc.Password = auth.User.Reveal(), auth.Password.Reveal()
		}
		pc.Insecure = cc.Insecure != nil && *cc.Insecure
		caFile := cc.CAFile
		if caFile == "" {
			caFile = r.Config.PVE.CAFile
		}
		if caFile != "" {
			if pc.CAFile, err = localPath(root, caFile); err != nil {
				fmt.Fprintf(w, "warning: cluster %s: ca-file: %v\n", name, err)
				continue
			}
		}
		nodes := cc.Nodes
		if len(nodes) == 0 {
			if nodes, err = listNodes(ctx, pc); err != nil {
				fmt.Fprintf(w, "warning: cluster %s: cannot list its nodes (it has no allowlist): %v\n", name, err)
				continue
			}
		}
		var resolver pve.SecretResolver
		if store != nil {
			resolver = executor.StoreSecrets(store)
		}
		for _, n := range nodes {
			out = append(out, executorSpec{Cluster: name, Node: n, AllowedNodes: cc.Nodes, PVE: pc, RepoBaseURL: cc.BaseURL,
				Secrets: resolver, Concurrency: r.Config.Executor.Concurrency, StorageConcurrency: r.Config.Executor.StorageConcurrency,
				LockWait: r.Config.Reconcile.LockWait})
		}
	}
	return out
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

// readSecrets decrypts a cluster's secrets file: from the snapshot when it is in the repository, else from
// this host's disk.
func readSecrets(ctx context.Context, d *secrets.Decryptor, fsys fs.FS, root, file string) (*secrets.Store, error) {
	var data []byte
	var err error
	if filepath.IsAbs(file) || strings.HasPrefix(file, "~") {
		var p string
		if p, err = localPath(root, file); err == nil {
			data, err = os.ReadFile(p)
		}
	} else {
		data, err = fs.ReadFile(fsys, file)
	}
	if err != nil {
		return nil, secrets.MissingFileError(file)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return d.Decrypt(dctx, file, data)
}

// localPath expands ~ and makes a relative path relative to the repository root.
func localPath(root, p string) (string, error) {
	p, err := expandHome(p)
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
