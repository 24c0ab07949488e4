package wire

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	inventoryv1 "github.com/proxops/proxops/internal/gen/proxops/inventory/v1"
	"github.com/proxops/proxops/internal/inventory"
)

var inventoryGuestTypeEnum = enumMap[inventory.GuestType, inventoryv1.GuestType]{field: "type", pairs: []enumPair[inventory.GuestType, inventoryv1.GuestType]{
	{inventory.QEMU, inventoryv1.GuestType_GUEST_TYPE_QEMU},
	{inventory.LXC, inventoryv1.GuestType_GUEST_TYPE_LXC},
}}

// NodeInventory is a node's inventory as it travels: the observed node plus what the observation itself
// says (which request it answers, when it was taken, and whether it failed).
type NodeInventory struct {
	Node       inventory.Node
	RequestID  string
	ObservedAt time.Time
	// Error is set when the node could not be observed; the inventory is then incomplete and must not be
	// planned on.
	Error string
	// ErrorClass classifies Error: "retryable" (PVE unreachable, 5xx, lock timeouts) or "terminal" (refused
	// credentials, TLS verification, parameters).
	ErrorClass string
	// ClusterNodes are the nodes of the PVE cluster, sorted, when the request asked for them (ListNodes).
	ClusterNodes []string
	// HARules are the cluster's HA rules when the request asked for them; HARulesRead says they were read.
	HARules     []inventory.HARule
	HARulesRead bool
	// MigrationChecks are PVE's answers to the request's MigrationChecks.
	MigrationChecks []inventory.MigrationCheck
	// HAResources are the cluster's HA resources (sid → requested state), with HARules.
	HAResources map[string]string
}

// ObserveRequest asks a node's executors for a live inventory.
type ObserveRequest struct {
	Cluster   string
	Node      string
	RequestID string
	// ContentStorages are the storages whose content to list.
	ContentStorages []string
	// AllContent lists the content of every storage (adoption).
	AllContent bool
	// ListNodes asks for the nodes of the PVE cluster as well (NodeInventory.ClusterNodes): how a planner
	// learns the nodes of a cluster whose allowlist is empty.
	ListNodes bool
	// BaseURL is the base-url the repository declares for the cluster (empty: not said). An executor with
	// its own endpoint refuses a request whose BaseURL names another endpoint.
	BaseURL string
	// Pools asks for the cluster's resource pools as well (cluster-wide: one node is asked).
	Pools bool
	// BackupJobs asks for the cluster's backup jobs as well (cluster-wide: one node is asked).
	BackupJobs bool
	// FirewallVMIDs are the guests whose firewall to read where they are on the node.
	FirewallVMIDs []int
	// AllFirewalls reads the firewall of every guest (adoption).
	AllFirewalls bool
	// ClusterFirewall asks for the cluster's firewall objects as well.
	ClusterFirewall bool
	// HARules asks for the cluster's HA rules (NodeInventory.HARules).
	HARules bool
	// MigrationChecks asks PVE whether these guests of the node may move (NodeInventory.MigrationChecks).
	MigrationChecks []inventory.MigrationQuery
	// ChecksOnly answers only HARules and MigrationChecks, without reading the node's inventory.
	ChecksOnly bool
}

func guestToProto(g inventory.Guest) (*inventoryv1.Guest, error) {
	t, err := inventoryGuestTypeEnum.toProto(g.Type)
	if err != nil {
		return nil, err
	}
	p := &inventoryv1.Guest{
		Vmid: int64(g.VMID), Type: t, Name: g.Name, Status: g.Status, Qmpstatus: g.QMPStatus, Template: g.Template,
		Lock: g.Lock, Tags: g.Tags, Digest: g.Digest, HaManaged: g.HAManaged, HaState: g.HAState, CloudinitDrive: g.CloudInitDrive,
		Firewall: guestFirewallToProto(g.Firewall),
	}
	if p.Config, err = entriesToProto("config", g.Config); err != nil {
		return nil, err
	}
	if p.Cloudinit, err = entriesToProto("cloudinit", g.CloudInit); err != nil {
		return nil, err
	}
	for _, s := range g.Snapshots {
		p.Snapshots = append(p.Snapshots, &inventoryv1.Snapshot{Name: s.Name, Parent: s.Parent, Description: s.Description,
			Snaptime: s.Time, Vmstate: s.VMState, Snapstate: s.State})
	}
	return p, nil
}

