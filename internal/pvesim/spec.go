package pvesim

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// Spec seeds a simulated cluster. docs/simulator.md documents its YAML form.
type Spec struct {
	// Version is the pve-manager version GET /version reports (default 9.1.1).
	Version string `yaml:"version" json:"version"`
	// ClusterName is reported by /access/ticket and /cluster/status (default "sim").
	ClusterName string        `yaml:"cluster" json:"cluster"`
	Nodes       []NodeSpec    `yaml:"nodes" json:"nodes"`
	Storages    []StorageSpec `yaml:"storages" json:"storages"`
	// Bridges are the Linux bridges every node has (default vmbr0); a NIC on another bridge is refused.
	Bridges []string    `yaml:"bridges" json:"bridges"`
	Tokens  []TokenSpec `yaml:"tokens" json:"tokens"`
	Users   []UserSpec  `yaml:"users" json:"users"`
	Guests  []GuestSpec `yaml:"guests" json:"guests"`
	Files   []FileSpec  `yaml:"files" json:"files"`
	// TaskDurations maps a task type (qmcreate, qmstart, vzcreate, …) or "default" to how long the task
	// runs. Unset types use "default", which defaults to 20ms. Zero is allowed.
	TaskDurations map[string]Duration `yaml:"taskDurations" json:"taskDurations"`
	// AuthFailureDelay delays every 401 answer, as PVE does (about 3s there); default 0.
	AuthFailureDelay Duration `yaml:"authFailureDelay" json:"authFailureDelay"`
	// MACPrefix is the prefix of generated MAC addresses (datacenter.cfg mac_prefix; default BC:24:11).
	MACPrefix string `yaml:"macPrefix" json:"macPrefix"`
	// TagStyle is datacenter.cfg's tag-style property string, as GET /cluster/options reports it
	// ("case-sensitive=1" keeps the case of tags; default: PVE lower-cases them).
	TagStyle string `yaml:"tagStyle" json:"tagStyle"`
	// Seed makes generated MACs, UUIDs and ticket keys repeatable when non-zero. A guest's MACs and UUIDs
	// depend on the seed, its vmid and what was done to it, not on the order of requests for other guests.
	Seed int64 `yaml:"seed" json:"seed"`
	// LockTimeouts are the waits for a guest's config flock: "default" (PVE: 10s), "create" (5s) and
	// "clone" (1s). Unset entries keep PVE's values.
	LockTimeouts map[string]Duration `yaml:"lockTimeouts" json:"lockTimeouts"`
	// ResourcesLag is how long /cluster/resources shows a new guest with status "unknown" and no name
	// (PVE: up to ~10s, until pvestatd broadcasts); default 0.
	ResourcesLag Duration `yaml:"resourcesLag" json:"resourcesLag"`
	// HADelay is how long after a hastart/hastop task the HA manager changes the guest's state
	// (default 50ms).
	HADelay Duration `yaml:"haDelay" json:"haDelay"`
	// ShutdownWait caps how long a shutdown of a guest that ignores ACPI really waits before it times out
	// (the request's timeout, default 60s, is reported; the wait is the smaller of the two). Default 0:
	// time out at once.
	ShutdownWait Duration `yaml:"shutdownWait" json:"shutdownWait"`
	// Pools are the resource pools that exist (create/clone with pool= need one).
	Pools []string `yaml:"pools" json:"pools"`
	// Mirrors maps download URLs that are not on loopback to local files served in their place.
	Mirrors map[string]string `yaml:"mirrors" json:"mirrors"`
	// Faults configures fault injection (docs/simulator.md).
	Faults Faults `yaml:"faults" json:"faults"`
	// Clock, when set, is the time the simulator writes into the state it keeps (a VM's meta ctime, a
	// volume's ctime, a snapshot's snaptime), so that identical runs leave identical configs and digests.
	// Unset: the current time. Task timing, tickets and uptimes always follow the real clock.
	Clock time.Time `yaml:"clock" json:"clock"`
}

// NodeSpec is one cluster node.
type NodeSpec struct {
	Name string `yaml:"name" json:"name"`
	// Offline nodes are listed with status "offline" (default online).
	Offline bool `yaml:"offline" json:"offline"`
	CPUs    int  `yaml:"cpus" json:"cpus"`
	// MemoryBytes is the node's memory (default 64 GiB).
	MemoryBytes int64 `yaml:"memory" json:"memory"`
}

