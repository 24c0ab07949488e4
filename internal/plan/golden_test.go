package plan_test

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/testcorpus"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/cases")

// The JSON form of an observed cluster in a golden case: the executor's inventory, written compactly. A
// guest's config is PVE's "key: value" lines; pending values and deletes are listed the same way.
type observedJSON struct {
	Cluster string     `json:"cluster"`
	Nodes   []nodeJSON `json:"nodes"`
	// Pools are the cluster's resource pools, which every node reports.
	Pools []poolJSON `json:"pools"`
	// BackupJobs are the cluster's backup jobs, which every node reports.
	BackupJobs []backupJobJSON `json:"backup-jobs"`
	// HARules are the cluster's HA rules as the planner reads them before it plans a move through HA.
	HARules []haRuleJSON `json:"ha-rules"`
	// MigrationChecks are PVE's answers to GET …/migrate?target= for the moves of the plan.
	MigrationChecks []migrationCheckJSON `json:"migration-checks"`
}

// poolJSON is a resource pool: its id, its comment as PVE keeps it, the vmids of its guests.
type poolJSON struct {
	ID      string `json:"id"`
	Comment string `json:"comment"`
	Members []int  `json:"members"`
}

// backupJobJSON is a backup job: its id, its comment as PVE keeps it, its other options.
type backupJobJSON struct {
	ID      string            `json:"id"`
	Comment string            `json:"comment"`
	Options map[string]string `json:"options"`
}

type haRuleJSON struct {
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	Resources []string `json:"resources"`
	Nodes     []string `json:"nodes"`
	Strict    bool     `json:"strict"`
	Affinity  string   `json:"affinity"`
}

type migrationCheckJSON struct {
	VMID                int      `json:"vmid"`
	Type                string   `json:"type"`
	Target              string   `json:"target"`
	Error               string   `json:"error"`
	Running             bool     `json:"running"`
	LocalDisks          []string `json:"local-disks"`
	LocalCDROMs         []string `json:"local-cdroms"`
	LocalResources      []string `json:"local-resources"`
	Mapped              []string `json:"mapped-resources"`
	Known               bool     `json:"known"`
	Allowed             bool     `json:"allowed"`
	UnavailableStorages []string `json:"unavailable-storages"`
}

type nodeJSON struct {
	Node string `json:"node"`
	// Storages default to local (dir: iso, vztmpl, import, images, rootdir) and local-lvm (lvmthin), both
	// listed, when absent.
	Storages []storageJSON `json:"storages"`
	// Listed defaults to every storage.
	Listed  []string    `json:"listed"`
	Volumes []string    `json:"volumes"`
	Guests  []guestJSON `json:"guests"`
	// ClusterFirewall is the cluster's firewall objects as this node reported them (absent: not asked).
	ClusterFirewall *clusterFirewallJSON `json:"cluster-firewall"`
}

// firewallJSON is a guest's firewall: options and rules under PVE's keys, IP sets and aliases.
type firewallJSON struct {
	Options map[string]string   `json:"options"`
	Rules   []map[string]string `json:"rules"`
	// Digest defaults to a hash of the rules.
	Digest string `json:"digest"`
	IPSets []struct {
		Name    string `json:"name"`
		Comment string `json:"comment"`
		Entries []struct {
			CIDR    string `json:"cidr"`
			NoMatch bool   `json:"nomatch"`
			Comment string `json:"comment"`
		} `json:"entries"`
	} `json:"ipsets"`
	Aliases []inventory.FirewallAlias `json:"aliases"`
}

func (f *firewallJSON) firewall() *inventory.Firewall {
	if f == nil {
		return nil
	}
	out := &inventory.Firewall{Options: f.Options, Rules: f.Rules, RulesDigest: f.Digest, Aliases: f.Aliases}
	if out.Options == nil {
		out.Options = map[string]string{}
	}
	if out.RulesDigest == "" && len(f.Rules) > 0 {
		js, _ := json.Marshal(f.Rules)
		h := sha1.Sum(js)
		out.RulesDigest = hex.EncodeToString(h[:])
	}
	for _, s := range f.IPSets {
		set := inventory.FirewallIPSet{Name: s.Name, Comment: s.Comment}
		for _, e := range s.Entries {
			set.Entries = append(set.Entries, inventory.FirewallIPSetEntry{CIDR: e.CIDR, NoMatch: e.NoMatch, Comment: e.Comment})
		}
		out.IPSets = append(out.IPSets, set)
	}
	return out
}

