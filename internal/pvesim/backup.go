package pvesim

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim/schema"
)

// Backup jobs (pve-manager PVE/API2/Backup.pm over jobs.cfg, PVE::VZDump verify_vzdump_parameters): the
// cluster's scheduled vzdump jobs. A job is kept as the options it was given (booleans as 0/1), its id
// apart. The simulator never runs a job.

const backupAllDays = "mon,tue,wed,thu,fri,sat,sun"

func init() {
	namedFormats["pve-calendar-event"] = func(v string) error {
		if err := pveformat.ValidateCalendarEvent(v); err != nil {
			var ce *pveformat.CalendarEventError
			if errors.As(err, &ce) {
				return ferr("invalid calendar event '%s' - %s", v, ce.Msg)
			}
			return ferr("invalid calendar event '%s' - %v", v, err)
		}
		return nil
	}
	min0 := 0.0
	keep := func() *schema.Prop { return &schema.Prop{Type: "integer", Optional: true, Minimum: &min0} }
	hashFormats["prune-backups"] = map[string]*schema.Prop{
		"keep-all": {Type: "boolean", Optional: true}, "keep-last": keep(), "keep-hourly": keep(),
		"keep-daily": keep(), "keep-weekly": keep(), "keep-monthly": keep(), "keep-yearly": keep(),
	}
	maps.Copy(handlers, map[string]handler{
		"GET /cluster/backup":                    (*Sim).handleBackupList,
		"POST /cluster/backup":                   (*Sim).handleBackupCreate,
		"GET /cluster/backup/{id}":               (*Sim).handleBackupRead,
		"PUT /cluster/backup/{id}":               (*Sim).handleBackupUpdate,
		"DELETE /cluster/backup/{id}":            (*Sim).handleBackupDelete,
		"GET /cluster/backup-info/not-backed-up": (*Sim).handleNotBackedUp,
	})
}

// backupOptionProps are the options a job keeps: the create method's parameters.
func (s *Sim) backupOptionProps() map[string]*schema.Prop {
	m := s.api.Method("/cluster/backup", "POST")
	if m == nil || m.Parameters == nil {
		return nil
	}
	return m.Parameters.Properties
}

// backupOptions are a request's job options, booleans normalised to 0/1.
func (s *Sim) backupOptions(c *call, skip ...string) map[string]string {
	props := s.backupOptionProps()
	out := map[string]string{}
	for k, v := range c.params {
		if slices.Contains(skip, k) {
			continue
		}
		if p := props[k]; p != nil && p.Type == "boolean" {
			b, _ := parseBoolean(v.s)
			out[k] = b
			continue
		}
		out[k] = v.s
	}
	return out
}

// verifyPruneBackups is JSONSchema validate_prune_backups: keep-all excludes the other settings, and a
// retention of only zeros is keep-all.
func verifyPruneBackups(opts map[string]string) error {
	v, ok := opts["prune-backups"]
	if !ok {
		return nil
	}
	parsed, err := parsePropertyString(hashFormats["prune-backups"], v, "prune-backups")
	if err != nil {
		return nil // the schema check reported it
	}
	keepAll := parsed["keep-all"]
	delete(parsed, "keep-all")
	positive := false
	for _, n := range parsed {
		if i, _ := strconv.Atoi(n); i > 0 {
			positive = true
		}
	}
	switch {
	case !positive:
		opts["prune-backups"] = "keep-all=1"
	case keepAll == "1":
		return paramErr(map[string]string{"prune-backups": "invalid format - keep-all cannot be set together with other options.\n"})
	}
	return nil
}

