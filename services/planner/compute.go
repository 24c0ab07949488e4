package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/proxops/proxops/internal/adopt"
	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/event"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/observe"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/secrets"
	"github.com/proxops/proxops/internal/treestore"
	"github.com/proxops/proxops/internal/wire"
)

// computed is what planning one cluster for one event gives: a plan, or a rejection.
type computed struct {
	plan      plan.Plan
	rejection *plan.Rejection
	// suspended: the cluster's config says suspend: true.
	suspended bool
	// refused are the nodes whose executors could not observe for a permanent cause.
	refused []string
	// lifted are the suspensions after an operator's rollback that the tree lifts (it changes the guest's
	// manifest): forgotten once the plan is applied.
	lifted []plan.SuspendedGuest
}

// errTransient marks a failure of the infrastructure (NATS, the object store) rather than of the cluster:
// the event is tried again instead of being answered with a rejection.
var errTransient = errors.New("transient")

func transient(err error) error { return fmt.Errorf("%w: %w", errTransient, err) }

func rejected(cluster, reason string, diags diag.List) computed {
	return computed{rejection: &plan.Rejection{Cluster: cluster, Reason: reason, Diagnostics: diags.Sorted()}}
}

// compute plans one cluster of an event: compose and validate the tree's desired state, decrypt the
// cluster's secrets, observe every node, read the ownership inventory and diff. Anything wrong with the
// cluster is a rejection; an error is transient (the caller retries).
func (p *planner) compute(ctx context.Context, ev event.RepoChanged, cluster string) (computed, error) {
	start := time.Now()
	defer func() { p.metrics.planSeconds.Observe(time.Since(start).Seconds()) }()
	r, c, early, err := p.loadCluster(ctx, ev.Tree, cluster)
	if early != nil || err != nil {
		return stopWith(early, err)
	}
	out := computed{suspended: c.Config.Suspend != nil && *c.Config.Suspend}
	in, store, early, err := p.planInput(ctx, ev, r, c)
	if early != nil || err != nil {
		return stopWith(early, err)
	}
	observed := in.Observed
	pl, early, err := p.planCluster(ctx, ev, c, &in, &out)
	if early != nil || err != nil {
		return stopWith(early, err)
	}
	if early := sealOperations(c, store, &pl); early != nil {
		return *early, nil
	}
	managed := map[int]manifest.Ref{}
	for _, res := range c.Resources {
		if res.Kind.IsGuest() && res.VMID() > 0 {
			managed[res.VMID()] = res.Ref()
		}
	}
	pl.Gaps = adopt.ManagedGaps(observed, managed)
	out.plan = pl
	return out, nil
}

// stopWith is compute's result when a step ends it early: the step's outcome (a rejection), or its error.
func stopWith(early *computed, err error) (computed, error) {
	if early != nil {
		return *early, err
	}
	return computed{}, err
}

// rejectedWith is a rejection as an early outcome of one of compute's steps.
func rejectedWith(cluster, reason string, diags diag.List) *computed {
	out := rejected(cluster, reason, diags)
	return &out
}

// loadCluster reads the tree snapshot and finds the cluster in it; a missing or altered snapshot, a cluster
// the repository does not have, or one with repository errors ends compute with a rejection.
func (p *planner) loadCluster(ctx context.Context, tree, cluster string) (*repo.Repository, *repo.Cluster, *computed, error) {
	r, err := p.repository(ctx, tree)
	if err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			return nil, nil, rejectedWith(cluster, plan.RejectInternal, diag.List{{Severity: diag.Error,
				Message: fmt.Sprintf("plan error: tree snapshot %s is not in the tree store", tree)}}), nil
		}
		if errors.Is(err, event.ErrTreeMismatch) {
			return nil, nil, rejectedWith(cluster, plan.RejectInternal, diag.List{{Severity: diag.Error,
				Message: fmt.Sprintf("plan error: tree snapshot %s was altered (%v); nothing is planned from it", tree, err)}}), nil
		}
		return nil, nil, nil, transient(err)
	}
	c := r.Cluster(cluster)
	if c == nil {
		return nil, nil, rejectedWith(cluster, plan.RejectParse, diag.List{{Severity: diag.Error, File: repo.ClustersDir + "/" + cluster,
			Message: fmt.Sprintf("manifest parse error: cluster %s is not in the repository (no clusters/%s/)", cluster, cluster)}}), nil
	}
	if ds := r.ClusterDiagnostics(cluster); ds.HasErrors() {
		return nil, nil, rejectedWith(cluster, plan.RejectParse, ds), nil
	}
	return r, c, nil, nil
}