// clusterFirewallJSON is the cluster's security groups (name → rules), IP set and alias names.
type clusterFirewallJSON struct {
	Groups  map[string][]map[string]string `json:"groups"`
	IPSets  []string                       `json:"ipsets"`
	Aliases []string                       `json:"aliases"`
}

func (c *clusterFirewallJSON) cluster() *inventory.ClusterFirewall {
	if c == nil {
		return nil
	}
	out := &inventory.ClusterFirewall{IPSets: c.IPSets, Aliases: c.Aliases}
	for _, n := range slices.Sorted(maps.Keys(c.Groups)) {
		out.Groups = append(out.Groups, inventory.FirewallGroup{Name: n, Rules: c.Groups[n]})
	}
	return out
}

type storageJSON struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Content string `json:"content"`
	Shared  bool   `json:"shared"`
}

type guestJSON struct {
	VMID int    `json:"vmid"`
	Type string `json:"type"`
	// Status defaults to running (stopped for a template).
	Status    string   `json:"status"`
	QMPStatus string   `json:"qmpstatus"`
	Template  bool     `json:"template"`
	Lock      string   `json:"lock"`
	Config    []string `json:"config"`
	Pending   []string `json:"pending"`
	Delete    []string `json:"delete"`
	// Digest defaults to a hash of the config lines.
	Digest string `json:"digest"`
	// Firewall is the guest's firewall, as an observe that asked for it reports it.
	Firewall *firewallJSON `json:"firewall"`
	// HA: the guest is an HA resource; HAState its requested state (default started).
	HA      bool   `json:"ha"`
	HAState string `json:"ha-state"`
	// Snapshots are the guest's snapshots (GET .../snapshot).
	Snapshots []snapshotJSON `json:"snapshots"`
}

// snapshotJSON is one snapshot of a guest; time is its snaptime (Unix seconds).
type snapshotJSON struct {
	Name  string `json:"name"`
	Time  int64  `json:"time"`
	State string `json:"state"`
}

// snapshotsJSON (snapshots.json) holds the ownership inventory's snapshot records and the planner's clock
// (Unix seconds).
type snapshotsJSON struct {
	Now     int64 `json:"now"`
	Records []struct {
		VMID int    `json:"vmid"`
		Name string `json:"name"`
	} `json:"records"`
}

// ownedJSON is an ownership record; a fingerprint "live" is the live guest's own. A record with a kind is
// a cluster object's (kind, id, ref).
type ownedJSON struct {
	Kind        string `json:"kind"`
	ID          string `json:"id"`
	VMID        int    `json:"vmid"`
	Ref         string `json:"ref"`
	Node        string `json:"node"`
	Fingerprint string `json:"fingerprint"`
	// Applied is the node ProxOps last put the guest on; absent: the record's node ("-": not known).
	Applied string `json:"applied"`
}

// secretsJSON stands for a cluster's SOPS file: ssh-keys by name, the password names that resolve.
type secretsJSON struct {
	SSHKeys   map[string]string `json:"ssh-keys"`
	Passwords []string          `json:"passwords"`
}

type fakeSecrets secretsJSON

func (s fakeSecrets) SSHKeysDigest(refs []string) (string, error) {
	var keys []string
	for _, r := range refs {
		k, ok := s.SSHKeys[strings.TrimPrefix(r, "cloud-init.ssh-keys.")]
		if !ok {
			return "", fmt.Errorf("%s is not in the secrets file", r)
		}
		keys = append(keys, k)
	}
	return inventory.SSHKeysDigest(keys), nil
}

func (s fakeSecrets) CheckPassword(ref string) error {
	if !slices.Contains(s.Passwords, strings.TrimPrefix(ref, "cloud-init.passwords.")) {
		return fmt.Errorf("%s is not in the secrets file", ref)
	}
	return nil
}

