package pvesim

import (
	"sort"
	"strconv"
)

// Storage endpoints (pve-storage src/PVE/API2/Storage/Status.pm and Content.pm).

func (s *Sim) handleStorageList(c *call) (any, error) {
	nodeName := c.str("node")
	content := c.str("content")
	out := []map[string]any{}
	for _, st := range s.storages {
		if !st.onNode(nodeName) {
			continue
		}
		if id := c.str("storage"); id != "" && id != st.id {
			continue
		}
		if content != "" {
			ok := true
			for _, ct := range splitList(content) {
				if !st.content[ct] {
					ok = false
				}
			}
			if !ok {
				continue
			}
		}
		if c.str("enabled") == "1" && st.disabled {
			continue
		}
		used := s.storageUsed(st, nodeName)
		e := map[string]any{"storage": st.id, "type": st.typ, "content": st.contentList(), "shared": boolInt(st.shared),
			"active": boolInt(!st.disabled), "enabled": boolInt(!st.disabled)}
		if !st.disabled {
			e["total"], e["used"], e["avail"] = st.total, used, st.total-used
			e["used_fraction"] = float64(used) / float64(st.total)
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *Sim) handleStorageContent(c *call) (any, error) {
	nodeName := c.str("node")
	st := s.storage(c.str("storage"))
	if st == nil {
		return nil, dieErr("storage '%s' does not exist", c.str("storage"))
	}
	if !st.onNode(nodeName) {
		return nil, dieErr("storage '%s' is not available on node '%s'", st.id, nodeName)
	}
	content := c.str("content")
	vmid := c.str("vmid")
	var vols []*volume
	for _, v := range s.volumes {
		if v.storage != st.id || (v.node != "" && v.node != nodeName) {
			continue
		}
		if content != "" && v.content != content {
			continue
		}
		if vmid != "" && strconv.Itoa(v.vmid) != vmid {
			continue
		}
		vols = append(vols, v)
	}
	sort.Slice(vols, func(i, j int) bool { return vols[i].volid < vols[j].volid })
	out := []map[string]any{}
	for _, v := range vols {
		e := map[string]any{"volid": v.volid, "content": v.content, "format": v.format, "size": v.size, "ctime": v.ctime}
		if v.vmid != 0 {
			e["vmid"] = v.vmid
		}
		out = append(out, e)
	}
	return out, nil
}