// planInput gathers what a plan of the cluster is computed from: its secrets, the ownership records, the
// observed nodes and the safety-snapshot records. Secrets that cannot be read and nodes that cannot be
// observed end compute with a rejection.
func (p *planner) planInput(ctx context.Context, ev event.RepoChanged, r *repo.Repository, c *repo.Cluster) (plan.Input, *secrets.Store, *computed, error) {
	cluster := c.Name
	var resolver plan.SecretResolver
	var store *secrets.Store
	if c.Config.SecretsFile != "" {
		var diags diag.List
		store, diags = p.decryptSecrets(ctx, ev.Tree, r, c)
		if len(diags) > 0 {
			return plan.Input{}, nil, rejectedWith(cluster, plan.RejectSecrets, diags), nil
		}
		resolver = storeSecrets{store}
	}
	// The ownership inventory (a record per guest) is read while the nodes are observed: the observe needs it
	// only to learn a cluster's nodes when it has no allowlist.
	owned := p.readOwned(ctx, cluster)
	ownedObjects, err := p.ownedObjects(ctx, cluster)
	if err != nil {
		_, _ = owned.wait()
		return plan.Input{}, nil, nil, transient(err)
	}
	observed, diags, refused, err := p.observe(ctx, c, owned, plan.NeededObjects(c, ownedObjects))
	guests, ownedErr := owned.wait()
	if err == nil {
		err = ownedErr
	}
	if err != nil {
		return plan.Input{}, nil, nil, transient(err)
	}
	if len(diags) > 0 {
		out := rejected(cluster, plan.RejectObserve, diags)
		out.rejection.Transient, out.refused = len(refused) == 0, refused
		return plan.Input{}, nil, &out, nil
	}
	snaps, err := p.snapshotRecords(ctx, cluster)
	if err != nil {
		return plan.Input{}, nil, nil, transient(err)
	}
	return plan.Input{Cluster: c, Observed: observed, Owned: guests, OwnedObjects: ownedObjects, Secrets: resolver,
		Settings: plan.SettingsFor(r.Config, c.Config), Tree: ev.Tree, MoveMisplaced: ev.MoveMisplaced,
		SnapshotRecords: snaps, Now: time.Now()}, store, nil, nil
}

// planCluster computes the plan: an operator's rollback, or the diff of the commit against the cluster
// (with the guests an operator suspended, and asked again once PVE has said what it thinks of the moves).
// It notes in out the suspensions the commit lifts.
func (p *planner) planCluster(ctx context.Context, ev event.RepoChanged, c *repo.Cluster, in *plan.Input, out *computed) (plan.Plan, *computed, error) {
	cluster := c.Name
	var pl plan.Plan
	var err error
	switch {
	case ev.Rollback != nil && !ev.DryRun && ev.RequestedBy == "":
		// The watcher announces a rollback to apply only for an operator's request on its own subject.
		return pl, rejectedWith(cluster, plan.RejectRollback, diag.List{{Severity: diag.Error, Ref: ev.Rollback.Guest,
			Message: "a rollback is an operator's request, on the operator's own subject; this event names no operator"}}), nil
	case ev.Rollback != nil:
		pl, err = plan.RollbackPlan(*in, plan.RollbackRequest{Guest: ev.Rollback.Guest, Snapshot: ev.Rollback.Snapshot,
			RequestedBy: cmp.Or(ev.RequestedBy, "an operator")})
	default:
		ctl, _, cerr := p.readControl(ctx, cluster)
		if cerr != nil {
			return pl, nil, transient(cerr)
		}
		if len(ctl.SuspendedGuests) > 0 {
			fsys, ferr := p.treeFS(ctx, ev.Tree)
			if ferr != nil {
				return pl, nil, transient(ferr)
			}
			in.Suspended, out.lifted = suspensions(ctl, fsys, c)
		}
		pl, err = plan.Diff(*in)
		if err == nil && p.askAboutMoves(ctx, c, &in.Observed, pl) {
			// What PVE says about the moves (and HA's rules) may turn some into diagnostics.
			pl, err = plan.Diff(*in)
		}
	}
	var rej *plan.RejectedError
	switch {
	case errors.As(err, &rej):
		return pl, &computed{rejection: &rej.Rejection}, nil
	case err != nil:
		return pl, rejectedWith(cluster, plan.RejectInternal, diag.List{{Severity: diag.Error, File: c.Config.File,
			Message: "plan error: " + err.Error()}}), nil
	}
	return pl, nil, nil
}

