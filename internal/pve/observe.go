package pve

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvewire"
)

// ObserveRequest says what to read of a node.
type ObserveRequest struct {
	Cluster string
	Node    string
	// ContentStorages are the storages whose content to list (artifact content only: iso, vztmpl,
	// import). The caller asks a shared storage of one node only.
	ContentStorages []string
	// AllContent lists every storage of the node, every content type (adoption).
	AllContent bool
	// Pools reads the cluster's resource pools too (cluster-wide: one node of a cluster is asked).
	Pools bool
	// BackupJobs reads the cluster's backup jobs too (cluster-wide: one node of a cluster is asked).
	BackupJobs bool
	// FirewallVMIDs are the guests whose firewall to read, where they are on this node.
	FirewallVMIDs []int
	// AllFirewalls reads the firewall of every guest of the node (adoption).
	AllFirewalls bool
	// ClusterFirewall reads the cluster's security groups, IP sets and aliases as well.
	ClusterFirewall bool
	// HA reads the cluster's HA resources and rules too (cluster-wide: one node of a cluster is asked).
	HA bool
}

// artifactContent are the content types that hold the artifacts ProxOps manages.
var artifactContent = []string{"iso", "vztmpl", "import"}

// Observe reads one node with the fewest requests: the qemu listing (full=1, for qmpstatus), the lxc
// listing, the storage list, the cluster options (for the tag-style), when asked the pools (GET /pools and
// the cluster resources for their members), the backup jobs (GET /cluster/backup) and the HA resources and rules
// (haobserve.go), one GET …/pending per guest (current
// value, pending value and pending delete of every key, and the digest; bounded concurrency), for a
// container also GET …/config for its raw lxc.* keys (which …/pending leaves out), for a VM with a
// cloud-init drive also GET …/cloudinit (what the drive was generated with), and one content listing per
// requested storage; the firewall of the guests asked for (options, rules, IP sets and their entries,
// aliases) and, when asked, the cluster's firewall objects; for a guest carrying the ownership tag and a `parent`
// snapshot also GET …/snapshot.
// Secrets never leave: sshkeys becomes inventory.SSHKeysDigest of its keys and cipassword
// inventory.CIPasswordPresent.
func (c *Client) Observe(ctx context.Context, req ObserveRequest) (inventory.Node, error) {
	n := inventory.Node{Cluster: req.Cluster, Node: req.Node, PVEVersion: c.version}
	if !pveformat.ValidNodeName(req.Node) {
		return n, terminal("observe: invalid node name %q", req.Node)
	}
	qemu, err := c.listGuests(ctx, req.Node, inventory.QEMU)
	if err != nil {
		return n, err
	}
	lxc, err := c.listGuests(ctx, req.Node, inventory.LXC)
	if err != nil {
		return n, err
	}
	n.Guests = append(qemu, lxc...)
	if n.Storages, err = c.listStorages(ctx, req.Node); err != nil {
		return n, err
	}
	if n.TagsCaseSensitive, err = c.tagsCaseSensitive(ctx); err != nil {
		return n, err
	}
	if req.Pools {
		if n.Pools, err = c.observePools(ctx); err != nil {
			return n, err
		}
		n.PoolsObserved = true
	}
	if req.BackupJobs {
		if n.BackupJobs, err = c.observeBackupJobs(ctx); err != nil {
			return n, err
		}
		n.BackupJobsObserved = true
	}
	if req.HA {
		if n.HA, err = c.observeHA(ctx); err != nil {
			return n, err
		}
	}
	if err := c.readPending(ctx, req.Node, n.Guests); err != nil {
		return n, err
	}
	if err := c.observeFirewalls(ctx, req, &n); err != nil {
		return n, err
	}
	storages := req.ContentStorages
	if req.AllContent {
		storages = nil
		for _, s := range n.Storages {
			storages = append(storages, s.ID)
		}
	}
	slices.Sort(storages)
	for _, sid := range slices.Compact(storages) {
		st, ok := findStorage(n.Storages, sid)
		if !ok {
			continue // not on this node: its content is unknown here, so it is not listed
		}
		vols, listed, err := c.listContent(ctx, req.Node, st, req.AllContent)
		if err != nil {
			return n, err
		}
		n.Volumes = append(n.Volumes, vols...)
		if listed {
			n.ListedStorages = append(n.ListedStorages, sid)
		}
	}
	n.Sort()
	return n, nil
}

func findStorage(list []inventory.Storage, id string) (inventory.Storage, bool) {
	for _, s := range list {
		if s.ID == id {
			return s, true
		}
	}
	return inventory.Storage{}, false
}

