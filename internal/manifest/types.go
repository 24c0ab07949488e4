package manifest

import (
	"github.com/proxops/proxops/internal/yamldecode"
)

// Resource is one manifest document. Its fields mirror the YAML (the yaml tags give the field names and
// the order a rendered manifest uses), so a Resource built in code renders with yaml.Marshal into a
// manifest that parses back to the same value.
//
// Optional booleans are *bool: nil means ProxOps does not own the setting, true and false are enforced.
// Optional numbers whose zero is meaningful are *int for the same reason.
type Resource struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       Kind     `yaml:"kind"`
	Metadata   Metadata `yaml:"metadata"`
	// Spec is *VMSpec (VM, TemplateVM), *LXCSpec (LXC, TemplateCT) or *ArtifactSpec (ISO, CTTemplate,
	// DiskImage). Parse always sets it for a known kind.
	Spec Spec `yaml:"spec"`

	// Source says where the document came from; empty for a resource built in code.
	Source Source `yaml:"-"`
}

// Source locates a parsed document.
type Source struct {
	// File is slash-separated and relative to the repository root.
	File string
	// Document is the 1-based index of the document in its file.
	Document int
	// Positions holds the position of every field that was present, by dotted path (spec.disks[0].size).
	Positions yamldecode.Fields
	// broken holds the fields whose value could not be decoded; validation does not report them again.
	broken map[string]bool
}

// Pos returns the position of a field path, or of its nearest present ancestor.
func (s Source) Pos(path string) yamldecode.Pos {
	return s.Positions.Lookup(path)
}