// sealOperations binds each operation to what it was planned with. An operation with secret references
// names the version of the secrets file it was planned with: an executor holding another version refuses
// it rather than write other keys than the ones compared. Every operation names the base-url the commit
// declares: an executor with its own endpoint refuses one that names another, so a commit cannot redirect
// its credentials. A malformed secret reference rejects the plan.
func sealOperations(c *repo.Cluster, store *secrets.Store, pl *plan.Plan) *computed {
	var bad diag.List
	for i := range pl.Operations {
		if err := pl.Operations[i].CheckSecretRefs(); err != nil {
			bad = append(bad, diag.Diagnostic{Severity: diag.Error, File: c.Config.File, Ref: pl.Operations[i].Ref,
				Message: "plan error: " + err.Error()})
		}
	}
	if len(bad) > 0 {
		return rejectedWith(c.Name, plan.RejectInternal, bad)
	}
	for i := range pl.Operations {
		pl.Operations[i].BaseURL = c.Config.BaseURL
		if hasSecretRefs(pl.Operations[i]) {
			pl.Operations[i].SecretsDigest = store.Digest()
		}
	}
	return nil
}

// hasSecretRefs reports whether any value of an operation is resolved from secrets by the executor.
func hasSecretRefs(op plan.Operation) bool {
	for _, kv := range op.Values {
		if len(kv.SecretRefs) > 0 {
			return true
		}
	}
	return false
}

// repository loads the repository of a tree snapshot, checked against its name (cached by tree: the name is
// the hash of the content).
func (p *planner) repository(ctx context.Context, tree string) (*repo.Repository, error) {
	process := p.process()
	p.treeMu.Lock()
	if t, ok := p.trees[tree]; ok && t.process == process {
		p.treeMu.Unlock()
		return t.repo, nil
	}
	p.treeMu.Unlock()
	snap, err := treestore.Get(ctx, p.bus, tree)
	if err != nil {
		return nil, err
	}
	r := repo.LoadWith(snap.FS(), repo.LoadOptions{Process: process})
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	if _, ok := p.trees[tree]; !ok && len(p.trees) >= 8 {
		for k := range p.trees {
			delete(p.trees, k)
			break
		}
	}
	p.trees[tree] = loadedTree{repo: r, process: process}
	return r, nil
}

// loadedTree is a tree loaded with a process configuration.
type loadedTree struct {
	repo    *repo.Repository
	process *repo.Config
}

// process is the process configuration laid over every tree now.
func (p *planner) process() *repo.Config {
	if p.cfg.CurrentProcess != nil {
		return p.cfg.CurrentProcess()
	}
	return p.cfg.Process
}

// clusterNames returns the clusters an event covers: its own list, or every cluster of the tree.
func (p *planner) clusterNames(ctx context.Context, ev event.RepoChanged) ([]string, error) {
	if len(ev.Clusters) > 0 {
		out := slices.Clone(ev.Clusters)
		slices.Sort(out)
		return slices.Compact(out), nil
	}
	r, err := p.repository(ctx, ev.Tree)
	if err != nil {
		return nil, err
	}
	return r.ClusterNames(), nil
}

// decryptSecrets decrypts a cluster's secrets file. Every failure becomes a diagnostic naming the file and
// the entry, never a value.
func (p *planner) decryptSecrets(ctx context.Context, tree string, r *repo.Repository, c *repo.Cluster) (*secrets.Store, diag.List) {
	file := c.Config.SecretsPath()
	field := "pve.clusters." + c.Name + ".secrets-file"
	at := func(msg string) diag.List {
		pos := c.Config.Positions.Lookup(field)
		return diag.List{{Severity: diag.Error, File: c.Config.File, Line: pos.Line, Column: pos.Column, Field: field,
			Message: "cloud-init secret resolution: " + msg}}
	}
	fsys, err := p.treeFS(ctx, tree)
	if err != nil {
		return nil, at(fmt.Sprintf("cannot read the tree snapshot: %v", err))
	}
	host := secrets.RepositoryOnly
	if p.cfg.LocalSecrets {
		host = secrets.HostDisk
	}
	store, err := p.decryptor.ReadClusterFile(ctx, fsys, file, host)
	if errors.Is(err, secrets.ErrOutsideRepository) {
		return nil, at(fmt.Sprintf("secrets-file %s is outside the repository; the planner reads secrets from the repository only", file))
	}
	if err != nil {
		return nil, secretsDiagnostics(err, file)
	}
	return store, nil
}

