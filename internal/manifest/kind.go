package manifest

import (
	"cmp"
	"strings"
)

// APIVersion is the only manifest apiVersion ProxOps reads.
const APIVersion = "proxops/v1alpha1"

// Kind is a canonical manifest kind.
type Kind string

// The kinds.
const (
	KindVM         Kind = "VM"
	KindLXC        Kind = "LXC"
	KindTemplateVM Kind = "TemplateVM"
	KindTemplateCT Kind = "TemplateCT"
	KindISO        Kind = "ISO"
	KindCTTemplate Kind = "CTTemplate"
	KindDiskImage  Kind = "DiskImage"
	// KindPool is a resource pool: a cluster object, on no node and without a vmid.
	KindPool Kind = "Pool"
	// KindBackupJob is a scheduled backup job of the cluster: a cluster object too.
	KindBackupJob Kind = "BackupJob"
	// KindHARule is a PVE 9 HA rule (node-affinity or resource-affinity): a cluster object like Pool.
	KindHARule Kind = "HARule"
	// KindSecurityGroup, KindIPSet and KindAlias are the cluster's firewall objects
	// (/cluster/firewall/groups, /ipset, /aliases): cluster objects too.
	KindSecurityGroup Kind = "SecurityGroup"
	KindIPSet         Kind = "IPSet"
	KindAlias         Kind = "Alias"
)

// Kinds lists every kind in documentation order.
var Kinds = []Kind{KindVM, KindLXC, KindTemplateVM, KindTemplateCT, KindISO, KindCTTemplate, KindDiskImage, KindPool,
	KindHARule, KindBackupJob, KindSecurityGroup, KindIPSet, KindAlias}

// kindAliases maps the lower-cased spellings accepted in `kind:` to the canonical kind.
var kindAliases = map[string]Kind{
	"vm": KindVM, "lxc": KindLXC, "templatevm": KindTemplateVM, "templatect": KindTemplateCT,
	"iso": KindISO, "cttemplate": KindCTTemplate, "diskimage": KindDiskImage,
	"ctt": KindCTTemplate, "disk": KindDiskImage, "tvm": KindTemplateVM, "template": KindTemplateVM,
	"tct": KindTemplateCT, "pool": KindPool, "harule": KindHARule, "backupjob": KindBackupJob, "securitygroup": KindSecurityGroup,
	"security-group": KindSecurityGroup, "ipset": KindIPSet, "alias": KindAlias,
}

// ParseKind returns the canonical kind for a spelling: case-insensitive, with the aliases CTT, DISK, TVM,
// TEMPLATE and TCT (and security-group for SecurityGroup).
func ParseKind(s string) (Kind, bool) {
	k, ok := kindAliases[strings.ToLower(strings.TrimSpace(s))]
	return k, ok
}

// Root is the directory under the repository root that holds manifests of this kind.
func (k Kind) Root() string {
	switch k {
	case KindVM:
		return "vm"
	case KindLXC:
		return "lxc"
	case KindTemplateVM:
		return "templatevm"
	case KindTemplateCT:
		return "templatect"
	case KindISO:
		return "iso"
	case KindCTTemplate:
		return "ctt"
	case KindDiskImage:
		return "diskimage"
	case KindPool:
		return "pool"
	case KindBackupJob:
		return "backup"
	case KindHARule:
		return "ha"
	case KindSecurityGroup:
		return "securitygroup"
	case KindIPSet:
		return "ipset"
	case KindAlias:
		return "alias"
	default:
		return ""
	}
}

// KindRoots lists the kind root directories in sorted order.
var KindRoots = []string{"alias", "backup", "ctt", "diskimage", "ha", "ipset", "iso", "lxc", "pool", "securitygroup",
	"templatect", "templatevm", "vm"}

// KindOfRoot returns the kind whose manifests live under a kind root directory.
func KindOfRoot(dir string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Root() == dir {
			return k, true
		}
	}
	return "", false
}

// IsGuest reports whether the kind is a PVE guest with a vmid (VM, LXC, TemplateVM, TemplateCT).
func (k Kind) IsGuest() bool {
	return k == KindVM || k == KindLXC || k == KindTemplateVM || k == KindTemplateCT
}