// haState is a golden guest's HA state: started for an HA resource unless the case says otherwise.
func haState(g guestJSON) string {
	if !g.HA || g.HAState != "" {
		return g.HAState
	}
	return "started"
}

func parseConfigLines(lines []string) ([][2]string, error) {
	var out [][2]string
	for _, l := range lines {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("config line %q has no colon", l)
		}
		out = append(out, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	return out, nil
}

// secretValue replaces what an executor never puts in an inventory: sshkeys become their digest, a
// cipassword becomes "present".
func secretValue(key, value string) string {
	switch key {
	case "sshkeys":
		if keys, err := inventory.DecodeSSHKeys(value); err == nil && !strings.HasPrefix(value, "sha256:") {
			return inventory.SSHKeysDigest(keys)
		}
	case "cipassword":
		return inventory.CIPasswordPresent
	}
	return value
}

func (g guestJSON) guest(node string) (inventory.Guest, error) {
	out := inventory.Guest{VMID: g.VMID, Type: inventory.GuestType(g.Type), Node: node, Status: g.Status, HAManaged: g.HA, HAState: haState(g),
		QMPStatus: g.QMPStatus, Template: g.Template, Lock: g.Lock, Digest: g.Digest, Firewall: g.Firewall.firewall()}
	if out.Type == "" {
		out.Type = inventory.QEMU
	}
	if out.Status == "" {
		out.Status = "running"
		if g.Template {
			out.Status = "stopped"
		}
	}
	if out.QMPStatus == "" && out.Type == inventory.QEMU {
		out.QMPStatus = out.Status
	}
	cur, err := parseConfigLines(g.Config)
	if err != nil {
		return out, err
	}
	pend, err := parseConfigLines(g.Pending)
	if err != nil {
		return out, err
	}
	idx := map[string]int{}
	for _, kv := range cur {
		idx[kv[0]] = len(out.Config)
		out.Config = append(out.Config, inventory.Entry{Key: kv[0], Value: secretValue(kv[0], kv[1]), HasValue: true})
	}
	for _, kv := range pend {
		i, ok := idx[kv[0]]
		if !ok {
			i = len(out.Config)
			idx[kv[0]] = i
			out.Config = append(out.Config, inventory.Entry{Key: kv[0]})
		}
		out.Config[i].Pending, out.Config[i].HasPending = secretValue(kv[0], kv[1]), true
	}
	for _, k := range g.Delete {
		i, ok := idx[k]
		if !ok {
			return out, fmt.Errorf("vmid %d: pending delete of %s, which is not set", g.VMID, k)
		}
		out.Config[i].Delete = 1
	}
	key := "name"
	if out.Type == inventory.LXC {
		key = "hostname"
	}
	out.Name, _ = out.Get(key)
	out.Tags, _ = out.Get("tags")
	for _, sn := range g.Snapshots {
		out.Snapshots = append(out.Snapshots, inventory.Snapshot{Name: sn.Name, Time: sn.Time, State: sn.State})
	}
	if out.Digest == "" {
		h := sha1.Sum([]byte(strings.Join(append(slices.Clone(g.Config), g.Pending...), "\n")))
		out.Digest = hex.EncodeToString(h[:])
	}
	return out, nil
}

func defaultStorages() []storageJSON {
	return []storageJSON{{ID: "local", Type: "dir", Content: "iso,vztmpl,import,images,rootdir,snippets"}, {ID: "local-lvm", Type: "lvmthin", Content: "images,rootdir"}}
}

func (o observedJSON) cluster(name string) (inventory.Cluster, error) {
	c := inventory.Cluster{Name: name, HARulesRead: o.HARules != nil}
	for _, r := range o.HARules {
		c.HARules = append(c.HARules, inventory.HARule{ID: r.ID, Type: r.Type, Resources: r.Resources, Nodes: r.Nodes,
			Strict: r.Strict, Affinity: r.Affinity})
	}
	for _, m := range o.MigrationChecks {
		t := inventory.GuestType(m.Type)
		if t == "" {
			t = inventory.QEMU
		}
		c.MigrationChecks = append(c.MigrationChecks, inventory.MigrationCheck{
			MigrationQuery: inventory.MigrationQuery{VMID: m.VMID, Type: t, Target: m.Target}, Error: m.Error,
			Running: m.Running, LocalDisks: m.LocalDisks, LocalCDROMs: m.LocalCDROMs, LocalResources: m.LocalResources,
			Mapped: m.Mapped, Known: m.Known, Allowed: m.Allowed, UnavailableStorages: m.UnavailableStorages})
	}
	for _, n := range o.Nodes {
		node := inventory.Node{Cluster: name, Node: n.Node, PVEVersion: "9.1.1", PoolsObserved: true, BackupJobsObserved: true,
			ClusterFirewall: n.ClusterFirewall.cluster()}
		for _, p := range o.Pools {
			node.Pools = append(node.Pools, inventory.Pool{ID: p.ID, Comment: p.Comment, Members: p.Members})
		}
		for _, j := range o.BackupJobs {
			node.BackupJobs = append(node.BackupJobs, inventory.BackupJob{ID: j.ID, Comment: j.Comment, Options: j.Options})
		}
		sts := n.Storages
		if sts == nil {
			sts = defaultStorages()
		}
		for _, s := range sts {
			node.Storages = append(node.Storages, inventory.Storage{ID: s.ID, Type: s.Type, Content: strings.Split(s.Content, ","),
				Shared: s.Shared, Active: true, Enabled: true})
		}
		if n.Listed == nil {
			for _, s := range sts {
				node.ListedStorages = append(node.ListedStorages, s.ID)
			}
		} else {
			node.ListedStorages = n.Listed
		}
		for _, v := range n.Volumes {
			st, rest, _ := strings.Cut(v, ":")
			content, _, _ := strings.Cut(rest, "/")
			node.Volumes = append(node.Volumes, inventory.Volume{Storage: st, Volid: v, Content: content})
		}
		for _, g := range n.Guests {
			gg, err := g.guest(n.Node)
			if err != nil {
				return c, err
			}
			node.Guests = append(node.Guests, gg)
		}
		node.Sort()
		c.Nodes = append(c.Nodes, node)
	}
	return c, nil
}

const defaultClusterConfig = `pve:
  clusters:
    lab:
      base-url: https://pve.example.invalid:8006
      nodes: [pve1, pve2, pve3]
`

// caseFS reads a case's repository and fills in what every case would repeat: a cluster "lab" on pve1-pve3
// when there is no clusters/ directory, and a resources.yaml listing every manifest when there is none.
//
// A case whose repository is a vendored corpus names it in a file "corpus" (upstream-examples).
func caseFS(dir string) (fs.FS, error) {
	m := fstest.MapFS{}
	root := filepath.Join(dir, "repo")
	if name, err := os.ReadFile(filepath.Join(dir, "corpus")); err == nil {
		root = testcorpus.Dir(strings.TrimSpace(string(name)))
	}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		m[filepath.ToSlash(rel)] = &fstest.MapFile{Data: data}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	hasClusters := false
	for name := range m {
		if strings.HasPrefix(name, "clusters/") {
			hasClusters = true
		}
	}
	if !hasClusters {
		m["clusters/lab/config.yaml"] = &fstest.MapFile{Data: []byte(defaultClusterConfig)}
		var list []string
		for name := range m {
			if k, _, ok := strings.Cut(name, "/"); ok {
				if _, isKind := manifest.KindOfRoot(k); isKind {
					list = append(list, "  - ../../"+name)
				}
			}
		}
		slices.Sort(list)
		m["clusters/lab/resources.yaml"] = &fstest.MapFile{Data: []byte("resources:\n" + strings.Join(list, "\n") + "\n")}
	}
	return m, nil
}

func readJSON(file string, v any) (bool, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false, fmt.Errorf("%s: %w", file, err)
	}
	return true, nil
}