func entriesToProto(what string, es []inventory.Entry) ([]*inventoryv1.ConfigEntry, error) {
	var out []*inventoryv1.ConfigEntry
	for _, e := range es {
		del, err := int32Of(what+" "+e.Key+" delete", e.Delete)
		if err != nil {
			return nil, err
		}
		out = append(out, &inventoryv1.ConfigEntry{Key: e.Key, Value: e.Value, HasValue: e.HasValue,
			Pending: e.Pending, HasPending: e.HasPending, Delete: del})
	}
	return out, nil
}

func entriesFromProto(ps []*inventoryv1.ConfigEntry) []inventory.Entry {
	var out []inventory.Entry
	for _, e := range ps {
		out = append(out, inventory.Entry{Key: e.GetKey(), Value: e.GetValue(), HasValue: e.GetHasValue(),
			Pending: e.GetPending(), HasPending: e.GetHasPending(), Delete: int(e.GetDelete())})
	}
	return out
}

func guestFromProto(p *inventoryv1.Guest, node string) (inventory.Guest, error) {
	t, err := inventoryGuestTypeEnum.fromProto(p.GetType())
	if err != nil {
		return inventory.Guest{}, err
	}
	g := inventory.Guest{
		VMID: int(p.GetVmid()), Type: t, Node: node, Name: p.GetName(), Status: p.GetStatus(),
		QMPStatus: p.GetQmpstatus(), Template: p.GetTemplate(), Lock: p.GetLock(), Tags: p.GetTags(),
		Digest: p.GetDigest(), HAManaged: p.GetHaManaged(), HAState: p.GetHaState(), CloudInitDrive: p.GetCloudinitDrive(),
		Config: entriesFromProto(p.GetConfig()), CloudInit: entriesFromProto(p.GetCloudinit()),
		Firewall: guestFirewallFromProto(p.GetFirewall()),
	}
	for _, s := range p.GetSnapshots() {
		g.Snapshots = append(g.Snapshots, inventory.Snapshot{Name: s.GetName(), Parent: s.GetParent(),
			Description: s.GetDescription(), Time: s.GetSnaptime(), VMState: s.GetVmstate(), State: s.GetSnapstate()})
	}
	return g, nil
}

func nodeInventoryToProto(n NodeInventory) (*inventoryv1.NodeInventory, error) {
	p := &inventoryv1.NodeInventory{
		Cluster: n.Node.Cluster, Node: n.Node.Node, RequestId: n.RequestID, ObservedAt: timeToProto(n.ObservedAt),
		PveVersion: n.Node.PVEVersion, ListedStorages: n.Node.ListedStorages, Error: n.Error, ErrorClass: n.ErrorClass, ClusterNodes: n.ClusterNodes,
		TagsCaseSensitive: n.Node.TagsCaseSensitive, PoolsObserved: n.Node.PoolsObserved, BackupJobsObserved: n.Node.BackupJobsObserved,
		ClusterFirewall: clusterFirewallToProto(n.Node.ClusterFirewall), HaRulesRead: n.HARulesRead,
	}
	for _, pl := range n.Node.Pools {
		pp := &inventoryv1.Pool{Poolid: pl.ID, Comment: pl.Comment}
		for _, v := range pl.Members {
			pp.Vmids = append(pp.Vmids, int64(v))
		}
		p.Pools = append(p.Pools, pp)
	}
	for _, j := range n.Node.BackupJobs {
		p.BackupJobs = append(p.BackupJobs, &inventoryv1.BackupJob{Id: j.ID, Comment: j.Comment, Options: maps.Clone(j.Options)})
	}
	for _, r := range n.HARules {
		p.HaRules = append(p.HaRules, &inventoryv1.HARule{Id: r.ID, Type: r.Type, Resources: r.Resources, Nodes: r.Nodes,
			Strict: r.Strict, Affinity: r.Affinity, Disable: r.Disable})
	}
	for _, sid := range slices.Sorted(maps.Keys(n.HAResources)) {
		p.HaResources = append(p.HaResources, &inventoryv1.HAResourceState{Sid: sid, State: n.HAResources[sid]})
	}
	for _, m := range n.MigrationChecks {
		t, err := inventoryGuestTypeEnum.toProto(m.Type)
		if err != nil {
			return nil, fmt.Errorf("migration check of %d: %w", m.VMID, err)
		}
		p.MigrationChecks = append(p.MigrationChecks, &inventoryv1.MigrationCheck{Vmid: int64(m.VMID), Type: t, Target: m.Target,
			Error: m.Error, Running: m.Running, LocalDisks: m.LocalDisks, LocalCdroms: m.LocalCDROMs, LocalResources: m.LocalResources,
			MappedResources: m.Mapped, Known: m.Known, Allowed: m.Allowed, UnavailableStorages: m.UnavailableStorages})
	}
	for _, g := range n.Node.Guests {
		if g.Node != "" && g.Node != n.Node.Node {
			return nil, fmt.Errorf("guest %d: on node %q, not %q", g.VMID, g.Node, n.Node.Node)
		}
		pg, err := guestToProto(g)
		if err != nil {
			return nil, fmt.Errorf("guest %d: %w", g.VMID, err)
		}
		p.Guests = append(p.Guests, pg)
	}
	for _, s := range n.Node.Storages {
		p.Storages = append(p.Storages, &inventoryv1.Storage{Storage: s.ID, Type: s.Type, Content: s.Content,
			Shared: s.Shared, Active: s.Active, Enabled: s.Enabled, Total: s.Total, Avail: s.Avail})
	}
	for _, v := range n.Node.Volumes {
		p.Volumes = append(p.Volumes, &inventoryv1.Volume{Storage: v.Storage, Volid: v.Volid, Content: v.Content,
			Format: v.Format, Size: v.Size, Vmid: int64(v.VMID), Parent: v.Parent})
	}
	return p, nil
}

