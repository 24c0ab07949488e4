package adopter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/observe"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
)

// handleAdopt answers one adoption request: the repository snapshot it names says the cluster's nodes,
// secrets and what is declared already; every node is observed with all of its storage content; the
// answer is internal/adopt's result. Any node that cannot be observed fails the request (nothing partial).
func (a *adopter) handleAdopt(ctx context.Context, r *bus.Request) (proto.Message, error) {
	req, err := wire.DecodeAdoptRequest(ctx, r.Decode)
	if err != nil {
		return nil, err
	}
	log := a.log.With("cluster", req.Cluster, "request_id", req.RequestID)
	res, err := a.adoptCluster(ctx, req)
	if err != nil {
		log.Warn("adoption failed", "err", err)
		return nil, err
	}
	log.Info("cluster adopted", "manifests", len(res.Manifests), "gaps", len(res.Gaps), "skipped", len(res.Skipped))
	return wire.AdoptResultToProto(req.RequestID, res), nil
}

func (a *adopter) adoptCluster(ctx context.Context, req wire.AdoptRequest) (adopt.Result, error) {
	if err := bus.ValidateCluster(req.Cluster); err != nil {
		return adopt.Result{}, err
	}
	if req.Tree == "" {
		return adopt.Result{}, errors.New("the request names no repository snapshot")
	}
	snap, err := treestore.Get(ctx, a.bus, req.Tree)
	if err != nil {
		return adopt.Result{}, fmt.Errorf("repository snapshot %s: %w", req.Tree, err)
	}
	fsys := snap.FS()
	r := repo.LoadWith(fsys, repo.LoadOptions{Process: a.cfg.Process})
	c := r.Cluster(req.Cluster)
	if c == nil || c.Config == nil {
		return adopt.Result{}, fmt.Errorf("cluster %q is not in pve.clusters of the repository (known: [%s])", req.Cluster, strings.Join(configured(r), " "))
	}
	nodes, err := a.nodesOf(ctx, c, req.Nodes)
	if err != nil {
		return adopt.Result{}, err
	}
	var keys adopt.KeyStore
	if c.Config.SecretsFile != "" {
		store, err := a.decrypt(ctx, fsys, c.Config.SecretsPath())
		if err != nil {
			return adopt.Result{}, fmt.Errorf("cluster %s: secrets file %s: %w", c.Name, c.Config.SecretsPath(), err)
		}
		keys = storeKeys{store}
	}
	observed, err := a.observe(ctx, c.Name, nodes)
	if err != nil {
		return adopt.Result{}, err
	}
	st, err := adopt.FromRepository(fsys, r, c.Name)
	if err != nil {
		return adopt.Result{}, err
	}
	return adopt.Adopt(adopt.Input{Cluster: c.Name, Observed: observed, Declared: st.Declared, Occupied: st.Occupied,
		Templates: st.Templates, Adopted: st.Adopted, Keys: keys, ClusterFirewallManaged: c.Config.Firewall.Managed()})
}

// configured lists the clusters that have a pve.clusters entry.
func configured(r *repo.Repository) []string {
	var out []string
	for _, c := range r.Clusters {
		if c.Config != nil {
			out = append(out, c.Name)
		}
	}
	return out
}