// IsQEMU reports whether the kind is a qemu guest (VM, TemplateVM).
func (k Kind) IsQEMU() bool { return k == KindVM || k == KindTemplateVM }

// IsContainer reports whether the kind is an lxc guest (LXC, TemplateCT).
func (k Kind) IsContainer() bool { return k == KindLXC || k == KindTemplateCT }

// IsTemplate reports whether the kind is a guest promoted to a PVE template.
func (k Kind) IsTemplate() bool { return k == KindTemplateVM || k == KindTemplateCT }

// IsArtifact reports whether the kind is a storage artifact (ISO, CTTemplate, DiskImage).
func (k Kind) IsArtifact() bool { return k == KindISO || k == KindCTTemplate || k == KindDiskImage }

// IsClusterObject reports whether the kind is a cluster object: one that belongs to no node, has no vmid and
// that PVE cannot tag (Pool, HARule, BackupJob, SecurityGroup, IPSet, Alias). Its operations run on the cluster's
// work queue, and ProxOps owns one only when its comment carries the ownership marker and the ownership inventory
// records it by kind and id.
func (k Kind) IsClusterObject() bool {
	return k == KindPool || k == KindHARule || k == KindBackupJob || k.IsFirewallObject()
}

// IsFirewallObject reports whether the kind is one of the cluster's firewall objects (SecurityGroup, IPSet,
// Alias).
func (k Kind) IsFirewallObject() bool {
	return k == KindSecurityGroup || k == KindIPSet || k == KindAlias
}

// ObjectKind is the ownership inventory's name of a cluster-object kind (pool, harule, backupjob, securitygroup,
// ipset, alias: lower-case letters only); "" for other kinds.
func (k Kind) ObjectKind() string {
	switch k {
	case KindPool:
		return "pool"
	case KindBackupJob:
		return "backupjob"
	case KindHARule:
		return "harule"
	case KindSecurityGroup:
		return "securitygroup"
	case KindIPSet:
		return "ipset"
	case KindAlias:
		return "alias"
	default:
		return ""
	}
}

// newSpec returns the empty spec a kind's manifests decode into, with the words a diagnostic names it by;
// nil for an unknown kind.
func newSpec(k Kind) (Spec, string) {
	switch {
	case k.IsQEMU():
		return &VMSpec{}, "a VM spec"
	case k.IsContainer():
		return &LXCSpec{}, "a container spec"
	case k.IsArtifact():
		return &ArtifactSpec{}, "an artifact spec"
	case k == KindPool:
		return &PoolSpec{}, "a pool spec"
	case k == KindBackupJob:
		return &BackupJobSpec{}, "a backup job spec"
	case k == KindHARule:
		return &HARuleSpec{}, "an HA rule spec"
	case k == KindSecurityGroup:
		return &SecurityGroupSpec{}, "a security group spec"
	case k == KindIPSet:
		return &IPSetSpec{}, "an IP set spec"
	case k == KindAlias:
		return &AliasSpec{}, "an alias spec"
	}
	return nil, ""
}

// ObjectKindHAResource is the ownership inventory's kind of a guest's HA resource (spec.ha), which no kind of
// its own declares.
const ObjectKindHAResource = "haresource"

// Content is the PVE storage content type of an artifact kind (iso, vztmpl, import).
func (k Kind) Content() string {
	switch k {
	case KindISO:
		return "iso"
	case KindCTTemplate:
		return "vztmpl"
	case KindDiskImage:
		return "import"
	default:
		return ""
	}
}

// Ref names a resource: its canonical kind and metadata.name.
type Ref struct {
	Kind Kind
	Name string
}

// String renders Kind/name.
func (r Ref) String() string { return string(r.Kind) + "/" + r.Name }

// IsZero reports whether the ref is empty.
func (r Ref) IsZero() bool { return r.Kind == "" && r.Name == "" }

// CompareRefs orders refs by kind, then name (byte order).
func CompareRefs(a, b Ref) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// ParseRef parses Kind/name (kind spelled any accepted way).
func ParseRef(s string) (Ref, bool) {
	k, name, ok := strings.Cut(s, "/")
	if !ok {
		return Ref{}, false
	}
	kind, ok := ParseKind(k)
	if !ok || name == "" {
		return Ref{}, false
	}
	return Ref{Kind: kind, Name: name}, true
}