func nodeInventoryFromProto(p *inventoryv1.NodeInventory) (NodeInventory, error) {
	at, err := timeFromProto(p.GetObservedAt())
	if err != nil {
		return NodeInventory{}, fmt.Errorf("observed at: %w", err)
	}
	n := NodeInventory{RequestID: p.GetRequestId(), ObservedAt: at, Error: p.GetError(), ErrorClass: p.GetErrorClass(), ClusterNodes: p.GetClusterNodes(), Node: inventory.Node{
		Cluster: p.GetCluster(), Node: p.GetNode(), PVEVersion: p.GetPveVersion(), ListedStorages: p.GetListedStorages(),
		TagsCaseSensitive: p.GetTagsCaseSensitive(), PoolsObserved: p.GetPoolsObserved(), BackupJobsObserved: p.GetBackupJobsObserved(),
		ClusterFirewall: clusterFirewallFromProto(p.GetClusterFirewall()),
	}, HARulesRead: p.GetHaRulesRead()}
	for _, pp := range p.GetPools() {
		pl := inventory.Pool{ID: pp.GetPoolid(), Comment: pp.GetComment()}
		for _, v := range pp.GetVmids() {
			pl.Members = append(pl.Members, int(v))
		}
		n.Node.Pools = append(n.Node.Pools, pl)
	}
	for _, j := range p.GetBackupJobs() {
		n.Node.BackupJobs = append(n.Node.BackupJobs, inventory.BackupJob{ID: j.GetId(), Comment: j.GetComment(), Options: maps.Clone(j.GetOptions())})
	}
	for _, r := range p.GetHaRules() {
		n.HARules = append(n.HARules, inventory.HARule{ID: r.GetId(), Type: r.GetType(), Resources: r.GetResources(),
			Nodes: r.GetNodes(), Strict: r.GetStrict(), Affinity: r.GetAffinity(), Disable: r.GetDisable()})
	}
	for _, r := range p.GetHaResources() {
		if n.HAResources == nil {
			n.HAResources = map[string]string{}
		}
		n.HAResources[r.GetSid()] = r.GetState()
	}
	for _, m := range p.GetMigrationChecks() {
		t, err := inventoryGuestTypeEnum.fromProto(m.GetType())
		if err != nil {
			return NodeInventory{}, fmt.Errorf("migration check of %d: %w", m.GetVmid(), err)
		}
		n.MigrationChecks = append(n.MigrationChecks, inventory.MigrationCheck{
			MigrationQuery: inventory.MigrationQuery{VMID: int(m.GetVmid()), Type: t, Target: m.GetTarget()},
			Error:          m.GetError(), Running: m.GetRunning(), LocalDisks: m.GetLocalDisks(), LocalCDROMs: m.GetLocalCdroms(),
			LocalResources: m.GetLocalResources(), Mapped: m.GetMappedResources(), Known: m.GetKnown(), Allowed: m.GetAllowed(),
			UnavailableStorages: m.GetUnavailableStorages()})
	}
	for _, pg := range p.GetGuests() {
		g, err := guestFromProto(pg, p.GetNode())
		if err != nil {
			return NodeInventory{}, fmt.Errorf("guest %d: %w", pg.GetVmid(), err)
		}
		n.Node.Guests = append(n.Node.Guests, g)
	}
	for _, s := range p.GetStorages() {
		n.Node.Storages = append(n.Node.Storages, inventory.Storage{ID: s.GetStorage(), Type: s.GetType(),
			Content: s.GetContent(), Shared: s.GetShared(), Active: s.GetActive(), Enabled: s.GetEnabled(),
			Total: s.GetTotal(), Avail: s.GetAvail()})
	}
	for _, v := range p.GetVolumes() {
		n.Node.Volumes = append(n.Node.Volumes, inventory.Volume{Storage: v.GetStorage(), Volid: v.GetVolid(),
			Content: v.GetContent(), Format: v.GetFormat(), Size: v.GetSize(), VMID: int(v.GetVmid()), Parent: v.GetParent()})
	}
	return n, nil
}

