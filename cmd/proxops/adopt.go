package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/repofs"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
	"github.com/proxops/proxops/services/adopter"
	"github.com/proxops/proxops/services/planner"
	"github.com/proxops/proxops/services/watcher"
)

func init() { register(newAdoptCommand) }

// adoptOptions are the flags of adopt.
type adoptOptions struct {
	nats            natsOptions
	repo            string
	cluster         string
	nodes           []string
	output          string
	updateResources bool
	timeout         time.Duration
	pve             pveFlags
	logLevel        string
	global          globalOptions
	cmd             *cobra.Command
}

func newAdoptCommand() *cobra.Command {
	var opts adoptOptions
	cmd := &cobra.Command{
		Use:   "adopt",
		Short: "Write manifests for the guests and files a cluster already has (read-only on PVE)",
		Long: `adopt observes a cluster's allowed nodes (or --node) and writes a manifest for every guest and storage file
into <kind>/<cluster>/<name>.yaml of the repository's work tree, so that committing them makes the next
diff empty except the one-time claim of the ownership tag. It never writes to PVE. It overwrites only
files it wrote itself (their first line says so) and never a file under base/ or one an operator wrote.

The report lists every file written, every live setting the manifests do not carry (gaps), the manifests
that cannot be completed from what PVE reports (INCOMPLETE, with the reason; left out of the composition),
the live objects it skipped, and the lines to add to clusters/<cluster>/resources.yaml (--update-resources
appends them itself). Run twice on an unchanged cluster, it writes the same files and the same report.

Without --nats it runs executors and the adopter in this process on the data directory shared with
proxops up (or asks the proxops up running there); with --nats it asks a deployed system's adopter.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.cmd, opts.global = cmd, globalsOf(cmd)
			opts.pve.user, opts.logLevel = opts.global.pveUser, opts.global.logLevel
			return runAdopt(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.cluster, "cluster", "", "the cluster to adopt (required)")
	f.StringVar(&opts.repo, "repo", "", "repository root (default: the repository containing the current directory)")
	f.StringArrayVar(&opts.nodes, "node", nil, "only this node (repeatable; default: the cluster's allowlist)")
	f.StringVarP(&opts.output, "output", "o", "text", "report format: text or json")
	f.BoolVar(&opts.updateResources, "update-resources", false, "append the missing entries to clusters/<cluster>/resources.yaml")
	f.DurationVar(&opts.timeout, "timeout", 10*time.Minute, "how long to wait for the adoption")
	opts.nats.flags(f)
	f.StringVar(&opts.pve.tokenID, "pve-token-id", "", "PVE API token name (its secret from PROXOPS_PVE_TOKEN)")
	return cmd
}

func runAdopt(ctx context.Context, out, errOut io.Writer, opts adoptOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output %q: want text or json", opts.output)
	}
	src, err := resolveSource(opts.global, opts.repo, os.LookupEnv)
	if err != nil {
		return err
	}
	if src.URL != "" {
		return errors.New("adopt writes manifests into a local work tree: give the repository with --repo (--git-path), not a URL")
	}
	root := src.Root
	// The work tree as it is: adoption must see the files an operator has not committed yet.
	snap, err := watcher.SnapshotWorktree(ctx, root)
	if err != nil {
		return err
	}
	r := repo.LoadWith(snap.FS(), repo.LoadOptions{Process: src.Process})
	if opts.cmd != nil {
		if opts.nats.dataDir, err = dataDir(opts.cmd.Flags(), opts.nats.dataDir, r.Config, os.LookupEnv); err != nil {
			return err
		}
	}
	name, err := adoptCluster(r, opts.cluster)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()

	b, dir, release, err := attachBus(ctx, opts.nats)
	if err != nil {
		return err
	}
	defer release()
	if b == nil {
		// Read-only: the executors only observe (an operation an interrupted apply left queued stays queued),
		// the planner only plans.
		cfg := systemConfig{DataDir: dir, Repo: root, RequestsOnly: true, ObserveOnly: true, Warnings: errOut,
			Logger:    cliLogger(errOut, opts.logLevel),
			Executors: localExecutors(ctx, errOut, r, snap.FS(), root, []string{name}, opts.pve),
			Planner:   planner.Config{PlanOnly: true, LocalSecrets: true, Process: src.Process},
			Adopter:   &adopter.Config{Keys: secretsKeys(), LocalSecrets: true, Process: src.Process}}
		sys, err := startSystem(ctx, cfg)
		if err != nil {
			return err
		}
		defer func() {
			if err := sys.stop(); err != nil {
				fmt.Fprintf(errOut, "warning: %v\n", err)
			}
		}()
		b = sys.bus
	}
	if _, err := treestore.PutPreview(ctx, b, snap); err != nil {
		return fmt.Errorf("store the repository snapshot: %w", err)
	}
	res, err := requestAdoption(ctx, b, wire.AdoptRequest{Cluster: name, RequestID: newRequestID(), Nodes: opts.nodes, Tree: snap.Tree})
	if err != nil {
		return err
	}
	a, err := writeAdoption(root, name, res, opts.updateResources)
	if err != nil {
		return err
	}
	if opts.output == "json" {
		doc, err := render.AdoptionJSONBytes(a)
		if err != nil {
			return err
		}
		_, err = out.Write(doc)
		return err
	}
	_, err = io.WriteString(out, render.AdoptionText(a))
	return err
}

// adoptCluster checks --cluster: required, and one of the clusters the repository configures.
func adoptCluster(r *repo.Repository, name string) (string, error) {
	var known []string
	for _, c := range r.Clusters {
		if c.Config != nil {
			known = append(known, c.Name)
		}
	}
	switch {
	case name == "":
		return "", fmt.Errorf("adopt requires an explicit --cluster=<name>; configured clusters: [%s]", strings.Join(known, " "))
	case !slices.Contains(known, name):
		return "", fmt.Errorf("--cluster %q is not in pve.clusters (known: [%s])", name, strings.Join(known, " "))
	case name == "base":
		return "", errors.New(`--cluster "base": adoption writes to <kind>/<cluster>/, and <kind>/base/ holds the definitions clusters share; rename the cluster to adopt it`)
	}
	return name, nil
}

// requestAdoption asks the adopters for one cluster's adoption.
func requestAdoption(ctx context.Context, b *bus.Bus, req wire.AdoptRequest) (adopt.Result, error) {
	subject, err := bus.AdoptSubject(req.Cluster)
	if err != nil {
		return adopt.Result{}, err
	}
	// An adopter that is starting (this process's own, or a proxops up's) has not subscribed yet: ask again
	// for a little while before saying none answers.
	var id string
	var res adopt.Result
	for deadline := time.Now().Add(15 * time.Second); ; {
		id, res, err = wire.DecodeAdoptResult(ctx, func(ctx context.Context, into proto.Message) error {
			return b.Request(ctx, subject, wire.AdoptRequestToProto(req), into)
		})
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return adopt.Result{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	var remote *bus.RemoteError
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return adopt.Result{}, fmt.Errorf("no adopter answers on %s: start one (proxops-adopter, or proxops up)", subject)
	case errors.As(err, &remote):
		return adopt.Result{}, fmt.Errorf("adopt %s: %s", req.Cluster, remote.Message)
	case err != nil:
		return adopt.Result{}, fmt.Errorf("adopt %s: %w", req.Cluster, err)
	case id != req.RequestID || res.Cluster != req.Cluster:
		return adopt.Result{}, fmt.Errorf("adopt %s: the answer is for another request", req.Cluster)
	}
	return res, nil
}

// writeAdoption writes the adopted files into the work tree (a file that exists and was not written by
// adoption is left alone, whatever the adopter saw) and, with update, appends the missing composition
// entries.
// The work tree is read through repofs: a file (or a directory on its path) that is a link leaving the
// repository is refused by name, never read nor written through.
func writeAdoption(root, cluster string, res adopt.Result, update bool) (render.Adoption, error) {
	tree, err := repofs.Open(root)
	if err != nil {
		return render.Adoption{}, err
	}
	defer func() { _ = tree.Close() }()
	for _, m := range res.Manifests {
		if !validAdoptedPath(cluster, m.Path) {
			return render.Adoption{}, fmt.Errorf("the adopter answered with a path outside %s: %q", "<kind>/"+cluster+"/", m.Path)
		}
		file := filepath.Join(root, filepath.FromSlash(m.Path))
		old, err := tree.ReadFile(m.Path)
		switch {
		case err == nil && !adopt.IsAdopted(old):
			res.Warnings = append(res.Warnings, m.Path+" exists and was not written by proxops adopt; left alone")
			continue
		case err == nil && bytes.Equal(old, m.Content):
			continue
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return render.Adoption{}, err
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return render.Adoption{}, err
		}
		if err := writeFileAtomic(file, m.Content); err != nil {
			return render.Adoption{}, err
		}
	}
	compFile := path.Join(repo.ClustersDir, cluster, repo.CompositionFile)
	compPath := filepath.Join(root, filepath.FromSlash(compFile))
	data, err := tree.ReadFile(compFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return render.Adoption{}, err
	}
	missing, err := adopt.MissingEntries(compFile, data, res.Composition())
	if err != nil {
		return render.Adoption{}, err
	}
	a := render.Adoption{Result: res, CompositionFile: compFile, ConfigFile: path.Join(repo.ClustersDir, cluster, repo.ClusterConfigFile),
		Missing: missing}
	if update && len(missing) > 0 {
		updated, err := adopt.AppendComposition(compFile, data, missing)
		if err != nil {
			return render.Adoption{}, err
		}
		if err := writeFileAtomic(compPath, updated); err != nil {
			return render.Adoption{}, err
		}
		a.Updated = true
	}
	return a, nil
}

// validAdoptedPath accepts <kind root>/<cluster>/<name>.yaml only.
func validAdoptedPath(cluster, p string) bool {
	parts := strings.Split(p, "/")
	return len(parts) == 3 && slices.Contains(manifest.KindRoots, parts[0]) && parts[1] == cluster &&
		strings.HasSuffix(parts[2], ".yaml") && path.Clean(p) == p && adopt.Name(strings.TrimSuffix(parts[2], ".yaml")) == strings.TrimSuffix(parts[2], ".yaml")
}

// writeFileAtomic replaces a file through a temporary file in its directory.
func writeFileAtomic(file string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer func() { _ = os.Remove(name) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(name, file)
}
