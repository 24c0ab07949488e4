// Package inventory holds the observed state of PVE nodes: guests with their raw config exactly as PVE
// reports it (every key, in PVE's order, with pending values), storages and storage content. Executors
// produce it, the planner and the adopter read it. It is plain data: no I/O.
//
// Secrets never travel in an inventory: a guest's sshkeys value is replaced by a digest of its key set
// (SSHKeysDigest) and cipassword by CIPasswordPresent.
package inventory

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// GuestType is the PVE guest type.
type GuestType string

const (
	QEMU GuestType = "qemu"
	LXC  GuestType = "lxc"
)

// Node is one node's live state.
type Node struct {
	Cluster    string
	Node       string
	PVEVersion string
	// Guests sorted by VMID.
	Guests []Guest
	// Storages sorted by ID.
	Storages []Storage
	// Volumes of the listed storages, sorted by Volid.
	Volumes []Volume
	// ListedStorages are the storages whose content was listed (a file absent from a storage that was not
	// listed is unknown, not missing).
	ListedStorages []string
	// TagsCaseSensitive says the cluster's tag-style holds case-sensitive=1: PVE keeps the case of tags
	// instead of lower-casing them (datacenter.cfg is cluster-wide; every node reports it).
	TagsCaseSensitive bool
	// Pools are the cluster's resource pools, sorted by id (cluster-wide: every node reports them), when
	// PoolsObserved says they were read.
	Pools         []Pool
	PoolsObserved bool
	// BackupJobs are the cluster's backup jobs, sorted by id (cluster-wide), when BackupJobsObserved says
	// they were read.
	BackupJobs         []BackupJob
	BackupJobsObserved bool
	// ClusterFirewall is the cluster's firewall objects, when the observe asked for them (nil otherwise).
	ClusterFirewall *ClusterFirewall
}

// Pool is one resource pool: its id, its comment as PVE keeps it (ownership marker included) and the vmids
// of its guests, sorted.
type Pool struct {
	ID      string
	Comment string
	Members []int
}

// BackupJob is one backup job (GET /cluster/backup): its id, its comment as PVE keeps it (ownership marker
// included) and its other options as PVE lists them, every value a string (booleans 0/1).
type BackupJob struct {
	ID      string
	Comment string
	Options map[string]string
}

// BackupJobs returns the cluster's backup jobs as the first node that read them reports them, and whether
// any node did.
func (c Cluster) BackupJobs() ([]BackupJob, bool) {
	for _, n := range c.Nodes {
		if n.BackupJobsObserved {
			return n.BackupJobs, true
		}
	}
	return nil, false
}

// Pools returns the cluster's resource pools as the first node that read them reports them, and whether any
// node did.
func (c Cluster) Pools() ([]Pool, bool) {
	for _, n := range c.Nodes {
		if n.PoolsObserved {
			return n.Pools, true
		}
	}
	return nil, false
}

// Guest is one VM or container.
type Guest struct {
	VMID int
	Type GuestType
	Node string
	// Name is the qemu name or the lxc hostname as the listing reports it.
	Name string
	// Status is running or stopped.
	Status string
	// QMPStatus is qemu's finer state (running, paused, prelaunch, ...); empty for lxc.
	QMPStatus string
	Template  bool
	Lock      string
	// Tags is the raw tags string as PVE reports it.
	Tags string
	// Digest is the config digest that a write must carry.
	Digest string
	// Config holds every key of GET .../pending, in PVE's order, then a container's raw lxc.* keys (from GET
	// .../config; current values only, in file order, a key repeated once per line).
	Config    []Entry
	HAManaged bool
	// HAState is the HA resource's requested state when HAManaged (started, stopped, disabled, ignored).
	HAState string
	// CloudInitDrive says the VM has a cloud-init drive; CloudInit is then GET .../cloudinit: per cloud-init
	// key, Value is what the drive was generated with, Pending a config value the drive does not hold yet,
	// Delete a key removed since (secrets replaced as in Config).
	CloudInitDrive bool
	CloudInit      []Entry
	// Firewall is the guest's firewall, when the observe asked for it (nil otherwise).
	Firewall *Firewall
	// Snapshots are the guest's snapshots (GET .../snapshot without "current"), oldest first; read only for
	// guests carrying the ownership tag.
	Snapshots []Snapshot
}

// Snapshot is one snapshot of a guest.
type Snapshot struct {
	Name        string
	Parent      string
	Description string
	// Time is the snapshot's snaptime, Unix seconds.
	Time int64
	// VMState says the snapshot holds the VM's RAM.
	VMState bool
	// State is prepare or delete while a task works on the snapshot, empty when it is complete.
	State string
}

