package pvesim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Resource pools (pve-manager API2/Pool.pm over pve-access-control's user.cfg): /pools with poolid as a
// parameter (the form that supports nested ids) and the deprecated /pools/{poolid}. A guest belongs to at
// most one pool; its pool is the guest's own pool field, so a destroyed guest leaves its pool as PVE's
// remove_vm_access does. A vmid with no guest may still be listed in a pool (PVE does not check that the
// guest exists); such entries are kept in ghosts, never shown as members and never keep a pool from being
// deleted.

// pool is one user.cfg pool entry.
type pool struct {
	comment string
	storage map[string]bool
	ghosts  map[int]bool
}

// maxPoolLevels is how deep PVE nests pools (parent/child/grandchild).
const maxPoolLevels = 3

// verifyPoolName is AccessControl.pm verify_poolname: up to three levels of [A-Za-z0-9.-_] names.
func verifyPoolName(id string) error {
	if strings.Count(id, "/")+1 > maxPoolLevels {
		return fmt.Errorf("pool name '%s' nested too deeply (max levels = %d)", id, maxPoolLevels)
	}
	if !rePoolID.MatchString(id) {
		return fmt.Errorf("pool name '%s' contains invalid characters", id)
	}
	return nil
}

// poolParent is the parent of a nested pool id, "" for a top-level one.
func poolParent(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[:i]
	}
	return ""
}

// lockUserConfig wraps an error of a user.cfg change as lock_user_config does: "<what>: <err>", a 500.
func lockUserConfig(what string, err error) error {
	if err == nil {
		return nil
	}
	return dieErr("%s: %s", what, strings.TrimSuffix(err.Error(), "\n"))
}

// vmPool is the pool a vmid is listed in ("" for none), a guest's or a ghost entry's.
func (s *Sim) vmPool(vmid int) string {
	if g, ok := s.guests[vmid]; ok {
		return g.pool
	}
	for _, id := range slices.Sorted(maps.Keys(s.pools)) {
		if s.pools[id].ghosts[vmid] {
			return id
		}
	}
	return ""
}

// setVMPool lists a vmid in a pool ("" removes it from its pool).
func (s *Sim) setVMPool(vmid int, id string) {
	if old := s.vmPool(vmid); old != "" {
		delete(s.pools[old].ghosts, vmid)
	}
	if g, ok := s.guests[vmid]; ok {
		g.pool = id
		return
	}
	if id != "" {
		s.pools[id].ghosts[vmid] = true
	}
}

// addSpecPool adds a pool of the spec: a valid id whose parent is listed before it.
func (s *Sim) addSpecPool(id string) error {
	if err := verifyPoolName(id); err != nil {
		return err
	}
	if parent := poolParent(id); parent != "" && s.pools[parent] == nil {
		return fmt.Errorf("pool '%s': parent '%s' is not listed before it", id, parent)
	}
	s.pools[id] = newPool("")
	return nil
}

func newPool(comment string) *pool {
	return &pool{comment: comment, storage: map[string]bool{}, ghosts: map[int]bool{}}
}

// handlePools is GET /pools: the pools with their comments, or with poolid that one pool and its members
// (filtered by type).
func (s *Sim) handlePools(c *call) (any, error) {
	out := []map[string]any{}
	want := c.str("poolid")
	if want != "" && s.pools[want] == nil {
		return nil, dieErr("pool '%s' does not exist", want)
	}
	for _, id := range slices.Sorted(maps.Keys(s.pools)) {
		if want != "" && id != want {
			continue
		}
		e := map[string]any{"poolid": id}
		if p := s.pools[id]; p.comment != "" {
			e["comment"] = p.comment
		}
		if want != "" {
			e["members"] = s.poolMembers(id, c.str("type"))
		}
		out = append(out, e)
	}
	return out, nil
}

// handlePoolRead is the deprecated GET /pools/{poolid}: one pool's comment and members.
func (s *Sim) handlePoolRead(c *call) (any, error) {
	id := c.str("poolid")
	p := s.pools[id]
	if p == nil {
		return nil, dieErr("pool '%s' does not exist", id)
	}
	out := map[string]any{"members": s.poolMembers(id, c.str("type"))}
	if p.comment != "" {
		out["comment"] = p.comment
	}
	return out, nil
}