// nodesOf decides the nodes to observe: those asked for (each within the allowlist), else the allowlist,
// else every node PVE lists (asked through the executor of a node that published an inventory).
func (a *adopter) nodesOf(ctx context.Context, c *repo.Cluster, asked []string) ([]string, error) {
	allow := c.Config.Nodes
	if len(asked) > 0 {
		for _, n := range asked {
			if err := bus.ValidateNode(n); err != nil {
				return nil, err
			}
			if len(allow) > 0 && !slices.Contains(allow, n) {
				return nil, fmt.Errorf("node %q is not in pve.clusters.%s.nodes (allowed: [%s])", n, c.Name, strings.Join(allow, " "))
			}
		}
		out := slices.Clone(asked)
		slices.Sort(out)
		return slices.Compact(out), nil
	}
	if len(allow) > 0 {
		out := slices.Clone(allow)
		slices.Sort(out)
		return out, nil
	}
	a.mu.Lock()
	var seeds []string
	for n := range a.nodes[c.Name] {
		seeds = append(seeds, n)
	}
	a.mu.Unlock()
	slices.Sort(seeds)
	for _, n := range seeds {
		inv, err := a.observer().Node(ctx, observeRequest(c.Name, n, true, false))
		if err == nil && len(inv.ClusterNodes) > 0 {
			return inv.ClusterNodes, nil
		}
	}
	return nil, fmt.Errorf("cluster %s has no node allowlist and no executor told which nodes PVE has: name them with --node", c.Name)
}

// observe takes an adoption inventory of every node, in parallel.
func (a *adopter) observe(ctx context.Context, cluster string, nodes []string) (inventory.Cluster, error) {
	observed, failures := a.observer().Nodes(ctx, nodes, func(n string) wire.ObserveRequest {
		// The cluster's firewall objects are cluster-wide: read once, with the first node's inventory.
		return observeRequest(cluster, n, false, n == slices.Min(nodes))
	})
	if len(failures) > 0 {
		var errs []error
		for n, err := range failures {
			errs = append(errs, fmt.Errorf("pve inventory read failed: node %s: %w", n, err))
		}
		slices.SortFunc(errs, func(x, y error) int { return strings.Compare(x.Error(), y.Error()) })
		return inventory.Cluster{}, errors.Join(errs...)
	}
	return inventory.Cluster{Name: cluster, Nodes: observed}, nil
}

// observer asks the cluster's executors for their nodes' inventories within the observe timeout.
func (a *adopter) observer() observe.Client {
	return observe.Client{Bus: a.bus, Timeout: a.cfg.ObserveTimeout}
}

// observeRequest asks one node for everything an adoption needs: every storage's content, every guest's
// firewall, and the cluster's pools, backup jobs, HA resources and rules; clusterFW asks for the cluster's
// firewall objects too (of one node).
func observeRequest(cluster, node string, listNodes, clusterFW bool) wire.ObserveRequest {
	return wire.ObserveRequest{Cluster: cluster, Node: node, RequestID: newID("adopt-obs"), AllContent: true, AllFirewalls: true,
		ListNodes: listNodes, Pools: true, BackupJobs: true, HA: true, ClusterFirewall: clusterFW}
}

// decrypt reads and decrypts a cluster's secrets file: from the snapshot, or (LocalSecrets) from this host
// for a path outside the repository.
func (a *adopter) decrypt(ctx context.Context, fsys fs.FS, file string) (*secrets.Store, error) {
	host := secrets.RepositoryOnly
	if a.cfg.LocalSecrets {
		host = secrets.HostDisk
	}
	store, err := a.decryptor.ReadClusterFile(ctx, fsys, file, host)
	if errors.Is(err, secrets.ErrOutsideRepository) {
		return nil, errors.New("the file is outside the repository; the adopter reads secrets from the repository only")
	}
	return store, err
}

// storeKeys gives adoption the SSH key entries of a decrypted secrets file, as references and digests.
type storeKeys struct{ store *secrets.Store }

var _ adopt.KeyStore = storeKeys{}

func (k storeKeys) SSHKeyRefs() []string {
	var out []string
	for _, n := range k.store.Names(secrets.SSHKeys) {
		out = append(out, secrets.Ref{Section: secrets.SSHKeys, Name: n}.String())
	}
	return out
}

func (k storeKeys) SSHKeysDigest(refs []string) (string, error) {
	set, err := k.store.ResolveSSHKeys(refs, "")
	if err != nil {
		return "", err
	}
	return set.Digest, nil
}

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}