// SortSnapshots orders snapshots oldest first, then by name.
func SortSnapshots(list []Snapshot) {
	slices.SortFunc(list, func(a, b Snapshot) int {
		if a.Time != b.Time {
			return cmp.Compare(a.Time, b.Time)
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// Snapshot returns the guest's snapshot of that name.
func (g Guest) Snapshot(name string) (Snapshot, bool) {
	for _, s := range g.Snapshots {
		if s.Name == name {
			return s, true
		}
	}
	return Snapshot{}, false
}

// Entry is one config key with its current and pending state.
type Entry struct {
	Key string
	// Value is the current value; HasValue is false when the key exists only as a pending addition.
	Value      string
	HasValue   bool
	Pending    string
	HasPending bool
	// Delete is 1 for a pending delete, 2 for a pending forced delete.
	Delete int
}

// Storage is one storage as seen from a node.
type Storage struct {
	ID      string
	Type    string
	Content []string
	Shared  bool
	Active  bool
	Enabled bool
	Total   int64
	Avail   int64
}

// Volume is one storage content entry.
type Volume struct {
	Storage string
	Volid   string
	Content string
	Format  string
	Size    int64
	VMID    int
	Parent  string
}

// Get returns the current value of a config key.
func (g Guest) Get(key string) (string, bool) {
	for _, e := range g.Config {
		if e.Key == key && e.HasValue {
			return e.Value, true
		}
	}
	return "", false
}

// Current returns the current config as a map (keys with a current value only).
func (g Guest) Current() map[string]string {
	m := make(map[string]string, len(g.Config))
	for _, e := range g.Config {
		if e.HasValue {
			m[e.Key] = e.Value
		}
	}
	return m
}

// PendingKeys returns the keys that have a pending change or delete, sorted.
func (g Guest) PendingKeys() []string {
	var keys []string
	for _, e := range g.Config {
		if e.HasPending || e.Delete > 0 {
			keys = append(keys, e.Key)
		}
	}
	slices.Sort(keys)
	return keys
}

// CloudInitStale returns the cloud-init keys the drive does not hold as the config has them (a pending
// value or a pending delete in GET .../cloudinit), sorted; nil when the drive is current or absent.
func (g Guest) CloudInitStale() []string {
	var keys []string
	for _, e := range g.CloudInit {
		if e.HasPending || e.Delete > 0 {
			keys = append(keys, e.Key)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// Running reports whether the guest is running (a paused VM is running but not executing).
func (g Guest) Running() bool { return g.Status == "running" }

// Paused reports whether a qemu guest is paused.
func (g Guest) Paused() bool {
	return g.Type == QEMU && g.Status == "running" && g.QMPStatus == "paused"
}

// Storage returns a storage as seen from the node.
func (n Node) Storage(id string) (Storage, bool) {
	i, ok := slices.BinarySearchFunc(n.Storages, id, func(s Storage, id string) int { return cmp.Compare(s.ID, id) })
	if !ok {
		return Storage{}, false
	}
	return n.Storages[i], true
}

// Listed reports whether a storage's content was listed on this node.
func (n Node) Listed(storage string) bool { return slices.Contains(n.ListedStorages, storage) }

// Sort puts a node's guests, storages, volumes and listed storages in their canonical order.
func (n *Node) Sort() {
	slices.SortFunc(n.Guests, func(a, b Guest) int { return cmp.Compare(a.VMID, b.VMID) })
	slices.SortFunc(n.Storages, func(a, b Storage) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(n.Volumes, func(a, b Volume) int { return cmp.Compare(a.Volid, b.Volid) })
	slices.Sort(n.ListedStorages)
	n.ListedStorages = slices.Compact(n.ListedStorages)
	slices.SortFunc(n.Pools, func(a, b Pool) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(n.BackupJobs, func(a, b BackupJob) int { return cmp.Compare(a.ID, b.ID) })
}

// Cluster is the observed state of every allowed node of one cluster.
type Cluster struct {
	Name string
	// Nodes sorted by name.
	Nodes []Node
	// HARules are the cluster's HA rules, read from one node when a plan moves HA-managed guests; HARulesRead
	// says they were read (a PVE 8 cluster has none).
	HARules     []HARule
	HARulesRead bool
	// MigrationChecks are PVE's answers about the moves a plan is about to emit (GET …/migrate?target=).
	MigrationChecks []MigrationCheck
}

// HARule is a PVE 9 HA rule.
type HARule struct {
	ID string
	// Type is node-affinity or resource-affinity.
	Type string
	// Resources are HA resource ids: vm:100, ct:101.
	Resources []string
	// Nodes are node[:priority] entries (node-affinity).
	Nodes  []string
	Strict bool
	// Affinity is positive or negative (resource-affinity).
	Affinity string
	Disable  bool
}

// MigrationQuery names a guest and the node it would move to.
type MigrationQuery struct {
	VMID   int
	Type   GuestType
	Target string
}

// MigrationCheck is PVE's answer about moving a guest (migrate_vm_precondition).
type MigrationCheck struct {
	MigrationQuery
	// Error is set when the answer could not be read; the rest is then empty.
	Error   string
	Running bool
	// LocalDisks are the guest's volumes on node-local storage; LocalCDROMs the ISO images among them.
	LocalDisks  []string
	LocalCDROMs []string
	// LocalResources are the passthrough devices that tie the guest to its node; Mapped those of them that
	// use a cluster-wide mapping.
	LocalResources []string
	Mapped         []string
	// Known says the answer listed allowed and not-allowed nodes (a stopped guest); Allowed that the target
	// is among the allowed ones; UnavailableStorages are the guest's storages the target lacks.
	Known               bool
	Allowed             bool
	UnavailableStorages []string
}

// MarkHA marks the guests HA manages, from the cluster's HA resources (sid → requested state).
func (c *Cluster) MarkHA(states map[string]string) {
	for i := range c.Nodes {
		for j := range c.Nodes[i].Guests {
			g := &c.Nodes[i].Guests[j]
			prefix := "vm:"
			if g.Type == LXC {
				prefix = "ct:"
			}
			if st, ok := states[prefix+strconv.Itoa(g.VMID)]; ok {
				g.HAManaged, g.HAState = true, st
			}
		}
	}
}

// MigrationCheck finds PVE's answer about moving a guest to target.
func (c Cluster) MigrationCheck(vmid int, target string) (MigrationCheck, bool) {
	for _, m := range c.MigrationChecks {
		if m.VMID == vmid && m.Target == target {
			return m, true
		}
	}
	return MigrationCheck{}, false
}

// TagsCaseSensitive reports whether the cluster keeps the case of tags (its tag-style says
// case-sensitive=1, as any observed node reports it).
func (c Cluster) TagsCaseSensitive() bool {
	return slices.ContainsFunc(c.Nodes, func(n Node) bool { return n.TagsCaseSensitive })
}

// Guest finds a guest by vmid anywhere in the cluster (vmids are unique cluster-wide).
func (c Cluster) Guest(vmid int) (Guest, bool) {
	for _, n := range c.Nodes {
		i, ok := slices.BinarySearchFunc(n.Guests, vmid, func(g Guest, id int) int { return cmp.Compare(g.VMID, id) })
		if ok {
			return n.Guests[i], true
		}
	}
	return Guest{}, false
}

// Node finds a node's inventory by name.
func (c Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Node == name {
			return n, true
		}
	}
	return Node{}, false
}

// Guests returns every guest of the cluster, sorted by vmid.
func (c Cluster) Guests() []Guest {
	var out []Guest
	for _, n := range c.Nodes {
		out = append(out, n.Guests...)
	}
	slices.SortFunc(out, func(a, b Guest) int { return cmp.Compare(a.VMID, b.VMID) })
	return out
}

// Fingerprint returns a guest's identity fingerprint: a value PVE regenerates on clone, so a hand-made clone
// of a managed guest never matches its source's record. For qemu it is the smbios1 uuid; for lxc the sorted
// set of NIC hwaddrs. An empty fingerprint means the guest has no identity to match.
func Fingerprint(g Guest) string {
	switch g.Type {
	case QEMU:
		v, _ := g.Get("smbios1")
		for tok := range strings.SplitSeq(v, ",") {
			if k, val, ok := strings.Cut(tok, "="); ok && k == "uuid" {
				return "uuid=" + strings.ToLower(val)
			}
		}
		return ""
	case LXC:
		var macs []string
		for _, e := range g.Config {
			if !e.HasValue || !strings.HasPrefix(e.Key, "net") {
				continue
			}
			for tok := range strings.SplitSeq(e.Value, ",") {
				if k, val, ok := strings.Cut(tok, "="); ok && k == "hwaddr" {
					macs = append(macs, strings.ToLower(val))
				}
			}
		}
		if len(macs) == 0 {
			return ""
		}
		slices.Sort(macs)
		return "hwaddr=" + strings.Join(macs, ";")
	}
	return ""
}