// goldenCase is one directory of testdata/cases loaded into a plan input.
type goldenCase struct {
	name  string
	dir   string
	input plan.Input
}

func loadCase(t testing.TB, dir string) goldenCase {
	t.Helper()
	fsys, err := caseFS(dir)
	if err != nil {
		t.Fatal(err)
	}
	rp := repo.Load(fsys)
	var obs observedJSON
	if _, err := readJSON(filepath.Join(dir, "observed.json"), &obs); err != nil {
		t.Fatal(err)
	}
	name := obs.Cluster
	if name == "" {
		name = "lab"
	}
	cl := rp.Cluster(name)
	if cl == nil {
		t.Fatalf("%s: the repository has no cluster %s", dir, name)
	}
	if ds := rp.Diagnostics; ds.HasErrors() {
		cl.Diagnostics = append(cl.Diagnostics, ds...)
	}
	observed, err := obs.cluster(name)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	in := plan.Input{Cluster: cl, Observed: observed, Settings: plan.SettingsFor(rp.Config, cl.Config), Tree: "golden"}
	var owned []ownedJSON
	if _, err := readJSON(filepath.Join(dir, "owned.json"), &owned); err != nil {
		t.Fatal(err)
	}
	for _, o := range owned {
		if o.Kind != "" {
			in.OwnedObjects = append(in.OwnedObjects, plan.ObjectRecord{Kind: o.Kind, ID: o.ID, Ref: o.Ref})
			continue
		}
		fp := o.Fingerprint
		if fp == "live" {
			g, ok := observed.Guest(o.VMID)
			if !ok {
				t.Fatalf("%s: owned vmid %d has fingerprint live but no live guest", dir, o.VMID)
			}
			fp = inventory.Fingerprint(g)
		}
		applied := o.Applied
		switch applied {
		case "":
			applied = o.Node
		case "-":
			applied = ""
		}
		in.Owned = append(in.Owned, plan.Owned{VMID: o.VMID, Ref: o.Ref, Node: o.Node, Fingerprint: fp, AppliedNode: applied})
	}
	var snaps snapshotsJSON
	if _, err := readJSON(filepath.Join(dir, "snapshots.json"), &snaps); err != nil {
		t.Fatal(err)
	}
	for _, r := range snaps.Records {
		in.SnapshotRecords = append(in.SnapshotRecords, plan.SnapshotRecord{VMID: r.VMID, Name: r.Name})
	}
	if snaps.Now > 0 {
		in.Now = time.Unix(snaps.Now, 0).UTC()
	}
	var sec secretsJSON
	if ok, err := readJSON(filepath.Join(dir, "secrets.json"), &sec); err != nil {
		t.Fatal(err)
	} else if ok {
		in.Secrets = fakeSecrets(sec)
	}
	return goldenCase{name: filepath.Base(dir), dir: dir, input: in}
}