// verifyVzdumpParameters is PVE::VZDump verify_vzdump_parameters: the conflicts between the guest
// selections, and with checkMissing that one is given.
func verifyVzdumpParameters(opts map[string]string, checkMissing bool) error {
	conflict := func(k, with string) error {
		return paramErr(map[string]string{k: fmt.Sprintf("option conflicts with option '%s'", with)})
	}
	switch {
	case opts["all"] == "1" && opts["vmid"] != "":
		return conflict("all", "vmid")
	case opts["exclude"] != "" && opts["vmid"] != "":
		return conflict("exclude", "vmid")
	case opts["pool"] != "" && opts["vmid"] != "":
		return conflict("pool", "vmid")
	case opts["prune-backups"] != "" && opts["maxfiles"] != "":
		return conflict("prune-backups", "maxfiles")
	case opts["fleecing"] != "" && opts["stop"] == "1":
		return conflict("fleecing", "stop")
	}
	if err := verifyPruneBackups(opts); err != nil {
		return err
	}
	if opts["exclude"] != "" && opts["pool"] == "" {
		opts["all"] = "1"
	}
	if checkMissing && opts["all"] != "1" && opts["stop"] != "1" && opts["pool"] == "" && opts["vmid"] == "" {
		return paramErr(map[string]string{"vmid": "property is missing"})
	}
	return nil
}

// checkBackupTargets checks that the storage and the pool a job names exist.
func (s *Sim) checkBackupTargets(opts map[string]string) error {
	if id := opts["storage"]; id != "" && s.storage(id) == nil {
		return dieErr("storage '%s' does not exist", id)
	}
	if p := opts["pool"]; p != "" && s.pools[p] == nil {
		return permErr(fmt.Sprintf("pool '%s' does not exist", p))
	}
	return nil
}

// scheduleFromStartTime is the schedule of the legacy starttime and dow options.
func scheduleFromStartTime(opts map[string]string) {
	st, ok := opts["starttime"]
	if !ok {
		return
	}
	dow := opts["dow"]
	if dow == "" {
		dow = backupAllDays
	}
	if dow == backupAllDays {
		opts["schedule"] = st
	} else {
		opts["schedule"] = dow + " " + st
	}
	delete(opts, "starttime")
	delete(opts, "dow")
}

// backupJobJSON is a job as GET answers it: its options typed as the schema types them, with id and type.
func (s *Sim) backupJobJSON(id string, opts map[string]string) map[string]any {
	props := s.backupOptionProps()
	out := map[string]any{"id": id, "type": "vzdump"}
	for k, v := range opts {
		if p := props[k]; p != nil && (p.Type == "boolean" || p.Type == "integer") {
			if n, err := strconv.Atoi(v); err == nil {
				out[k] = n
				continue
			}
		}
		out[k] = v
	}
	return out
}

// newBackupJobID is the id PVE gives a job created without one: "backup-" and the first 13 characters of
// a random UUID.
func (s *Sim) newBackupJobID() string {
	for {
		id := fmt.Sprintf("backup-%08x-%04x", s.rng.Uint32(), s.rng.Uint32()&0xffff)
		if s.backupJobs[id] == nil {
			return id
		}
	}
}

// handleBackupList is GET /cluster/backup: every job, sorted by id.
func (s *Sim) handleBackupList(c *call) (any, error) {
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.backupJobs)) {
		out = append(out, s.backupJobJSON(id, s.backupJobs[id]))
	}
	return out, nil
}

// handleBackupRead is GET /cluster/backup/{id}.
func (s *Sim) handleBackupRead(c *call) (any, error) {
	id := c.str("id")
	opts := s.backupJobs[id]
	if opts == nil {
		return nil, paramErr(map[string]string{"id": fmt.Sprintf("No such job '%s'", id)})
	}
	return s.backupJobJSON(id, opts), nil
}

// handleBackupCreate is POST /cluster/backup.
func (s *Sim) handleBackupCreate(c *call) (any, error) {
	for _, k := range []string{"tmpdir", "dumpdir", "script"} {
		if c.has(k) && c.user != "root@pam" {
			return nil, paramErr(map[string]string{k: "Only root may set this option."})
		}
	}
	opts := s.backupOptions(c, "id")
	if err := s.checkBackupTargets(opts); err != nil {
		return nil, err
	}
	id := c.str("id")
	if id == "" {
		id = s.newBackupJobID()
	}
	if s.backupJobs[id] != nil {
		return nil, dieErr("Job ID '%s' already exists", id)
	}
	scheduleFromStartTime(opts)
	if opts["schedule"] == "" {
		return nil, paramErr(map[string]string{"schedule": "property is missing and it is not optional"})
	}
	if _, ok := opts["enabled"]; !ok {
		opts["enabled"] = "1"
	}
	if err := verifyVzdumpParameters(opts, true); err != nil {
		return nil, err
	}
	s.backupJobs[id] = opts
	return nil, nil
}