// NodeInventoryToProto converts an inventory into a proxops.inventory.v1.NodeInventory. A guest must sit on
// the inventory's node (or name no node).
func NodeInventoryToProto(n NodeInventory) (proto.Message, error) {
	p, err := nodeInventoryToProto(n)
	if err != nil {
		return nil, fmt.Errorf("inventory of %s/%s: %w", n.Node.Cluster, n.Node.Node, err)
	}
	return p, nil
}

// NodeInventoryFromProto converts a proxops.inventory.v1.NodeInventory; every guest gets the node's name.
func NodeInventoryFromProto(m proto.Message) (NodeInventory, error) {
	p, err := as[*inventoryv1.NodeInventory](m)
	if err != nil {
		return NodeInventory{}, fmt.Errorf("inventory: %w", err)
	}
	n, err := nodeInventoryFromProto(p)
	if err != nil {
		return NodeInventory{}, fmt.Errorf("inventory of %s/%s: %w", p.GetCluster(), p.GetNode(), err)
	}
	return n, nil
}

// DecodeNodeInventory decodes a received proxops.inventory.v1.NodeInventory.
func DecodeNodeInventory(ctx context.Context, decode DecodeFunc) (NodeInventory, error) {
	return decodeAs(ctx, decode, &inventoryv1.NodeInventory{}, func(p *inventoryv1.NodeInventory) (NodeInventory, error) { return NodeInventoryFromProto(p) })
}

// ObserveRequestToProto converts an observe request into a proxops.inventory.v1.ObserveRequest.
func ObserveRequestToProto(r ObserveRequest) proto.Message {
	p := &inventoryv1.ObserveRequest{Cluster: r.Cluster, Node: r.Node, RequestId: r.RequestID,
		ContentStorages: r.ContentStorages, AllContent: r.AllContent, ListNodes: r.ListNodes, BaseUrl: r.BaseURL,
		HaRules: r.HARules, ChecksOnly: r.ChecksOnly,
		FirewallVmids: vmidsToProto(r.FirewallVMIDs), AllFirewalls: r.AllFirewalls, ClusterFirewall: r.ClusterFirewall, Pools: r.Pools,
		BackupJobs: r.BackupJobs}
	for _, q := range r.MigrationChecks {
		t, _ := inventoryGuestTypeEnum.toProto(q.Type)
		p.MigrationChecks = append(p.MigrationChecks, &inventoryv1.MigrationQuery{Vmid: int64(q.VMID), Type: t, Target: q.Target})
	}
	return p
}