// outputs renders a case's plan (or rejection) as the golden text and JSON.
func outputs(t testing.TB, in plan.Input) (text, js []byte) {
	t.Helper()
	p, err := plan.Diff(in)
	var rej *plan.RejectedError
	switch {
	case errors.As(err, &rej):
		text = []byte(render.RejectionText(rej.Rejection))
		js, err = json.MarshalIndent(render.RejectionToJSON(rej.Rejection), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		js = append(js, '\n')
		return text, js
	case err != nil:
		t.Fatalf("diff: %v", err)
	}
	if _, err := plan.NewRun(p); err != nil {
		t.Fatalf("the plan cannot run: %v", err)
	}
	js, err = render.PlanJSONBytes(p)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(render.PlanText(p)), js
}

func caseDirs(t testing.TB) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "cases", "*"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

func TestGoldenPlans(t *testing.T) {
	dirs := caseDirs(t)
	if len(dirs) < 60 {
		t.Errorf("only %d golden cases; the planner's rules need at least 60", len(dirs))
	}
	for _, dir := range dirs {
		t.Run(path.Base(filepath.ToSlash(dir)), func(t *testing.T) {
			c := loadCase(t, dir)
			text, js := outputs(t, c.input)
			if p, err := plan.Diff(c.input); err == nil {
				checkPrunesWaitForEverything(t, p)
			}
			for _, f := range []struct {
				name string
				got  []byte
			}{{"plan.txt", text}, {"plan.json", js}} {
				file := filepath.Join(dir, f.name)
				if *update {
					if err := os.WriteFile(file, f.got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%v (run with -update to create it)", err)
				}
				if !bytes.Equal(want, f.got) {
					t.Errorf("%s differs from the golden file (run with -update to accept):\n--- got\n%s", file, f.got)
				}
			}
		})
	}
}