// treeFS returns the file system of a tree snapshot, checked against its name.
func (p *planner) treeFS(ctx context.Context, tree string) (fs.FS, error) {
	snap, err := treestore.Get(ctx, p.bus, tree)
	if err != nil {
		return nil, err
	}
	return snap.FS(), nil
}

// secretsDiagnostics turns a secrets failure (possibly several joined) into diagnostics in the secrets file.
func secretsDiagnostics(err error, file string) diag.List {
	var out diag.List
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var se *secrets.Error
		if errors.As(e, &se) {
			d := se.Diagnostic()
			d.Message = "cloud-init secret resolution: " + d.Message
			if d.File == "" {
				d.File = file
			}
			out = append(out, d)
			return
		}
		out = append(out, diag.Diagnostic{Severity: diag.Error, File: file, Message: "cloud-init secret resolution: " + e.Error()})
	}
	walk(err)
	return out.Sorted()
}

// storeSecrets resolves a plan's secret references against a decrypted store, into digests only.
type storeSecrets struct{ store *secrets.Store }

var _ plan.SecretResolver = storeSecrets{}

func (s storeSecrets) SSHKeysDigest(refs []string) (string, error) {
	set, err := s.store.ResolveSSHKeys(refs, "")
	if err != nil {
		return "", err
	}
	return set.Digest, nil
}

func (s storeSecrets) CheckPassword(ref string) error {
	_, err := s.store.ResolvePassword(ref, "")
	return err
}

// ownedRead is a cluster's ownership inventory being read.
type ownedRead struct {
	done  chan struct{}
	owned []plan.Owned
	err   error
}

// readOwned starts reading a cluster's ownership inventory.
func (p *planner) readOwned(ctx context.Context, cluster string) *ownedRead {
	r := &ownedRead{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.owned, r.err = p.owned(ctx, cluster)
	}()
	return r
}

// wait returns the inventory once it is read.
func (r *ownedRead) wait() ([]plan.Owned, error) {
	<-r.done
	return r.owned, r.err
}

// owned reads a cluster's ownership inventory.
func (p *planner) owned(ctx context.Context, cluster string) ([]plan.Owned, error) {
	entries, err := p.bus.Entries(ctx, bus.BucketOwned, cluster+".*")
	if err != nil {
		return nil, fmt.Errorf("read ownership inventory of %s: %w", cluster, err)
	}
	var out []plan.Owned
	for _, e := range entries {
		o, err := wire.UnmarshalOwnedGuest(e.Value)
		if err != nil || o.Fingerprint == "" {
			p.log.Warn("unusable ownership record ignored", "cluster", cluster, "key", e.Key, "err", err)
			continue
		}
		out = append(out, o.Owned)
	}
	return out, nil
}

