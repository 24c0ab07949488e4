package manifest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/yamldecode"
)

// BackupJobSpec is the spec of a BackupJob: a scheduled vzdump job of the cluster (PVE's /cluster/backup).
// Every setting it models is owned: one left out is PVE's default, and a value set by hand on PVE is
// converged back. The job's other options (bandwidth limit, mail, performance, ...) are left as they are.
type BackupJobSpec struct {
	// ID is PVE's job id; defaults to BackupJobID(metadata.name).
	ID string `yaml:"id,omitempty"`
	// Schedule is a systemd-style calendar event (PVE's pve-calendar-event): "21:00", "mon..fri 02:30", "daily".
	Schedule string `yaml:"schedule"`
	// Storage is the storage the backups are written to; PVE's default storage when empty.
	Storage string `yaml:"storage,omitempty"`
	// Selection says which guests the job backs up.
	Selection BackupSelection `yaml:"selection"`
	// Mode is snapshot, suspend or stop (PVE's default: snapshot).
	Mode string `yaml:"mode,omitempty"`
	// Compression is none, gzip, lzo or zstd (PVE's default: none).
	Compression string `yaml:"compression,omitempty"`
	// Retention is the job's prune-backups; absent: the storage's own retention.
	Retention *BackupRetention `yaml:"retention,omitempty"`
	// NotesTemplate is the notes of each backup ({{guestname}}, {{vmid}}, {{node}}, {{cluster}}).
	NotesTemplate string `yaml:"notes-template,omitempty"`
	// Protected marks the backups protected from pruning and removal.
	Protected *bool `yaml:"protected,omitempty"`
	// Enabled: a disabled job does not run (default true).
	Enabled *bool `yaml:"enabled,omitempty"`
	// Node restricts the job to the guests of one node.
	Node string `yaml:"node,omitempty"`
	// NotificationMode is auto, legacy-sendmail or notification-system.
	NotificationMode string `yaml:"notification-mode,omitempty"`
	// Comment is the job's comment without the ownership marker, which ProxOps appends.
	Comment string `yaml:"comment,omitempty"`
}

// BackupSelection is what a backup job backs up: the guests it names, the guests of a pool, or every guest;
// Exclude leaves guests out of a pool or all selection. Guests are manifest names (web-01, or VM/web-01 when
// a VM and a container share the name), resolved to their vmids.
type BackupSelection struct {
	Guests  []string `yaml:"guests,omitempty"`
	Pool    string   `yaml:"pool,omitempty"`
	All     bool     `yaml:"all,omitempty"`
	Exclude []string `yaml:"exclude,omitempty"`
}

// BackupRetention is a job's prune-backups: how many backups of each period to keep, each positive; or
// keep-all: true, alone, to keep every backup.
type BackupRetention struct {
	KeepAll     *bool `yaml:"keep-all,omitempty"`
	KeepLast    *int  `yaml:"keep-last,omitempty"`
	KeepHourly  *int  `yaml:"keep-hourly,omitempty"`
	KeepDaily   *int  `yaml:"keep-daily,omitempty"`
	KeepWeekly  *int  `yaml:"keep-weekly,omitempty"`
	KeepMonthly *int  `yaml:"keep-monthly,omitempty"`
	KeepYearly  *int  `yaml:"keep-yearly,omitempty"`
}

func (*BackupJobSpec) isSpec() {}

// BackupJob returns the spec of a BackupJob, else nil.
func (r *Resource) BackupJob() *BackupJobSpec {
	s, _ := r.Spec.(*BackupJobSpec)
	return s
}

// GuestBackup reports whether a guest may be backed up by the jobs that select it by pool or all: false
// only when its spec.backup is false.
func (r *Resource) GuestBackup() bool {
	b := r.guest().backup
	return b == nil || *b
}

// Settings are the retention's keep-* settings in PVE's order, with their values (nil: absent).
func (r *BackupRetention) Settings() []struct {
	Key   string
	Value *int
} {
	return []struct {
		Key   string
		Value *int
	}{
		{"keep-last", r.KeepLast}, {"keep-hourly", r.KeepHourly}, {"keep-daily", r.KeepDaily},
		{"keep-weekly", r.KeepWeekly}, {"keep-monthly", r.KeepMonthly}, {"keep-yearly", r.KeepYearly},
	}
}

