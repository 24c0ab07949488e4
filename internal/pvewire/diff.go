package pvewire

import (
	"maps"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// Value is one PVE parameter. A secret is never carried: SecretRefs name the secrets (such as
// cloud-init.ssh-keys.main) the executor resolves and writes in place of Value.
type Value struct {
	Key        string
	Value      string
	SecretRefs []string
}

// Values is an ordered parameter list.
type Values []Value

// Get returns the value of a key.
func (vs Values) Get(key string) (Value, bool) {
	for _, v := range vs {
		if v.Key == key {
			return v, true
		}
	}
	return Value{}, false
}

// Has reports whether a key is in the list.
func (vs Values) Has(key string) bool {
	_, ok := vs.Get(key)
	return ok
}

// Keys returns the keys in order.
func (vs Values) Keys() []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.Key
	}
	return out
}

// Display is how a value is shown to a person: the value, or the secret references it stands for.
func (v Value) Display() string {
	if len(v.SecretRefs) > 0 {
		return strings.Join(v.SecretRefs, "+")
	}
	return v.Value
}

// Lookup finds a resource of the same cluster by reference (the artifacts and templates a guest uses).
type Lookup func(manifest.Ref) *manifest.Resource

// Desired is a guest's desired state as the wire translation needs it.
type Desired struct {
	// Resource is the resolved manifest (manifest.Resolve).
	Resource *manifest.Resource
	// Lookup resolves the ISO, DiskImage, CTTemplate and TemplateVM references.
	Lookup Lookup
	// SSHKeysDigest is inventory.SSHKeysDigest of the desired keys when they come from secret references
	// (the planner resolves them); inline keys are digested here. Empty when sshkeys is not owned.
	SSHKeysDigest string
	// TagStyle is the cluster's tag-style: the zero value lower-cases tags, as PVE does by default.
	TagStyle pveformat.TagStyle
}

// Change is one config key to write or delete.
type Change struct {
	Key string
	// Field is the manifest field that owns the key (spec.memory, spec.disks[0]).
	Field string
	// Before is the live value ("" when absent); HadBefore tells an empty value from an absent key.
	Before    string
	HadBefore bool
	// Value is what is written; zero for a delete.
	Value  Value
	Delete bool
}

// After is the value shown after the change: the written value or its secret references.
func (c Change) After() string {
	if c.Delete {
		return ""
	}
	return c.Value.Display()
}

// Resize grows one disk in place.
type Resize struct {
	// Key is the disk slot (scsi0, rootfs, mp1).
	Key   string
	Field string
	From  int64
	To    int64
	// Before is the live drive value the resize expects.
	Before string
}

// Size is the resize argument: the new absolute size in PVE's size form (20G).
func (r Resize) Size() string { return pveformat.FormatSize(r.To) }

// Anomaly is a difference ProxOps does not write (data loss, live-only devices, create-only settings).
type Anomaly struct {
	Key     string
	Field   string
	Message string
}

// Diff is what it takes to make a live guest config equal to its manifest.
type Diff struct {
	Changes   []Change
	Resizes   []Resize
	Anomalies []Anomaly
}

// Empty reports whether nothing needs writing.
func (d Diff) Empty() bool { return len(d.Changes) == 0 && len(d.Resizes) == 0 }

// differ accumulates a Diff against a live config.
type differ struct {
	live     map[string]string
	tagStyle pveformat.TagStyle
	d        Diff
	sorted   []string
	// volumeMismatch is set when a live volume is larger than declared or on another storage:
	// a sign that slots were mixed up, so no volume of the guest is grown.
	volumeMismatch bool
}

// holdGrowth turns the planned resizes into anomalies when another volume of the guest does not match: a
// disk that would shrink or move next to one that would grow usually means the disks were reordered, and a
// grow cannot be undone.
func (x *differ) holdGrowth() {
	if !x.volumeMismatch {
		return
	}
	for _, r := range x.d.Resizes {
		x.anomaly(r.Key, r.Field, "%s would grow from %s to %s, but another volume of this guest differs in size or storage (were the disks reordered?); nothing is grown until they all match",
			r.Key, pveformat.FormatSize(r.From), pveformat.FormatSize(r.To))
	}
	x.d.Resizes = nil
}

// keys returns the live keys, sorted (computed once).
func (x *differ) keys() []string {
	if x.sorted == nil {
		x.sorted = slices.Sorted(maps.Keys(x.live))
	}
	return x.sorted
}

func (x *differ) get(key string) (string, bool) {
	v, ok := x.live[key]
	return v, ok
}

func (x *differ) set(key, field string, v Value) {
	before, had := x.live[key]
	v.Key = key
	x.d.Changes = append(x.d.Changes, Change{Key: key, Field: field, Before: before, HadBefore: had, Value: v})
}

