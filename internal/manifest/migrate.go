package manifest

import (
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/diag"
)

// Migration modes (reconcile.migrate and spec.migrate.mode).
const (
	// MigrateOnline moves a running VM live and a running container in restart mode.
	MigrateOnline = "online"
	// MigrateOffline moves a guest only while it is stopped: a running one is shut down, moved and started.
	MigrateOffline = "offline"
	// MigrateNever never moves a guest: a spec.node change is reported as misplaced.
	MigrateNever = "never"
)

// MigrateModes are the valid migration modes.
var MigrateModes = []string{MigrateOnline, MigrateOffline, MigrateNever}

// Migrate says how a guest moves when its spec.node changes.
type Migrate struct {
	// Mode overrides reconcile.migrate for this guest (online, offline or never).
	Mode string `yaml:"mode,omitempty"`
	// TargetStorage maps the guest's node-local storages on the target node: one storage id for all, or
	// source:target pairs separated by commas (PVE's targetstorage / target-storage).
	TargetStorage string `yaml:"target-storage,omitempty"`
}

// MigrateSpec returns a guest's spec.migrate (nil when not set or not a guest).
func (r *Resource) MigrateSpec() *Migrate { return r.guest().migrate }

func cloneMigrate(m *Migrate) *Migrate {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// migrate checks spec.migrate.
func (c *checker) migrate(m *Migrate) {
	if m == nil {
		return
	}
	if m.Mode != "" && !slices.Contains(MigrateModes, m.Mode) {
		c.errorf("spec.migrate.mode", "invalid migration mode %s (want %s)", diag.Excerpt(m.Mode), strings.Join(MigrateModes, "|"))
	}
	if m.TargetStorage == "" {
		return
	}
	for _, e := range strings.Split(m.TargetStorage, ",") {
		src, dst, pair := strings.Cut(e, ":")
		ids := []string{e}
		if pair {
			ids = []string{src, dst}
		}
		for _, id := range ids {
			if !storageRE.MatchString(id) {
				c.errorf("spec.migrate.target-storage", "invalid storage map %s (a storage id, or source:target pairs separated by commas)", diag.Excerpt(m.TargetStorage))
				return
			}
		}
	}
}

// CreationOnly reports whether a reference to a resource of this kind matters only when the referring guest
// is created (the DiskImage a disk is imported from, the CTTemplate a container is made from, the TemplateVM a
// VM is cloned from): it does not constrain where an existing guest lives.
func (k Kind) CreationOnly() bool {
	return k == KindDiskImage || k == KindCTTemplate || k == KindTemplateVM
}