// PruneBackups is the retention as PVE's prune-backups property string (keys sorted as PVE prints them).
func (r *BackupRetention) PruneBackups() string {
	if IsTrue(r.KeepAll) {
		return "keep-all=1"
	}
	var parts []string
	for _, s := range r.Settings() {
		if s.Value != nil && *s.Value > 0 {
			parts = append(parts, s.Key+"="+strconv.Itoa(*s.Value))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// BackupJobOptions are the options of a PVE backup job a BackupJob owns, sorted; the others are left as
// they are.
var BackupJobOptions = []string{"all", "compress", "enabled", "exclude", "mode", "node", "notes-template",
	"notification-mode", "pool", "protected", "prune-backups", "schedule", "storage", "vmid"}

// BackupModes, BackupCompressions and BackupNotificationModes are the values PVE accepts.
var (
	BackupModes             = []string{"snapshot", "suspend", "stop"}
	BackupCompressions      = []string{"none", "gzip", "lzo", "zstd"}
	BackupNotificationModes = []string{"auto", "legacy-sendmail", "notification-system"}
)

// CompressValue is PVE's compress value of a compression ("0" for none).
func CompressValue(c string) string {
	if c == "none" {
		return "0"
	}
	return c
}

// backupJobIDRE is PVE's pve-configid format, which a job id follows.
var backupJobIDRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_-]+$`)

// MaxBackupJobID is the longest job id PVE reads back (its API limits the id to 50 characters).
const MaxBackupJobID = 50

// BackupJobIDError says what is wrong with a PVE job id, or returns "" for a valid one.
func BackupJobIDError(id string) string {
	switch {
	case len(id) > MaxBackupJobID:
		return fmt.Sprintf("job id %s is longer than %d characters", diag.Excerpt(id), MaxBackupJobID)
	case !backupJobIDRE.MatchString(id):
		return fmt.Sprintf("invalid job id %s: a letter, then letters, digits, hyphens and underscores (at least 2 characters)", diag.Excerpt(id))
	}
	return ""
}

// BackupJobID is the job id of a BackupJob without spec.id: its name when that is a valid PVE job id, else
// "backup-" and the name, cut to 50 characters (a name that starts with a digit, or of one character).
func BackupJobID(name string) string {
	if BackupJobIDError(name) == "" {
		return name
	}
	id := "backup-" + name
	if len(id) > MaxBackupJobID {
		id = strings.TrimRight(id[:MaxBackupJobID], "-")
	}
	return id
}

// IDOrName is the job's PVE id: spec.id, else BackupJobID of the manifest's name.
func (s *BackupJobSpec) IDOrName(name string) string {
	if s.ID != "" {
		return s.ID
	}
	return BackupJobID(name)
}

// SplitGuestName splits a selection's guest entry into its kind ("" when it names none) and name.
func SplitGuestName(v string) (Kind, string, bool) {
	k, name, ok := strings.Cut(v, "/")
	if !ok {
		return "", v, nameRE.MatchString(v)
	}
	kind, known := ParseKind(k)
	return kind, name, known && kind.IsGuest() && nameRE.MatchString(name)
}

// backupJob checks a BackupJob's spec.
func (c *checker) backupJob(s *BackupJobSpec) {
	if s.ID != "" || c.has("spec.id") {
		if msg := BackupJobIDError(s.ID); msg != "" {
			c.errorf("spec.id", "%s", msg)
		}
	}
	switch err := pveformat.ValidateCalendarEvent(s.Schedule); {
	case s.Schedule == "":
		c.errorf("spec.schedule", "required: a calendar event such as 21:00, mon..fri 02:30 or daily")
	case len(s.Schedule) > 128:
		c.errorf("spec.schedule", "calendar event %s is longer than 128 characters", diag.Excerpt(s.Schedule))
	case err != nil:
		var ce *pveformat.CalendarEventError
		if errors.As(err, &ce) {
			c.errorf("spec.schedule", "invalid calendar event %s: at character %d: %s", diag.Excerpt(s.Schedule), ce.Pos+1, ce.Msg)
		} else {
			c.errorf("spec.schedule", "invalid calendar event %s: %v", diag.Excerpt(s.Schedule), err)
		}
	}
	if s.Storage != "" || c.has("spec.storage") {
		c.storage("spec.storage", s.Storage)
	}
	c.backupSelection(&s.Selection)
	c.oneOf("spec.mode", s.Mode, BackupModes)
	c.oneOf("spec.compression", s.Compression, BackupCompressions)
	c.oneOf("spec.notification-mode", s.NotificationMode, BackupNotificationModes)
	if s.Retention != nil {
		positive, zero := false, false
		for _, st := range s.Retention.Settings() {
			switch {
			case st.Value == nil:
			case *st.Value <= 0:
				zero = true
				c.errorf("spec.retention."+st.Key, "a retention of %d keeps no backup of its own; PVE ignores it: give a positive number, or leave %s out", *st.Value, st.Key)
			default:
				positive = true
			}
		}
		keepAll := IsTrue(s.Retention.KeepAll)
		switch {
		case keepAll && positive:
			c.errorf("spec.retention.keep-all", "keep-all cannot be set together with the keep-* counts (PVE refuses it)")
		case s.Retention.KeepAll != nil && !keepAll:
			c.errorf("spec.retention.keep-all", "keep-all: false says nothing; leave it out")
		}
		if !positive && !zero && !keepAll && !c.broken("spec.retention") {
			c.errorf("spec.retention", "a retention of zero: PVE turns it into keep-all; set at least one keep-* to a positive number, keep-all: true, or leave spec.retention out to use the storage's retention")
		}
	}
	if s.Node != "" || c.has("spec.node") {
		c.node("spec.node", s.Node)
	}
	for _, f := range []struct {
		field string
		set   bool
	}{{"spec.notes-template", s.NotesTemplate != ""}, {"spec.protected", s.Protected != nil}} {
		if f.set && s.Storage == "" {
			c.errorf(f.field, "needs spec.storage (PVE requires the storage with it)")
		}
	}
	if len(s.NotesTemplate) > 1024 {
		c.errorf("spec.notes-template", "longer than 1024 characters")
	}
	switch {
	case strings.Contains(s.Comment, "\x00"):
		c.errorf("spec.comment", "must not contain a NUL character")
	case pveformat.Marked(s.Comment):
		c.errorf("spec.comment", "must not contain the ownership marker %s: ProxOps adds it", pveformat.OwnershipMarker)
	case len(pveformat.MarkComment(s.Comment)) > 512:
		c.errorf("spec.comment", "longer than %d characters (PVE keeps 512, the ownership marker included)", 512-len(pveformat.OwnershipMarker)-1)
	}
}

// broken reports whether a field could not be decoded (already reported).
func (c *checker) broken(field string) bool { return c.r.Source.broken[field] }

// oneOf checks an optional enumerated value.
func (c *checker) oneOf(field, v string, values []string) {
	if (v != "" || c.has(field)) && !slices.Contains(values, v) {
		c.errorf(field, "%s is not one of %s", diag.Excerpt(v), strings.Join(values, ", "))
	}
}

// backupSelection checks that exactly one selection is given and that its guests are names.
func (c *checker) backupSelection(s *BackupSelection) {
	n := 0
	for _, set := range []bool{len(s.Guests) > 0, s.Pool != "", s.All} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		c.errorf("spec.selection", "required: one of guests (a list of guest names), pool (a pool id) or all: true")
	case n > 1:
		c.errorf("spec.selection", "give one of guests, pool or all: true, not several")
	}
	if s.Pool != "" {
		if msg := PoolIDError(s.Pool); msg != "" {
			c.errorf("spec.selection.pool", "%s", msg)
		}
	}
	if len(s.Exclude) > 0 && len(s.Guests) > 0 {
		c.errorf("spec.selection.exclude", "excludes guests of a pool or all: true selection; with guests, leave the guest out of the list instead")
	}
	for _, l := range []struct {
		field string
		list  []string
	}{{"spec.selection.guests", s.Guests}, {"spec.selection.exclude", s.Exclude}} {
		for i, v := range l.list {
			if _, _, ok := SplitGuestName(v); !ok {
				c.errorf(yamldecode.Index(l.field, i), "invalid guest %s: a guest's manifest name, or Kind/name (VM, LXC, TemplateVM, TemplateCT)", diag.Excerpt(v))
			}
		}
	}
}

// SelectedGuest finds the guest a selection entry names among resources: Kind/name, or a name that one
// guest manifest has. It returns "" and the guest, or a message saying why none is found.
func SelectedGuest(resources []*Resource, entry string) (*Resource, string) {
	kind, name, ok := SplitGuestName(entry)
	if !ok {
		return nil, fmt.Sprintf("invalid guest %s", diag.Excerpt(entry))
	}
	var found []*Resource
	for _, r := range resources {
		if r.Kind.IsGuest() && r.Metadata.Name == name && (kind == "" || r.Kind == kind) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Sprintf("unknown guest %s: no VM, LXC, TemplateVM or TemplateCT manifest of that name in the cluster", diag.Excerpt(entry))
	case 1:
		return found[0], ""
	}
	refs := make([]string, len(found))
	for i, r := range found {
		refs[i] = r.Ref().String()
	}
	slices.Sort(refs)
	return nil, fmt.Sprintf("guest %s is ambiguous (%s): write Kind/name", diag.Excerpt(entry), strings.Join(refs, ", "))
}