// listGuests reads the qemu (full=1) or lxc listing of a node.
func (c *Client) listGuests(ctx context.Context, node string, typ inventory.GuestType) ([]inventory.Guest, error) {
	var q url.Values
	if typ == inventory.QEMU {
		q = url.Values{"full": {"1"}}
	}
	raw, err := c.get(ctx, "/nodes/{node}/"+string(typ), []string{node}, q)
	if err != nil {
		return nil, failed(err, "list %s guests on %s", typ, node)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, failed(err, "list %s guests on %s", typ, node)
	}
	out := make([]inventory.Guest, 0, len(items))
	for _, it := range items {
		vmid, ok := it.int("vmid")
		if !ok || vmid < 100 {
			return nil, terminal("list %s guests on %s: entry without a valid vmid (%q)", typ, node, it.str("vmid"))
		}
		g := inventory.Guest{VMID: int(vmid), Type: typ, Node: node, Name: it.str("name"), Status: it.str("status"),
			Template: it.flag("template"), Lock: it.str("lock"), Tags: it.str("tags")}
		if typ == inventory.QEMU {
			g.QMPStatus = it.str("qmpstatus")
		}
		g.HAManaged = it.str("hastate") != "" || haManaged(it)
		if g.HAManaged {
			g.HAState = it.str("hastate")
			if m, ok := it["ha"].(map[string]any); ok && g.HAState == "" {
				g.HAState = object(m).str("state")
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// HAResourceStates lists the HA resources (GET /cluster/ha/resources) with their requested state, by sid:
// which guests HA manages, which the node listings do not say.
func (c *Client) HAResourceStates(ctx context.Context) (map[string]string, error) {
	raw, err := c.get(ctx, "/cluster/ha/resources", nil, nil)
	if err != nil {
		return nil, failed(err, "list ha resources")
	}
	items, err := raw.objects()
	if err != nil {
		return nil, failed(err, "list ha resources")
	}
	states := map[string]string{}
	for _, it := range items {
		st := it.str("state")
		if st == "" {
			st = "started"
		}
		states[it.str("sid")] = st
	}
	return states, nil
}

// haManaged reads an "ha": {"managed": 1} member when a listing carries one.
func haManaged(o object) bool {
	if m, ok := o["ha"].(map[string]any); ok {
		return object(m).flag("managed")
	}
	return false
}

func (c *Client) listStorages(ctx context.Context, node string) ([]inventory.Storage, error) {
	raw, err := c.get(ctx, "/nodes/{node}/storage", []string{node}, nil)
	if err != nil {
		return nil, failed(err, "list storages on %s", node)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, failed(err, "list storages on %s", node)
	}
	out := make([]inventory.Storage, 0, len(items))
	for _, it := range items {
		s := inventory.Storage{ID: it.str("storage"), Type: it.str("type"), Shared: it.flag("shared"),
			Active: it.flag("active"), Enabled: !it.has("enabled") || it.flag("enabled")}
		if s.ID == "" {
			continue
		}
		for ct := range strings.SplitSeq(it.str("content"), ",") {
			if ct = strings.TrimSpace(ct); ct != "" {
				s.Content = append(s.Content, ct)
			}
		}
		slices.Sort(s.Content)
		s.Total, _ = it.int("total")
		s.Avail, _ = it.int("avail")
		out = append(out, s)
	}
	return out, nil
}

// readPending fills every guest's config from GET …/pending, with bounded concurrency.
func (c *Client) readPending(ctx context.Context, node string, guests []inventory.Guest) error {
	sem := make(chan struct{}, c.cfg.ObserveConcurrency)
	errs := make([]error, len(guests))
	var wg sync.WaitGroup
	for i := range guests {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			g := &guests[i]
			cfg, digest, err := c.pending(ctx, node, g.Type, g.VMID)
			if err != nil {
				errs[i] = err
				return
			}
			if g.Type == inventory.LXC {
				raw, err := c.rawKeys(ctx, node, g.VMID)
				if err != nil {
					errs[i] = err
					return
				}
				cfg = append(cfg, raw...)
			}
			g.Config, g.Digest = cfg, digest
			if _, hasParent := g.Get("parent"); hasParent && pveformat.Owned(g.Tags) {
				// Snapshots matter only on guests ProxOps manages, and a guest with snapshots names its
				// parent snapshot in its config.
				if g.Snapshots, err = c.ListSnapshots(ctx, node, g.Type, g.VMID); err != nil {
					errs[i] = err
					return
				}
			}
			if pvewire.HasCloudInitDrive(*g) {
				ci, err := c.cloudInit(ctx, node, g.VMID)
				if err != nil {
					errs[i] = err
					return
				}
				g.CloudInitDrive, g.CloudInit = true, ci
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// pending reads GET …/pending of one guest: its config entries (secrets replaced) and digest.
func (c *Client) pending(ctx context.Context, node string, typ inventory.GuestType, vmid int) ([]inventory.Entry, string, error) {
	raw, err := c.get(ctx, "/nodes/{node}/"+string(typ)+"/{vmid}/pending", []string{node, strconv.Itoa(vmid)}, nil)
	if err != nil {
		return nil, "", failed(err, "read %s %d config", typ, vmid)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, "", failed(err, "read %s %d config", typ, vmid)
	}
	var entries []inventory.Entry
	digest := ""
	for _, it := range items {
		key := it.str("key")
		if key == "" {
			continue
		}
		if key == "digest" {
			digest = it.str("value")
			continue
		}
		entries = append(entries, pendingEntry(it, key))
	}
	return entries, digest, nil
}

// pendingEntry is one item of PVE's pending-style answers (…/pending, …/cloudinit): the key's value, its
// pending value and whether it is to be deleted, secrets replaced.
func pendingEntry(it object, key string) inventory.Entry {
	e := inventory.Entry{Key: key}
	if it.has("value") {
		e.Value, e.HasValue = redactValue(key, it.str("value")), true
	}
	if it.has("pending") {
		e.Pending, e.HasPending = redactValue(key, it.str("pending")), true
	}
	if d, ok := it.int("delete"); ok {
		e.Delete = int(d)
	}
	return e
}

// cloudInit reads GET …/qemu/{vmid}/cloudinit (qemu-server cloudinit_pending): per cloud-init key, value is
// what the drive was generated with, pending a config value the drive does not hold yet (a key added since
// has only pending), delete=1 a key removed since. Secrets are replaced as in the config; PVE masks
// cipassword itself. Entries come sorted by key (PVE lists them in hash order).
func (c *Client) cloudInit(ctx context.Context, node string, vmid int) ([]inventory.Entry, error) {
	raw, err := c.get(ctx, "/nodes/{node}/qemu/{vmid}/cloudinit", []string{node, strconv.Itoa(vmid)}, nil)
	if err != nil {
		return nil, failed(err, "read qemu %d cloud-init state", vmid)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, failed(err, "read qemu %d cloud-init state", vmid)
	}
	var out []inventory.Entry
	for _, it := range items {
		key := it.str("key")
		if key == "" {
			continue
		}
		out = append(out, pendingEntry(it, key))
	}
	slices.SortStableFunc(out, func(a, b inventory.Entry) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// tagsCaseSensitive reads the cluster's tag-style (GET /cluster/options, datacenter.cfg): true when it says
// case-sensitive=1. Without the option (or without Sys.Audit, which hides it) PVE lower-cases tags.
func (c *Client) tagsCaseSensitive(ctx context.Context) (bool, error) {
	raw, err := c.getRaw(ctx, "/cluster/options", nil, nil)
	if err != nil {
		return false, failed(err, "read cluster options")
	}
	var opts map[string]any
	if err := decodeJSON(raw, &opts); err != nil {
		return false, failed(err, "read cluster options")
	}
	return TagStyleCaseSensitive(opts["tag-style"]), nil
}

// TagStyleCaseSensitive reads case-sensitive from a tag-style value: PVE returns the property string parsed
// into an object; a string form is accepted too.
func TagStyleCaseSensitive(v any) bool {
	switch ts := v.(type) {
	case map[string]any:
		return object(ts).flag("case-sensitive")
	case string:
		for tok := range strings.SplitSeq(ts, ",") {
			if k, val, ok := strings.Cut(strings.TrimSpace(tok), "="); ok && k == "case-sensitive" {
				return val == "1"
			}
		}
	}
	return false
}

// rawKeys reads the raw lxc.* keys of a container: GET …/lxc/{vmid}/config returns them as an array of
// [key, value] pairs under "lxc", and …/pending leaves them out (pve-guest-common GuestHelpers.pm
// config_with_pending_array skips every value that is a reference: "raw lxc.* keys are added as array
// ref"). They come back as config entries in file order; a key may repeat.
func (c *Client) rawKeys(ctx context.Context, node string, vmid int) ([]inventory.Entry, error) {
	raw, err := c.getRaw(ctx, "/nodes/{node}/lxc/{vmid}/config", []string{node, strconv.Itoa(vmid)}, nil)
	if err != nil {
		return nil, failed(err, "read lxc %d config", vmid)
	}
	var cfg struct {
		LXC [][]string `json:"lxc"`
	}
	if err := decodeJSON(raw, &cfg); err != nil {
		return nil, failed(err, "read lxc %d config", vmid)
	}
	var out []inventory.Entry
	for _, pair := range cfg.LXC {
		if len(pair) != 2 || !strings.HasPrefix(pair[0], "lxc.") {
			return nil, terminal("read lxc %d config: raw key %q is not a [lxc.key, value] pair", vmid, pair)
		}
		out = append(out, inventory.Entry{Key: pair[0], Value: pair[1], HasValue: true})
	}
	return out, nil
}

// redactValue replaces secret config values: sshkeys by the digest of its key set, cipassword by
// inventory.CIPasswordPresent. An sshkeys value that does not decode is still never passed on.
func redactValue(key, v string) string {
	switch key {
	case "sshkeys":
		keys, err := inventory.DecodeSSHKeys(v)
		if err != nil {
			return inventory.SSHKeysDigest([]string{"undecodable:" + v})
		}
		return inventory.SSHKeysDigest(keys)
	case "cipassword":
		if v == "" {
			return ""
		}
		return inventory.CIPasswordPresent
	}
	return v
}

// listContent lists one storage's content with one request. For artifact observes, the content filter is
// used when the storage holds exactly one artifact content type; otherwise one unfiltered listing is
// filtered here. listed is false when the storage can hold no artifact (nothing is asked).
func (c *Client) listContent(ctx context.Context, node string, st inventory.Storage, all bool) ([]inventory.Volume, bool, error) {
	var want []string
	if !all {
		for _, ct := range artifactContent {
			if slices.Contains(st.Content, ct) {
				want = append(want, ct)
			}
		}
		if len(want) == 0 {
			return nil, true, nil
		}
	}
	var q url.Values
	if len(want) == 1 {
		q = url.Values{"content": {want[0]}}
	}
	raw, err := c.get(ctx, "/nodes/{node}/storage/{storage}/content", []string{node, st.ID}, q)
	if err != nil {
		return nil, false, failed(err, "list content of storage %s on %s", st.ID, node)
	}
	items, err := raw.objects()
	if err != nil {
		return nil, false, failed(err, "list content of storage %s on %s", st.ID, node)
	}
	var out []inventory.Volume
	for _, it := range items {
		v := inventory.Volume{Storage: st.ID, Volid: it.str("volid"), Content: it.str("content"),
			Format: it.str("format"), Parent: it.str("parent")}
		if v.Volid == "" || (!all && !slices.Contains(want, v.Content)) {
			continue
		}
		v.Size, _ = it.int("size")
		if id, ok := it.int("vmid"); ok {
			v.VMID = int(id)
		}
		out = append(out, v)
	}
	return out, true, nil
}

// ReadGuest reads one guest's config with GET …/pending: config entries and digest, without a container's
// raw lxc.* keys (Observe reads those; no write needs them). ok is false when the guest does not exist on
// that node.
func (c *Client) ReadGuest(ctx context.Context, node string, typ inventory.GuestType, vmid int) (inventory.Guest, bool, error) {
	entries, digest, err := c.pending(ctx, node, typ, vmid)
	if err != nil {
		if isMissingConfig(err) {
			return inventory.Guest{}, false, nil
		}
		return inventory.Guest{}, false, err
	}
	g := inventory.Guest{VMID: vmid, Type: typ, Node: node, Config: entries, Digest: digest}
	g.Lock, _ = effective(g, "lock")
	g.Tags, _ = effective(g, "tags")
	if t, _ := effective(g, "template"); t == "1" {
		g.Template = true
	}
	return g, true, nil
}

// effective is a key's value once pending changes apply: the pending value, absent when a delete is
// pending, else the current value.
func effective(g inventory.Guest, key string) (string, bool) {
	for _, e := range g.Config {
		if e.Key != key {
			continue
		}
		switch {
		case e.Delete > 0:
			return "", false
		case e.HasPending:
			return e.Pending, true
		case e.HasValue:
			return e.Value, true
		}
	}
	return "", false
}

// isMissingConfig reports PVE's "Configuration file 'nodes/x/qemu-server/100.conf' does not exist".
func isMissingConfig(err error) bool {
	msg := messageOf(err)
	return strings.Contains(msg, "Configuration file") && strings.Contains(msg, "does not exist")
}

// String renders a request for logs.
func (r ObserveRequest) String() string {
	return fmt.Sprintf("%s/%s storages=%v all=%v", r.Cluster, r.Node, r.ContentStorages, r.AllContent)
}

// Nodes lists the nodes of the PVE cluster (GET /nodes), sorted: what a cluster with an empty node
// allowlist is observed on. A name that is not a valid node name is an error.
func (c *Client) Nodes(ctx context.Context) ([]string, error) {
	raw, err := c.get(ctx, "/nodes", nil, nil)
	if err != nil {
		return nil, failed(err, "list nodes")
	}
	items, err := raw.objects()
	if err != nil {
		return nil, failed(err, "list nodes")
	}
	var out []string
	for _, it := range items {
		n := it.str("node")
		if !pveformat.ValidNodeName(n) {
			return nil, terminal("list nodes: invalid node name %q", n)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