// StorageSpec is one storage of storage.cfg.
type StorageSpec struct {
	ID      string   `yaml:"id" json:"id"`
	Type    string   `yaml:"type" json:"type"` // dir, lvmthin, lvm, zfspool, rbd, nfs, cifs, btrfs, cephfs
	Content []string `yaml:"content" json:"content"`
	Shared  bool     `yaml:"shared" json:"shared"`
	// Nodes restricts the storage to these nodes (empty: all nodes).
	Nodes []string `yaml:"nodes" json:"nodes"`
	// TotalBytes is the capacity (default 1 TiB); allocations beyond it fail.
	TotalBytes int64 `yaml:"total" json:"total"`
	// Disabled storages are listed with enabled 0 and refuse allocations.
	Disabled bool `yaml:"disabled" json:"disabled"`
	// Path is the directory of a file-based storage (default /var/lib/vz for "local", /mnt/pve/<id> for
	// network storages, /mnt/<id> otherwise); it appears in task logs and error texts.
	Path string `yaml:"path" json:"path"`
}

// TokenSpec is an API token: ID user@realm!name and its secret.
type TokenSpec struct {
	ID     string `yaml:"id" json:"id"`
	Secret string `yaml:"secret" json:"secret"`
}

// UserSpec is a user who can log in for a ticket (user@realm and password).
type UserSpec struct {
	Name     string `yaml:"name" json:"name"`
	Password string `yaml:"password" json:"password"`
}

// GuestSpec is an existing guest, given as the raw text of its PVE config file (snapshot and pending
// sections included).
type GuestSpec struct {
	VMID    int    `yaml:"vmid" json:"vmid"`
	Type    string `yaml:"type" json:"type"` // qemu or lxc
	Node    string `yaml:"node" json:"node"`
	Running bool   `yaml:"running" json:"running"`
	Config  string `yaml:"config" json:"config"`
	// HA makes the guest an HA resource: power actions become hastart/hastop tasks and destroy needs purge.
	HA bool `yaml:"ha" json:"ha"`
	// IgnoreACPI makes the guest ignore shutdown requests, so a shutdown times out.
	IgnoreACPI bool `yaml:"ignoreACPI" json:"ignoreACPI"`
}

// FileSpec is a volume that exists on a storage (ISO, container template, import image, disk).
type FileSpec struct {
	VolID string `yaml:"volid" json:"volid"`
	// Node holds the file for node-local storages (default: every node the storage is on).
	Node string `yaml:"node" json:"node"`
	Size int64  `yaml:"size" json:"size"`
	// Path is a local file holding the volume's content (its size is then the file's size). Without it the
	// content is synthetic: deterministic bytes of Size length.
	Path string `yaml:"path" json:"path"`
}

// Duration is a time.Duration written as "250ms" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d column %d: invalid duration %q: %w", n.Line, n.Column, n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// UnmarshalJSON reads a Go duration string ("250ms") or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		v, err := time.ParseDuration(str)
		if err != nil {
			return fmt.Errorf("invalid duration %q: %w", str, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("invalid duration %s: want a string like \"250ms\"", b)
	}
	*d = Duration(n)
	return nil
}

// Default root@pam token and password of the default cluster (documented in docs/simulator.md).
const (
	DefaultRootTokenID     = "root@pam!proxops"
	DefaultRootTokenSecret = "8c5b7f0e-1d2a-4c3b-9e4f-5a6b7c8d9e0f"
	DefaultCITokenID       = "proxops@pve!ci"
	DefaultCITokenSecret   = "0f9e8d7c-6b5a-4f3e-8d2c-1b0a9f8e7d6c"
	DefaultRootPassword    = "proxops"
)

// DefaultSpec is the cluster `proxops sim` serves without --spec: nodes pve1..pve3, storages local (dir)
// and local-lvm (lvmthin), bridges vmbr0 and vmbr1, a root@pam token, a non-root token and root's password.
func DefaultSpec() Spec {
	return Spec{
		Nodes: []NodeSpec{{Name: "pve1"}, {Name: "pve2"}, {Name: "pve3"}},
		Storages: []StorageSpec{
			{ID: "local", Type: "dir", Content: []string{"iso", "vztmpl", "import", "images", "rootdir", "backup", "snippets"}},
			{ID: "local-lvm", Type: "lvmthin", Content: []string{"images", "rootdir"}},
		},
		Bridges: []string{"vmbr0", "vmbr1"},
		Tokens: []TokenSpec{
			{ID: DefaultRootTokenID, Secret: DefaultRootTokenSecret},
			{ID: DefaultCITokenID, Secret: DefaultCITokenSecret},
		},
		Users: []UserSpec{{Name: "root@pam", Password: DefaultRootPassword}},
	}
}

// LoadSpec reads a cluster spec from a YAML file.
func LoadSpec(path string) (Spec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, fmt.Errorf("read spec: %w", err)
	}
	return ParseSpec(path, raw)
}

// ParseSpec parses a cluster spec; name is used in error messages.
func ParseSpec(name string, raw []byte) (Spec, error) {
	var s Spec
	dec := yaml.NewDecoder(bytesReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}