func (x *differ) setString(key, field, value string) { x.set(key, field, Value{Value: value}) }

func (x *differ) del(key, field string) {
	before, had := x.live[key]
	x.d.Changes = append(x.d.Changes, Change{Key: key, Field: field, Before: before, HadBefore: had, Delete: true})
}

func (x *differ) anomaly(key, field, format string, args ...any) {
	x.d.Anomalies = append(x.d.Anomalies, Anomaly{Key: key, Field: field, Message: sprintf(format, args...)})
}

// scalar compares a plain value and writes it when it differs.
func (x *differ) scalar(key, field, want string) {
	if have, ok := x.get(key); !ok || have != want {
		x.setString(key, field, want)
	}
}

// intValue compares an integer key, with PVE's default for an absent key.
func (x *differ) intValue(key, field string, want, def int64) {
	have := def
	if v, ok := x.get(key); ok {
		if n, ok := Int(v); ok {
			have = n
		} else {
			have = -1 << 62
		}
	}
	if have != want {
		x.setString(key, field, itoa(want))
	}
}

// boolean compares a tri-state boolean key: nil is not owned.
func (x *differ) boolean(key, field string, want *bool, def bool) {
	if want == nil {
		return
	}
	have := def
	if v, ok := x.get(key); ok {
		have = boolValue(v)
	}
	if have != *want {
		x.setString(key, field, boolString(*want))
	}
}

// description compares a description without trailing whitespace (PVE strips it).
func (x *differ) description(field, want string) {
	if want == "" {
		return
	}
	have, ok := x.get("description")
	if !ok || strings.TrimRight(have, " \t\r\n") != strings.TrimRight(want, " \t\r\n") {
		x.setString("description", field, want)
	}
}

// tags ensures the ownership tag, and the declared tags exactly when there are some.
func (x *differ) tags(declared []string) {
	have, _ := x.get("tags")
	want := DesiredTagsIn(x.tagStyle, declared, have)
	if have != want && !x.tagStyle.Same(have, want) {
		x.setString("tags", "spec.tags", want)
	}
}

// set compares a whitespace-separated list as a set (nameserver, searchdomain); PVE stores it
// space-separated.
func (x *differ) wordSet(key, field string, want []string) {
	if len(want) == 0 {
		return
	}
	have, _ := x.get(key)
	hs := strings.FieldsFunc(have, func(r rune) bool { return r == ' ' || r == ',' || r == ';' || r == '\t' })
	ws := slices.Clone(want)
	slices.Sort(hs)
	slices.Sort(ws)
	if !slices.Equal(slices.Compact(hs), slices.Compact(ws)) {
		x.setString(key, field, strings.Join(want, " "))
	}
}

// extra compares spec.extra keys (except those PVE takes only at create) as comma-separated token sets, so
// a property string PVE re-ordered still matches.
func (x *differ) extra(extra map[string]string, createOnly []string) {
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if slices.Contains(createOnly, k) {
			continue
		}
		if have, ok := x.get(k); !ok || !sameTokenSet(have, extra[k]) {
			x.setString(k, "spec.extra."+k, extra[k])
		}
	}
}

// extraValues lists spec.extra in key order; createOnly keys only when create is true.
func extraValues(extra map[string]string, createOnly []string, create bool) Values {
	var out Values
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		if !create && slices.Contains(createOnly, k) {
			continue
		}
		out = append(out, Value{Key: k, Value: extra[k]})
	}
	return out
}

// QEMUCreateOnly and LXCCreateOnly are the keys PVE accepts when a guest is created and never after (the
// create endpoint's parameters that its config endpoint lacks).
var (
	QEMUCreateOnly = []string{"archive", "bwlimit", "ha-managed", "live-restore", "pool", "start", "storage", "unique"}
	LXCCreateOnly  = []string{"bwlimit", "force", "ha-managed", "ignore-unpack-errors", "ostemplate", "password", "pool",
		"restore", "ssh-public-keys", "start", "storage", "unique"}
)

// sizeCheck compares a live volume's size with the declared one: a larger declared size is grown in place,
// a smaller one is an anomaly, an unknown live size matches.
func (x *differ) sizeCheck(key, field, before string, want int64, have int64, known bool, template bool) {
	if !known || want == have {
		return
	}
	if want < have {
		x.volumeMismatch = true
		x.anomaly(key, field, "%s is %s on PVE, the manifest says %s; ProxOps never shrinks a disk", key, pveformat.FormatSize(have), pveformat.FormatSize(want))
		return
	}
	if template {
		x.anomaly(key, field, "%s is %s on PVE, the manifest says %s; a template's disks are base volumes and are not resized", key, pveformat.FormatSize(have), pveformat.FormatSize(want))
		return
	}
	x.d.Resizes = append(x.d.Resizes, Resize{Key: key, Field: field, From: have, To: want, Before: before})
}