// observe asks the executors of every node of the cluster for a live inventory, in parallel. A node that
// does not answer, or answers with an error, gives a diagnostic (the plan is then rejected: fail closed).
// With an empty allowlist the nodes are those PVE lists, learned through the executor of a node the
// repository or the ownership inventory names (ObserveRequest.ListNodes). permanent reports that a node's
// failure will not go away by itself (refused credentials, TLS verification, a refusal of the request):
// refused lists those nodes, sorted.
func (p *planner) observe(ctx context.Context, c *repo.Cluster, owned *ownedRead, needs plan.ObjectsNeeded) (_ inventory.Cluster, _ diag.List, refused []string, _ error) {
	start := time.Now()
	defer func() { p.metrics.observeSeconds.Observe(time.Since(start).Seconds()) }()
	content := plan.ContentStorages(c)
	var unknown []string
	if len(multiNode(content, nil)) > 0 {
		seen, sharedOn := p.knownStorages(ctx, c.Name)
		listSharedOnce(content, sharedOn)
		unknown = multiNode(content, func(st string) bool { return !seen[st] })
	}
	nodes := slices.Clone(c.Config.Nodes)
	var first *wire.NodeInventory
	var diags diag.List
	failed := func(n string, err error) {
		diags = append(diags, p.observeDiag(c, n, err))
		if observe.Permanent(err) {
			refused = append(refused, n)
		}
	}
	if len(nodes) == 0 {
		guests, err := owned.wait()
		if err != nil {
			return inventory.Cluster{}, nil, nil, err
		}
		seeds := seedNodes(c, guests)
		if len(seeds) == 0 {
			seeds = p.inventoriedNodes(ctx, c.Name)
		}
		for _, n := range seeds {
			inv, err := p.observer().Node(ctx, p.observeRequest(c, n, content[n], true, true, needs))
			if err != nil {
				failed(n, err)
				continue
			}
			if len(inv.ClusterNodes) == 0 {
				failed(n, errors.New("the executor did not report the cluster's nodes"))
				continue
			}
			first, nodes, diags, refused = &inv, inv.ClusterNodes, nil, nil
			break
		}
		if len(diags) > 0 {
			slices.Sort(refused)
			return inventory.Cluster{}, diags.Sorted(), refused, nil
		}
	} else if i := slices.IndexFunc(unknown, func(n string) bool { return slices.Contains(nodes, n) }); i >= 0 {
		// No inventory says whether a storage several nodes are asked to list is shared (the cluster's first
		// plan): the first of those nodes is observed before the others, and what it lists as shared is not
		// listed again.
		n := unknown[i]
		inv, err := p.observer().Node(ctx, p.observeRequest(c, n, content[n], false, true, needs))
		if err != nil {
			failed(n, err)
			return inventory.Cluster{}, diags, refused, nil
		}
		first = &inv
	}
	if first != nil {
		listedOnce(content, first.Node)
	}
	var rest []string
	for _, n := range nodes {
		if first == nil || n != first.Node.Node {
			rest = append(rest, n)
		}
	}
	observed, failures := p.observer().Nodes(ctx, rest, func(n string) wire.ObserveRequest {
		// The cluster's firewall objects are read once: with the first node's inventory.
		return p.observeRequest(c, n, content[n], false, first == nil && n == rest[0], needs)
	})
	for _, n := range slices.Sorted(maps.Keys(failures)) {
		failed(n, failures[n])
	}
	if ctx.Err() != nil {
		return inventory.Cluster{}, nil, nil, ctx.Err()
	}
	out := inventory.Cluster{Name: c.Name, Nodes: observed}
	if first != nil && slices.Contains(nodes, first.Node.Node) {
		out.Nodes = append(out.Nodes, first.Node)
	}
	slices.SortFunc(out.Nodes, func(a, b inventory.Node) int { return strings.Compare(a.Node, b.Node) })
	slices.Sort(refused)
	return out, diags.Sorted(), refused, nil
}

func (p *planner) observeDiag(c *repo.Cluster, node string, err error) diag.Diagnostic {
	field := "pve.clusters." + c.Name + ".nodes"
	pos := c.Config.Positions.Lookup(field)
	return diag.Diagnostic{Severity: diag.Error, File: c.Config.File, Line: pos.Line, Column: pos.Column, Field: field,
		Message: fmt.Sprintf("pve inventory read failed: node %s: %v", node, err)}
}

// observer asks the cluster's executors for their nodes' inventories within the observe timeout.
func (p *planner) observer() observe.Client {
	return observe.Client{Bus: p.bus, Timeout: p.cfg.ObserveTimeout}
}

// observeRequest asks one node for its inventory. It names the cluster's base-url, which an executor with its
// own endpoint checks against it, and the guests whose declared firewall it reads; clusterFW asks for the
// cluster's firewall objects too when needs says the plan needs them (a guest declares a firewall, the cluster's
// firewall is managed, the repository declares firewall objects or the ownership inventory records some). The
// cluster's pools are asked of one node, with its backup jobs and its HA resources and rules when needs says the
// plan needs them (plan.NeededObjects):
// the one asked for the cluster's nodes, or the first of the allowlist.
func (p *planner) observeRequest(c *repo.Cluster, node string, content []string, listNodes, clusterFW bool,
	needs plan.ObjectsNeeded) wire.ObserveRequest {
	fw := plan.FirewallVMIDs(c)
	pools := listNodes || (len(c.Config.Nodes) > 0 && node == slices.Min(c.Config.Nodes))
	return wire.ObserveRequest{Cluster: c.Name, Node: node, RequestID: newID("obs"), ContentStorages: content,
		ListNodes: listNodes, BaseURL: c.Config.BaseURL, FirewallVMIDs: fw, ClusterFirewall: clusterFW && needs.ClusterFirewall,
		Pools: pools, BackupJobs: pools && needs.BackupJobs, HA: pools && needs.HA}
}