// handleBackupUpdate is PUT /cluster/backup/{id}: the options given are set, those in delete removed; a
// new selection (vmid, all or pool) replaces the old one.
func (s *Sim) handleBackupUpdate(c *call) (any, error) {
	id := c.str("id")
	opts := s.backupOptions(c, "id", "delete")
	del := splitList(c.str("delete"))
	if len(opts) == 0 && len(del) == 0 {
		return nil, dieErr("no options specified")
	}
	if err := verifyVzdumpParameters(opts, false); err != nil {
		return nil, err
	}
	job := s.backupJobs[id]
	if job == nil {
		return nil, dieErr("no such vzdump job")
	}
	if err := s.checkBackupTargets(opts); err != nil {
		return nil, err
	}
	props := s.backupOptionProps()
	next := maps.Clone(job)
	for _, k := range del {
		if props[k] == nil || k == "id" {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
		delete(next, k)
	}
	scheduleFromStartTime(opts)
	maps.Copy(next, opts)
	if next["exclude"] != "" && next["pool"] == "" {
		next["all"] = "1"
	}
	switch {
	case opts["vmid"] != "":
		delete(next, "all")
		delete(next, "exclude")
		delete(next, "pool")
	case opts["all"] == "1":
		delete(next, "vmid")
		delete(next, "pool")
	case next["pool"] != "":
		delete(next, "vmid")
		delete(next, "all")
	}
	if next["schedule"] == "" {
		return nil, paramErr(map[string]string{"schedule": "property is missing and it is not optional"})
	}
	if err := verifyVzdumpParameters(next, true); err != nil {
		return nil, err
	}
	s.backupJobs[id] = next
	return nil, nil
}

// handleBackupDelete is DELETE /cluster/backup/{id}.
func (s *Sim) handleBackupDelete(c *call) (any, error) {
	id := c.str("id")
	if s.backupJobs[id] == nil {
		return nil, paramErr(map[string]string{"id": fmt.Sprintf("No such job '%s'", id)})
	}
	delete(s.backupJobs, id)
	return nil, nil
}

// backupSelects reports whether an enabled job's selection covers a guest.
func backupSelects(opts map[string]string, g *guest) bool {
	if opts["enabled"] == "0" {
		return false
	}
	if n := opts["node"]; n != "" && n != g.node {
		return false
	}
	vmid := strconv.Itoa(g.vmid)
	switch {
	case opts["vmid"] != "":
		return slices.Contains(splitList(opts["vmid"]), vmid)
	case opts["pool"] != "":
		return g.pool == opts["pool"] && !slices.Contains(splitList(opts["exclude"]), vmid)
	case opts["all"] == "1":
		return !slices.Contains(splitList(opts["exclude"]), vmid)
	}
	return false
}

// handleNotBackedUp is GET /cluster/backup-info/not-backed-up: the guests (templates apart) no enabled
// job selects.
func (s *Sim) handleNotBackedUp(c *call) (any, error) {
	out := []map[string]any{}
	for _, g := range s.sortedGuests() {
		if g.conf()["template"] == "1" {
			continue
		}
		covered := false
		for _, opts := range s.backupJobs {
			covered = covered || backupSelects(opts, g)
		}
		if covered {
			continue
		}
		e := map[string]any{"vmid": g.vmid, "type": g.kind}
		name := g.conf()["name"]
		if g.kind == "lxc" {
			name = g.conf()["hostname"]
		}
		if name != "" {
			e["name"] = name
		}
		out = append(out, e)
	}
	return out, nil
}

// BackupJob returns a copy of a job's options (nil when there is none), for tests.
func (s *Sim) BackupJob(id string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.backupJobs[id]; j != nil {
		return maps.Clone(j)
	}
	return nil
}