// poolMembers lists a pool's guests (as the cluster resources list them) and storages, sorted by id.
func (s *Sim) poolMembers(id, typ string) []map[string]any {
	members := []map[string]any{}
	for _, g := range s.sortedGuests() {
		if g.pool != id || (typ != "" && typ != g.kind) {
			continue
		}
		m := s.vmStatus(g, false)
		m["id"] = fmt.Sprintf("%s/%d", g.kind, g.vmid)
		m["type"] = g.kind
		m["node"] = g.node
		members = append(members, m)
	}
	if typ != "" && typ != "storage" {
		return members
	}
	for _, sid := range slices.Sorted(maps.Keys(s.pools[id].storage)) {
		st := s.storage(sid)
		if st == nil {
			continue
		}
		nodeName := s.nodes[0].name // the local node when the storage is on it, else the first it is on
		if !st.onNode(nodeName) {
			nodeName = slices.Sorted(maps.Keys(st.nodes))[0]
		}
		members = append(members, map[string]any{
			"id": "storage/" + nodeName + "/" + sid, "type": "storage", "storage": sid, "node": nodeName,
			"plugintype": st.typ, "content": st.contentList(), "shared": boolInt(st.shared),
		})
	}
	return members
}

// handlePoolCreate is POST /pools: a new, empty pool; a nested pool's parent must exist.
func (s *Sim) handlePoolCreate(c *call) (any, error) {
	id := c.str("poolid")
	return nil, lockUserConfig("create pool failed", func() error {
		if s.pools[id] != nil {
			return fmt.Errorf("pool '%s' already exists", id)
		}
		if parent := poolParent(id); parent != "" && s.pools[parent] == nil {
			return fmt.Errorf("parent '%s' does not exist", parent)
		}
		s.pools[id] = newPool(userCfgComment(c.str("comment")))
		return nil
	}())
}

// handlePoolUpdate is PUT /pools and the deprecated PUT /pools/{poolid}: the comment, and guests or
// storages added or (with delete) removed. A guest in another pool moves only with allow-move.
func (s *Sim) handlePoolUpdate(c *call) (any, error) {
	id := c.str("poolid")
	return nil, lockUserConfig("update pools failed", func() error {
		p := s.pools[id]
		if p == nil {
			return fmt.Errorf("pool '%s' does not exist", id)
		}
		// PVE changes a copy of user.cfg and writes it only when every step succeeded.
		comment := p.comment
		if c.has("comment") {
			comment = userCfgComment(c.str("comment"))
		}
		del := c.str("delete") == "1"
		moves := map[int]string{}
		inPool := func(vmid int) string {
			if to, ok := moves[vmid]; ok {
				return to
			}
			return s.vmPool(vmid)
		}
		for _, v := range splitList(c.str("vms")) {
			vmid, _ := strconv.Atoi(v)
			cur := inPool(vmid)
			switch {
			case del && cur != id:
				return fmt.Errorf("VM %d is not a pool member", vmid)
			case del:
				moves[vmid] = ""
			case cur == id:
				return fmt.Errorf("VM %d is already a pool member", vmid)
			case cur != "" && c.str("allow-move") != "1":
				return fmt.Errorf("VM %d belongs already to pool '%s' and 'allow-move' is not set", vmid, cur)
			default:
				moves[vmid] = id
			}
		}
		storage := maps.Clone(p.storage)
		for _, sid := range splitList(c.str("storage")) {
			switch {
			case del && !storage[sid]:
				return fmt.Errorf("Storage '%s' is not a pool member", sid)
			case del:
				delete(storage, sid)
			case storage[sid]:
				return fmt.Errorf("Storage '%s' is already a pool member", sid)
			default:
				storage[sid] = true
			}
		}
		p.comment, p.storage = comment, storage
		for _, vmid := range slices.Sorted(maps.Keys(moves)) {
			s.setVMPool(vmid, moves[vmid])
		}
		return nil
	}())
}

// handlePoolDelete is DELETE /pools and the deprecated DELETE /pools/{poolid}: only an empty pool, one
// without guests, existing storages or child pools, is deleted.
func (s *Sim) handlePoolDelete(c *call) (any, error) {
	id := c.str("poolid")
	return nil, lockUserConfig("delete pool failed", func() error {
		p := s.pools[id]
		if p == nil {
			return fmt.Errorf("pool '%s' does not exist", id)
		}
		for _, g := range s.sortedGuests() {
			if g.pool == id {
				return fmt.Errorf("pool '%s' is not empty (contains VM %d)", id, g.vmid)
			}
		}
		for _, sid := range slices.Sorted(maps.Keys(p.storage)) {
			if s.storage(sid) != nil {
				return fmt.Errorf("pool '%s' is not empty (contains storage '%s')", id, sid)
			}
		}
		for _, other := range slices.Sorted(maps.Keys(s.pools)) {
			if poolParent(other) == id {
				return fmt.Errorf("pool '%s' is not empty (contains pool '%s')", id, other)
			}
		}
		delete(s.pools, id)
		return nil
	}())
}

// userCfgComment is a comment as user.cfg keeps it: Perl drops a false one ("" and "0") when it writes and reads.
func userCfgComment(v string) string {
	if v == "0" {
		return ""
	}
	return v
}