// multiNode returns, sorted, the nodes asked to list a storage that other nodes are asked to list too (a
// storage that may be shared, listed more than once), of the storages keep accepts (nil: all).
func multiNode(content map[string][]string, keep func(storage string) bool) []string {
	askers := map[string][]string{}
	for _, n := range slices.Sorted(maps.Keys(content)) {
		for _, st := range content[n] {
			if keep == nil || keep(st) {
				askers[st] = append(askers[st], n)
			}
		}
	}
	var out []string
	for _, st := range slices.Sorted(maps.Keys(askers)) {
		if len(askers[st]) > 1 {
			out = append(out, askers[st]...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// listSharedOnce keeps each shared storage on one node's list: the first node, in name order, of those asked
// to list it that holds it as shared. sharedOn maps a storage to the nodes known to hold it as shared.
func listSharedOnce(content map[string][]string, sharedOn map[string][]string) {
	holder := map[string]string{}
	for _, n := range slices.Sorted(maps.Keys(content)) {
		for _, st := range content[n] {
			if _, ok := holder[st]; !ok && slices.Contains(sharedOn[st], n) {
				holder[st] = n
			}
		}
	}
	for n, list := range content {
		content[n] = slices.DeleteFunc(list, func(st string) bool {
			h, ok := holder[st]
			return ok && h != n
		})
	}
}

// listedOnce drops from every other node's list the shared storages an observed node has listed.
func listedOnce(content map[string][]string, observed inventory.Node) {
	for n, list := range content {
		if n == observed.Node {
			continue
		}
		content[n] = slices.DeleteFunc(list, func(st string) bool {
			s, ok := observed.Storage(st)
			return ok && s.Shared && observed.Listed(st)
		})
	}
}

// knownStorages reads the cluster's last inventories (one per node, published by the executors at each
// observe): seen holds every storage they show, sharedOn maps each one shown as shared to the nodes that hold
// it, sorted. Without inventories both are empty and nothing is assumed shared.
func (p *planner) knownStorages(ctx context.Context, cluster string) (seen map[string]bool, sharedOn map[string][]string) {
	seen, sharedOn = map[string]bool{}, map[string][]string{}
	filter, err := bus.InventoryFilter(cluster)
	if err != nil {
		return seen, sharedOn
	}
	msgs, err := p.bus.LastPerSubject(ctx, bus.StreamInventory, filter)
	if err != nil {
		p.log.Warn("last inventories not read; shared storages may be listed on several nodes", "cluster", cluster, "err", err)
		return seen, sharedOn
	}
	for _, m := range msgs {
		inv, err := wire.DecodeNodeInventory(ctx, m.Decode)
		if err != nil || inv.Error != "" || inv.Node.Cluster != cluster {
			continue
		}
		for _, s := range inv.Node.Storages {
			seen[s.ID] = true
			if s.Shared {
				sharedOn[s.ID] = append(sharedOn[s.ID], inv.Node.Node)
			}
		}
	}
	for id := range sharedOn {
		slices.Sort(sharedOn[id])
		sharedOn[id] = slices.Compact(sharedOn[id])
	}
	return seen, sharedOn
}

// seedNodes are the nodes a cluster without an allowlist is known to have: those its resources are placed
// on and those its owned guests were recorded on, sorted.
func seedNodes(c *repo.Cluster, owned []plan.Owned) []string {
	var out []string
	for _, r := range c.Resources {
		if a := r.Artifact(); a != nil {
			out = append(out, a.PlacementNodes()...)
		} else if n := r.Node(); n != "" {
			out = append(out, n)
		}
	}
	for _, o := range owned {
		if o.Node != "" {
			out = append(out, o.Node)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// inventoriedNodes are the nodes whose executors published an inventory of the cluster.
func (p *planner) inventoriedNodes(ctx context.Context, cluster string) []string {
	filter, err := bus.InventoryFilter(cluster)
	if err != nil {
		return nil
	}
	msgs, err := p.bus.LastPerSubject(ctx, bus.StreamInventory, filter)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range msgs {
		if i := strings.LastIndexByte(m.Subject, '.'); i >= 0 {
			out = append(out, m.Subject[i+1:])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