// ObserveRequestFromProto converts a proxops.inventory.v1.ObserveRequest.
func ObserveRequestFromProto(m proto.Message) (ObserveRequest, error) {
	p, err := as[*inventoryv1.ObserveRequest](m)
	if err != nil {
		return ObserveRequest{}, fmt.Errorf("observe request: %w", err)
	}
	r := ObserveRequest{Cluster: p.GetCluster(), Node: p.GetNode(), RequestID: p.GetRequestId(),
		ContentStorages: p.GetContentStorages(), AllContent: p.GetAllContent(), ListNodes: p.GetListNodes(),
		BaseURL: p.GetBaseUrl(), HARules: p.GetHaRules(), ChecksOnly: p.GetChecksOnly(),
		FirewallVMIDs: vmidsFromProto(p.GetFirewallVmids()), AllFirewalls: p.GetAllFirewalls(),
		ClusterFirewall: p.GetClusterFirewall(), Pools: p.GetPools(), BackupJobs: p.GetBackupJobs()}
	for _, q := range p.GetMigrationChecks() {
		t, err := inventoryGuestTypeEnum.fromProto(q.GetType())
		if err != nil {
			return ObserveRequest{}, fmt.Errorf("observe request: migration check of %d: %w", q.GetVmid(), err)
		}
		r.MigrationChecks = append(r.MigrationChecks, inventory.MigrationQuery{VMID: int(q.GetVmid()), Type: t, Target: q.GetTarget()})
	}
	return r, nil
}

// DecodeObserveRequest decodes a received proxops.inventory.v1.ObserveRequest.
func DecodeObserveRequest(ctx context.Context, decode DecodeFunc) (ObserveRequest, error) {
	return decodeAs(ctx, decode, &inventoryv1.ObserveRequest{}, func(p *inventoryv1.ObserveRequest) (ObserveRequest, error) { return ObserveRequestFromProto(p) })
}

func gapsToProto(gs []inventory.Gap) []*inventoryv1.Gap {
	out := make([]*inventoryv1.Gap, 0, len(gs))
	for _, g := range gs {
		out = append(out, &inventoryv1.Gap{Kind: g.Kind, Name: g.Name, Node: g.Node, Vmid: int64(g.VMID), Key: g.Key,
			Value: g.Value, Note: g.Note, Managed: g.Managed})
	}
	return out
}

func gapsFromProto(ps []*inventoryv1.Gap) []inventory.Gap {
	var out []inventory.Gap
	for _, p := range ps {
		out = append(out, inventory.Gap{Setting: inventory.Setting{Kind: p.GetKind(), Name: p.GetName(), Node: p.GetNode(),
			VMID: int(p.GetVmid()), Key: p.GetKey(), Value: p.GetValue()}, Note: p.GetNote(), Managed: p.GetManaged()})
	}
	return out
}

// GapReportToProto converts a gap report into a proxops.inventory.v1.GapReport.
func GapReportToProto(r inventory.GapReport) proto.Message {
	return &inventoryv1.GapReport{Cluster: r.Cluster, Gaps: gapsToProto(r.Gaps), SecurityWarnings: securityToProto(r.Security)}
}

func securityToProto(ws []inventory.SecurityWarning) []*inventoryv1.SecurityWarning {
	var out []*inventoryv1.SecurityWarning
	for _, w := range ws {
		out = append(out, &inventoryv1.SecurityWarning{Kind: w.Kind, Name: w.Name, Node: w.Node, Vmid: int64(w.VMID),
			Key: w.Key, Value: w.Value, Why: w.Why, Managed: w.Managed})
	}
	return out
}

func securityFromProto(ps []*inventoryv1.SecurityWarning) []inventory.SecurityWarning {
	var out []inventory.SecurityWarning
	for _, w := range ps {
		out = append(out, inventory.SecurityWarning{Setting: inventory.Setting{Kind: w.GetKind(), Name: w.GetName(),
			Node: w.GetNode(), VMID: int(w.GetVmid()), Key: w.GetKey(), Value: w.GetValue()}, Why: w.GetWhy(), Managed: w.GetManaged()})
	}
	return out
}

// GapReportFromProto converts a proxops.inventory.v1.GapReport.
func GapReportFromProto(m proto.Message) (inventory.GapReport, error) {
	p, err := as[*inventoryv1.GapReport](m)
	if err != nil {
		return inventory.GapReport{}, fmt.Errorf("gap report: %w", err)
	}
	return inventory.GapReport{Cluster: p.GetCluster(), Gaps: gapsFromProto(p.GetGaps()),
		Security: securityFromProto(p.GetSecurityWarnings())}, nil
}

// DecodeGapReport decodes a received proxops.inventory.v1.GapReport.
func DecodeGapReport(ctx context.Context, decode DecodeFunc) (inventory.GapReport, error) {
	return decodeAs(ctx, decode, &inventoryv1.GapReport{}, func(p *inventoryv1.GapReport) (inventory.GapReport, error) {
		return GapReportFromProto(p)
	})
}