// Metadata identifies a resource.
type Metadata struct {
	// Name is the ProxOps identity within a kind: lower-case letters, digits and single hyphens, at most 63.
	Name string `yaml:"name"`
	// Namespace is accepted and unused (PVE has no such concept).
	Namespace string `yaml:"namespace,omitempty"`
	// Labels are informational.
	Labels map[string]string `yaml:"labels,omitempty"`
	// Annotations: only proxops/depends-on is interpreted.
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// AnnotationDependsOn lists extra dependencies as comma-separated Kind:name tokens.
const AnnotationDependsOn = "proxops/depends-on"

// Spec is the kind-specific part of a resource.
type Spec interface{ isSpec() }

func (*VMSpec) isSpec()            {}
func (*LXCSpec) isSpec()           {}
func (*ArtifactSpec) isSpec()      {}
func (*PoolSpec) isSpec()          {}
func (*HARuleSpec) isSpec()        {}
func (*SecurityGroupSpec) isSpec() {}
func (*IPSetSpec) isSpec()         {}
func (*AliasSpec) isSpec()         {}

// Ref returns the resource's Kind/name.
func (r *Resource) Ref() Ref { return Ref{Kind: r.Kind, Name: r.Metadata.Name} }

// VM returns the spec of a VM or TemplateVM, else nil.
func (r *Resource) VM() *VMSpec {
	s, _ := r.Spec.(*VMSpec)
	return s
}

// LXC returns the spec of an LXC or TemplateCT, else nil.
func (r *Resource) LXC() *LXCSpec {
	s, _ := r.Spec.(*LXCSpec)
	return s
}

// Artifact returns the spec of an ISO, CTTemplate or DiskImage, else nil.
func (r *Resource) Artifact() *ArtifactSpec {
	s, _ := r.Spec.(*ArtifactSpec)
	return s
}

// Pool returns the spec of a Pool, else nil.
func (r *Resource) Pool() *PoolSpec {
	s, _ := r.Spec.(*PoolSpec)
	return s
}

// guestSettings are the settings a VM's and a container's specs both declare, read by the accessors below
// and by the other guest accessors of the package.
type guestSettings struct {
	node      string
	vmid      int
	state     State
	pool      string
	backup    *bool
	firewall  *Firewall
	snapshots *Snapshots
	migrate   *Migrate
	ha        *GuestHA
}

// guest returns the settings of a guest's spec; zero for other kinds.
func (r *Resource) guest() guestSettings {
	switch s := r.Spec.(type) {
	case *VMSpec:
		return guestSettings{node: s.Node, vmid: s.VMID, state: s.State, pool: s.Pool, backup: s.Backup,
			firewall: s.Firewall, snapshots: s.Snapshots, migrate: s.Migrate, ha: s.HA}
	case *LXCSpec:
		return guestSettings{node: s.Node, vmid: s.VMID, state: s.State, pool: s.Pool, backup: s.Backup,
			firewall: s.Firewall, snapshots: s.Snapshots, migrate: s.Migrate, ha: s.HA}
	}
	return guestSettings{}
}

// GuestPool returns the resource pool a guest's spec.pool names ("" when it names none).
func (r *Resource) GuestPool() string { return r.guest().pool }

// Node returns the node a guest is placed on ("" for artifacts).
func (r *Resource) Node() string { return r.guest().node }

// VMID returns a guest's vmid (0 for artifacts).
func (r *Resource) VMID() int { return r.guest().vmid }

// State is a guest's desired power state.
type State string

// Power states.
const (
	StateStarted State = "started"
	StateStopped State = "stopped"
)

// VMSpec is the spec of a VM and of a TemplateVM.
type VMSpec struct {
	Node  string `yaml:"node"`
	VMID  int    `yaml:"vmid"`
	State State  `yaml:"state,omitempty"`
	// Clone names a TemplateVM this VM is full-cloned from (VM only; then Disks must be empty).
	Clone string `yaml:"clone,omitempty"`
	// PVEName is PVE's name; defaults to metadata.name.
	PVEName        string   `yaml:"pve-name,omitempty"`
	PVEDescription string   `yaml:"pve-description,omitempty"`
	Tags           []string `yaml:"tags,omitempty"`
	// Pool is the id of the resource pool the VM belongs to; empty: ProxOps does not own its membership.
	Pool string `yaml:"pool,omitempty"`
	// Backup false leaves the VM out of every owned backup job that selects it by pool or all (their
	// exclude list); absent or true: such jobs back it up.
	Backup        *bool             `yaml:"backup,omitempty"`
	CPU           VMCPU             `yaml:"cpu"`
	Memory        Quantity          `yaml:"memory,omitempty"`
	Disks         []Disk            `yaml:"disks,omitempty"`
	Networks      []NIC             `yaml:"networks,omitempty"`
	Hardware      *Hardware         `yaml:"hardware,omitempty"`
	Options       *VMOptions        `yaml:"options,omitempty"`
	CloudInitData *CloudInitData    `yaml:"cloud-init-data,omitempty"`
	Firewall      *Firewall         `yaml:"firewall,omitempty"`
	Snapshots     *Snapshots        `yaml:"snapshots,omitempty"`
	Extra         map[string]string `yaml:"extra,omitempty"`
	// Migrate says how the VM moves when spec.node changes.
	Migrate *Migrate `yaml:"migrate,omitempty"`
	// HA makes the VM an HA resource (vm:<vmid>); absent: ProxOps does not make it one.
	HA *GuestHA `yaml:"ha,omitempty"`
}

// VMCPU is a VM's processor.
type VMCPU struct {
	Type  string `yaml:"type"`
	Cores int    `yaml:"cores,omitempty"`
	// Flags are declarative only: never sent to PVE.
	Flags []string `yaml:"flags,omitempty"`
}

// Disk is one VM disk.
type Disk struct {
	Storage string `yaml:"storage"`
	// Size is required unless Image is set, and must be empty when it is.
	Size Quantity `yaml:"size,omitempty"`
	// Image names a DiskImage the disk is seeded from at create.
	Image string `yaml:"image,omitempty"`
	// Interface is the PVE slot (scsiN, virtioN, sataN, ideN); defaults to scsi<index>.
	Interface string `yaml:"interface,omitempty"`
	// Controller sets the VM-wide scsihw (the first disk that declares one wins).
	Controller string `yaml:"controller,omitempty"`
	IOThread   *bool  `yaml:"iothread,omitempty"`
	// Discard is ignore or on.
	Discard string `yaml:"discard,omitempty"`
	// SSD only on scsi, sata and ide slots.
	SSD *bool `yaml:"ssd,omitempty"`
	// AIO is native, threads or io_uring.
	AIO string `yaml:"aio,omitempty"`
}

// NIC is one VM network device.
type NIC struct {
	// Model defaults to virtio.
	Model  string `yaml:"model,omitempty"`
	Bridge string `yaml:"bridge"`
	// MAC pins the address; absent lets PVE choose.
	MAC string `yaml:"mac,omitempty"`
	// VLAN tag 1-4094; 0 means explicitly untagged; nil is not owned.
	VLAN *int `yaml:"vlan,omitempty"`
	// RateLimit in MB/s; 0 means explicitly unlimited; nil is not owned.
	RateLimit *int  `yaml:"rate-limit,omitempty"`
	Firewall  *bool `yaml:"firewall,omitempty"`
	// Slot is netN; defaults to net<index>.
	Slot string `yaml:"slot,omitempty"`
}

// Hardware is a VM's machine-level settings.
type Hardware struct {
	// Machine is i440fx or q35.
	Machine string `yaml:"machine,omitempty"`
	// BIOS is seabios or ovmf.
	BIOS string `yaml:"bios,omitempty"`
	// Display is PVE's vga.
	Display    string          `yaml:"display,omitempty"`
	Sockets    int             `yaml:"sockets,omitempty"`
	NUMA       *bool           `yaml:"numa,omitempty"`
	Serial0    string          `yaml:"serial0,omitempty"`
	TPM        *TPM            `yaml:"tpm,omitempty"`
	EFIDisk    *EFIDisk        `yaml:"efi-disk,omitempty"`
	CloudInit  *CloudInitDrive `yaml:"cloud-init,omitempty"`
	CDROM      *CDROM          `yaml:"cdrom,omitempty"`
	PCIDevices []PCIDevice     `yaml:"pci-devices,omitempty"`
}

// TPM is a VM's TPM state volume (PVE tpmstate0).
type TPM struct {
	// Version is v1.2 or v2.0 (default).
	Version string `yaml:"version,omitempty"`
	// Storage defaults to the EFI disk's storage, else the first disk's.
	Storage string `yaml:"storage,omitempty"`
}

// EFIDisk is a VM's EFI vars volume (PVE efidisk0).
type EFIDisk struct {
	Storage string `yaml:"storage"`
	// Size defaults to 4MiB.
	Size Quantity `yaml:"size,omitempty"`
	// Template is PVE's efitype: 2m or 4m.
	Template string `yaml:"template,omitempty"`
	// SecureBoot is enabled or disabled (PVE pre-enrolled-keys).
	SecureBoot string `yaml:"secure-boot,omitempty"`
}

// CloudInitDrive is a VM's cloud-init drive on ide2.
type CloudInitDrive struct {
	Enabled *bool  `yaml:"enabled,omitempty"`
	Storage string `yaml:"storage,omitempty"`
	// Size defaults to 4M and is passed to PVE as written.
	Size Quantity `yaml:"size,omitempty"`
}

// CDROM is a VM's CD/DVD drive: a block present means ProxOps owns the slot.
type CDROM struct {
	// ISO names an ISO manifest, or is "none" to keep the drive empty.
	ISO string `yaml:"iso"`
	// Media is cdrom (default) or disk.
	Media string `yaml:"media,omitempty"`
}

// CDROMNone is the CDROM.ISO value that keeps the drive empty.
const CDROMNone = "none"

// PCIDevice is one host PCI passthrough device.
type PCIDevice struct {
	// Slot is hostpciN.
	Slot string `yaml:"slot"`
	// Device is the PCI address, [domain:]bus:slot[.function].
	Device string `yaml:"device"`
	PCIe   *bool  `yaml:"pcie,omitempty"`
}

// VMOptions are VM options.
type VMOptions struct {
	OnBoot     *bool    `yaml:"onboot,omitempty"`
	Startup    string   `yaml:"startup,omitempty"`
	Protection *bool    `yaml:"protection,omitempty"`
	Agent      *bool    `yaml:"agent,omitempty"`
	ACPI       *bool    `yaml:"acpi,omitempty"`
	Tablet     *bool    `yaml:"tablet,omitempty"`
	Hotplug    []string `yaml:"hotplug,omitempty"`
	BootOrder  []string `yaml:"boot-order,omitempty"`
	NestedVirt *bool    `yaml:"nested-virt,omitempty"`
	Hidden     *bool    `yaml:"hidden,omitempty"`
}

// CloudInitData is the cloud-init configuration of a VM (PVE ciuser, sshkeys, cipassword, nameserver,
// searchdomain, ipconfigN). Empty fields are not owned.
type CloudInitData struct {
	CIUser string `yaml:"ci-user,omitempty"`
	// SSHKeys are public key lines; ["*"] means PVE owns the keys.
	SSHKeys []string `yaml:"ssh-keys,omitempty"`
	// SSHKeyRefs name secrets cloud-init.ssh-keys.<name>; exclusive with SSHKeys.
	SSHKeyRefs []string `yaml:"ssh-key-refs,omitempty"`
	// CIPasswordRef names a secret cloud-init.passwords.<name>.
	CIPasswordRef string     `yaml:"ci-password-ref,omitempty"`
	Nameservers   []string   `yaml:"nameservers,omitempty"`
	SearchDomains []string   `yaml:"search-domains,omitempty"`
	IPConfigs     []IPConfig `yaml:"ipconfigs,omitempty"`
}

// SSHKeysPVEOwned is the single ssh-keys entry that leaves the keys to PVE.
const SSHKeysPVEOwned = "*"

// IPConfig is one static cloud-init address (PVE ipconfigN).
type IPConfig struct {
	// NIC is the N of ipconfigN.
	NIC int `yaml:"nic"`
	// IP is an address in CIDR form.
	IP      string `yaml:"ip"`
	Gateway string `yaml:"gateway,omitempty"`
}

// LXCSpec is the spec of an LXC and of a TemplateCT.
type LXCSpec struct {
	Node  string `yaml:"node"`
	VMID  int    `yaml:"vmid"`
	State State  `yaml:"state,omitempty"`
	// Template names the CTTemplate the container is created from: a create parameter only (PVE keeps no
	// record of it), required to create the container, never compared with an existing one.
	Template       string   `yaml:"template,omitempty"`
	PVEDescription string   `yaml:"pve-description,omitempty"`
	Tags           []string `yaml:"tags,omitempty"`
	// Pool is the id of the resource pool the container belongs to; empty: ProxOps does not own its membership.
	Pool string `yaml:"pool,omitempty"`
	// Backup false leaves the container out of every owned backup job that selects it by pool or all.
	Backup      *bool             `yaml:"backup,omitempty"`
	Memory      Quantity          `yaml:"memory,omitempty"`
	Swap        Quantity          `yaml:"swap,omitempty"`
	CPU         LXCCPU            `yaml:"cpu,omitempty"`
	Root        RootFS            `yaml:"root"`
	MountPoints []MountPoint      `yaml:"mount-points,omitempty"`
	BindMounts  []BindMount       `yaml:"bind-mounts,omitempty"`
	Networks    []LXCNIC          `yaml:"networks,omitempty"`
	DNS         *DNS              `yaml:"dns,omitempty"`
	Arch        string            `yaml:"arch,omitempty"`
	Options     *LXCOptions       `yaml:"options,omitempty"`
	Firewall    *Firewall         `yaml:"firewall,omitempty"`
	Snapshots   *Snapshots        `yaml:"snapshots,omitempty"`
	Extra       map[string]string `yaml:"extra,omitempty"`
	// Migrate says how the container moves when spec.node changes.
	Migrate *Migrate `yaml:"migrate,omitempty"`
	// HA makes the container an HA resource (ct:<vmid>); absent: ProxOps does not make it one.
	HA *GuestHA `yaml:"ha,omitempty"`
}

// Snapshots is a guest's safety-snapshot policy, overriding the cluster's (reconcile.snapshots).
type Snapshots struct {
	// Policy is disruptive (before a change that restarts the guest, changes its disks or moves it), always
	// (before any change) or never; empty: the cluster's.
	Policy string `yaml:"policy,omitempty"`
	// VMState saves a running VM's RAM with the snapshot (VM only).
	VMState bool `yaml:"vmstate,omitempty"`
}

// Snapshot policies (reconcile.snapshots, spec.snapshots.policy).
const (
	SnapshotsDisruptive = "disruptive"
	SnapshotsAlways     = "always"
	SnapshotsNever      = "never"
)

// GuestSnapshots returns a guest's snapshot policy, nil when it declares none.
func (r *Resource) GuestSnapshots() *Snapshots { return r.guest().snapshots }

// LXCCPU is a container's processor.
type LXCCPU struct {
	Cores int `yaml:"cores,omitempty"`
	// Units is declarative only: never sent to PVE.
	Units int `yaml:"units,omitempty"`
}

// RootFS is a container's root volume.
type RootFS struct {
	Storage string   `yaml:"storage"`
	Size    Quantity `yaml:"size,omitempty"`
}

// MountPoint is an allocated container volume (mpN).
type MountPoint struct {
	Storage    string   `yaml:"storage"`
	Size       Quantity `yaml:"size,omitempty"`
	MountPoint string   `yaml:"mount-point,omitempty"`
	// Slot is mpN; defaults to mp<index>.
	Slot    string        `yaml:"slot,omitempty"`
	Options *MountOptions `yaml:"options,omitempty"`
}

// MountOptions are a mount point's options.
type MountOptions struct {
	ReadOnly     *bool  `yaml:"read-only,omitempty"`
	Backup       *bool  `yaml:"backup,omitempty"`
	ACL          *bool  `yaml:"acl,omitempty"`
	Quota        *bool  `yaml:"quota,omitempty"`
	Shared       *bool  `yaml:"shared,omitempty"`
	MountOptions string `yaml:"mount-options,omitempty"`
}

// BindMount is a host directory mounted into a container (mpN with a host path).
type BindMount struct {
	HostPath   string `yaml:"host-path"`
	MountPoint string `yaml:"mount-point"`
	// Slot is mpN; defaults to mp<len(mount-points)+index>.
	Slot     string `yaml:"slot,omitempty"`
	ReadOnly *bool  `yaml:"read-only,omitempty"`
}

// LXCNIC is one container network interface.
type LXCNIC struct {
	Bridge string `yaml:"bridge"`
	// Iface is the name inside the container; defaults to the slot name.
	Iface string `yaml:"iface,omitempty"`
	// Type is never compared (PVE uses veth).
	Type string `yaml:"type,omitempty"`
	// Tag is the VLAN tag; 0 means explicitly untagged; nil is not owned.
	Tag    *int   `yaml:"tag,omitempty"`
	HWAddr string `yaml:"hwaddr,omitempty"`
	// RateLimit in MB/s; nil is not owned.
	RateLimit *int  `yaml:"rate-limit,omitempty"`
	Firewall  *bool `yaml:"firewall,omitempty"`
	// IP is a CIDR address, dhcp or manual.
	IP string `yaml:"ip,omitempty"`
	GW string `yaml:"gw,omitempty"`
	// Slot is netN; defaults to net<index>.
	Slot string `yaml:"slot,omitempty"`
}

// DNS is a container's name resolution.
type DNS struct {
	// Hostname defaults to metadata.name.
	Hostname    string   `yaml:"hostname,omitempty"`
	Nameservers []string `yaml:"nameservers,omitempty"`
	Domain      string   `yaml:"domain,omitempty"`
}

// LXCOptions are container options.
type LXCOptions struct {
	// Unprivileged is applied at create only.
	Unprivileged *bool  `yaml:"unprivileged,omitempty"`
	Protection   *bool  `yaml:"protection,omitempty"`
	OnBoot       *bool  `yaml:"onboot,omitempty"`
	Console      *bool  `yaml:"console,omitempty"`
	Nesting      *bool  `yaml:"nesting,omitempty"`
	Keyctl       *bool  `yaml:"keyctl,omitempty"`
	Fuse         *bool  `yaml:"fuse,omitempty"`
	Startup      string `yaml:"startup,omitempty"`
	// TTYs is accepted and never sent.
	TTYs int `yaml:"ttys,omitempty"`
}

// ArtifactSpec is the spec of an ISO, a CTTemplate and a DiskImage: a file ProxOps downloads onto a storage
// of every listed node.
type ArtifactSpec struct {
	Nodes []string `yaml:"nodes,omitempty"`
	// Node is the older single-node form, used when Nodes is empty.
	Node     string    `yaml:"node,omitempty"`
	Storage  string    `yaml:"storage"`
	Filename string    `yaml:"filename"`
	URL      string    `yaml:"url"`
	Checksum *Checksum `yaml:"checksum,omitempty"`
}

// PoolSpec is the spec of a Pool: a PVE resource pool.
type PoolSpec struct {
	// ID is PVE's pool id; defaults to metadata.name. A nested pool is parent/child (PVE 9, at most three
	// levels); its parent must be declared or live.
	ID string `yaml:"id,omitempty"`
	// Comment is the pool's comment without the ownership marker, which ProxOps appends.
	Comment string `yaml:"comment,omitempty"`
}

// Checksum pins a download's digest.
type Checksum struct {
	// Algorithm is sha256, sha1, sha512 or md5.
	Algorithm string `yaml:"algorithm"`
	Value     string `yaml:"value"`
}

// Bool returns a pointer to b, for building specs in code.
func Bool(b bool) *bool { return &b }

// Int returns a pointer to i, for building specs in code.
func Int(i int) *int { return &i }

// IsTrue reports whether an optional boolean is set to true.
func IsTrue(b *bool) bool { return b != nil && *b }
