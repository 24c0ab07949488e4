package pvesim

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// handler answers one API method; it runs with s.mu held.
type handler func(s *Sim, c *call) (any, error)

// handlers maps "METHOD /path/template" to its handler. The schema generator's list of served paths must
// match these keys (TestServedPathsMatchSchema).
var handlers = map[string]handler{
	"GET /version":            (*Sim).handleVersion,
	"POST /access/ticket":     (*Sim).handleTicket,
	"GET /nodes":              (*Sim).handleNodes,
	"GET /cluster/resources":  (*Sim).handleResources,
	"GET /cluster/nextid":     (*Sim).handleNextID,
	"GET /cluster/options":    (*Sim).handleClusterOptions,
	"GET /nodes/{node}/qemu":  (*Sim).handleQemuList,
	"POST /nodes/{node}/qemu": (*Sim).handleQemuCreate,
	"GET /nodes/{node}/qemu/{vmid}": func(s *Sim, c *call) (any, error) {
		return s.subdirs(c, "qemu", "clone", "cloudinit", "config", "migrate", "pending", "resize", "snapshot", "status", "template")
	},
	"DELETE /nodes/{node}/qemu/{vmid}":        (*Sim).handleDestroy,
	"GET /nodes/{node}/qemu/{vmid}/config":    (*Sim).handleConfigGet,
	"POST /nodes/{node}/qemu/{vmid}/config":   (*Sim).handleQemuConfigUpdate,
	"PUT /nodes/{node}/qemu/{vmid}/config":    (*Sim).handleQemuConfigUpdate,
	"GET /nodes/{node}/qemu/{vmid}/pending":   (*Sim).handlePending,
	"GET /nodes/{node}/qemu/{vmid}/cloudinit": (*Sim).handleCloudInitGet,
	"PUT /nodes/{node}/qemu/{vmid}/cloudinit": (*Sim).handleCloudInitUpdate,
	"GET /nodes/{node}/qemu/{vmid}/status": func(s *Sim, c *call) (any, error) {
		return s.subdirs(c, "qemu", "current", "resume", "shutdown", "start", "stop", "suspend")
	},
	"GET /nodes/{node}/qemu/{vmid}/status/current":   (*Sim).handleStatusCurrent,
	"POST /nodes/{node}/qemu/{vmid}/status/start":    (*Sim).handleQemuStart,
	"POST /nodes/{node}/qemu/{vmid}/status/stop":     (*Sim).handleQemuStop,
	"POST /nodes/{node}/qemu/{vmid}/status/shutdown": (*Sim).handleQemuStop,
	"GET /nodes/{node}/lxc":                          (*Sim).handleLXCList,
	"POST /nodes/{node}/lxc":                         (*Sim).handleLXCCreate,
	"GET /nodes/{node}/lxc/{vmid}": func(s *Sim, c *call) (any, error) {
		return s.subdirs(c, "lxc", "clone", "config", "migrate", "pending", "resize", "snapshot", "status", "template")
	},
	"DELETE /nodes/{node}/lxc/{vmid}":                      (*Sim).handleDestroy,
	"GET /nodes/{node}/lxc/{vmid}/config":                  (*Sim).handleConfigGet,
	"PUT /nodes/{node}/lxc/{vmid}/config":                  (*Sim).handleLXCConfigUpdate,
	"GET /nodes/{node}/lxc/{vmid}/pending":                 (*Sim).handlePending,
	"GET /nodes/{node}/lxc/{vmid}/status":                  func(s *Sim, c *call) (any, error) { return s.subdirs(c, "lxc", "current", "start", "stop", "shutdown") },
	"GET /nodes/{node}/lxc/{vmid}/status/current":          (*Sim).handleStatusCurrent,
	"POST /nodes/{node}/lxc/{vmid}/status/start":           (*Sim).handleLXCStart,
	"POST /nodes/{node}/lxc/{vmid}/status/stop":            (*Sim).handleLXCStop,
	"POST /nodes/{node}/lxc/{vmid}/status/shutdown":        (*Sim).handleLXCStop,
	"GET /nodes/{node}/storage":                            (*Sim).handleStorageList,
	"GET /nodes/{node}/storage/{storage}/content":          (*Sim).handleStorageContent,
	"GET /nodes/{node}/tasks":                              (*Sim).handleTaskList,
	"POST /nodes/{node}/qemu/{vmid}/clone":                 (*Sim).handleQemuClone,
	"POST /nodes/{node}/qemu/{vmid}/template":              (*Sim).handleQemuTemplate,
	"PUT /nodes/{node}/qemu/{vmid}/resize":                 (*Sim).handleQemuResize,
	"POST /nodes/{node}/qemu/{vmid}/status/suspend":        (*Sim).handleQemuSuspend,
	"POST /nodes/{node}/qemu/{vmid}/status/resume":         (*Sim).handleQemuResume,
	"GET /nodes/{node}/qemu/{vmid}/snapshot":               (*Sim).handleSnapshotList,
	"POST /nodes/{node}/qemu/{vmid}/snapshot":              (*Sim).handleSnapshotCreate,
	"DELETE /nodes/{node}/qemu/{vmid}/snapshot/{snapname}": (*Sim).handleSnapshotDelete,
	"POST /nodes/{node}/lxc/{vmid}/clone":                  (*Sim).handleLXCClone,
	"POST /nodes/{node}/lxc/{vmid}/template":               (*Sim).handleLXCTemplate,
	"PUT /nodes/{node}/lxc/{vmid}/resize":                  (*Sim).handleLXCResize,
	"GET /nodes/{node}/lxc/{vmid}/snapshot":                (*Sim).handleSnapshotList,
	"POST /nodes/{node}/lxc/{vmid}/snapshot":               (*Sim).handleSnapshotCreate,
	"DELETE /nodes/{node}/lxc/{vmid}/snapshot/{snapname}":  (*Sim).handleSnapshotDelete,
	"POST /nodes/{node}/storage/{storage}/download-url":    (*Sim).handleDownloadURL,
	"POST /nodes/{node}/storage/{storage}/upload":          (*Sim).handleUpload,
	"GET /pools":                             (*Sim).handlePools,
	"POST /pools":                            (*Sim).handlePoolCreate,
	"PUT /pools":                             (*Sim).handlePoolUpdate,
	"DELETE /pools":                          (*Sim).handlePoolDelete,
	"GET /pools/{poolid}":                    (*Sim).handlePoolRead,
	"PUT /pools/{poolid}":                    (*Sim).handlePoolUpdate,
	"DELETE /pools/{poolid}":                 (*Sim).handlePoolDelete,
	"DELETE /nodes/{node}/tasks/{upid}":      (*Sim).handleTaskStop,
	"GET /nodes/{node}/qemu/{vmid}/migrate":  (*Sim).handleQemuMigratePrecondition,
	"POST /nodes/{node}/qemu/{vmid}/migrate": (*Sim).handleQemuMigrate,
	"GET /nodes/{node}/lxc/{vmid}/migrate":   (*Sim).handleLXCMigratePrecondition,
	"POST /nodes/{node}/lxc/{vmid}/migrate":  (*Sim).handleLXCMigrate,
	"GET /nodes/{node}/tasks/{upid}/status":  (*Sim).handleTaskStatus,
	"GET /nodes/{node}/tasks/{upid}/log":     (*Sim).handleTaskLog,

	// Snapshots beyond list, create and delete (snapshot.go).
	"GET /nodes/{node}/qemu/{vmid}/snapshot/{snapname}":           (*Sim).handleSnapshotCmdIdx,
	"GET /nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config":    (*Sim).handleSnapshotConfigGet,
	"PUT /nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config":    (*Sim).handleSnapshotConfigPut,
	"POST /nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback": (*Sim).handleSnapshotRollback,
	"GET /nodes/{node}/lxc/{vmid}/snapshot/{snapname}":            (*Sim).handleSnapshotCmdIdx,
	"GET /nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config":     (*Sim).handleSnapshotConfigGet,
	"PUT /nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config":     (*Sim).handleSnapshotConfigPut,
	"POST /nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback":  (*Sim).handleSnapshotRollback,
}

var _ = http.MethodGet

func (s *Sim) subdirs(c *call, kind string, dirs ...string) (any, error) {
	if _, err := s.guestOn(c, kind); err != nil {
		return nil, err
	}
	out := []map[string]string{}
	for _, d := range dirs {
		out = append(out, map[string]string{"subdir": d})
	}
	return out, nil
}

// guestOn loads the guest of the request's vmid on the request's node, failing as load_config does.
func (s *Sim) guestOn(c *call, kind string) (*guest, error) {
	vmid := c.vmid()
	g, ok := s.guests[vmid]
	if !ok || g.node != c.str("node") || g.kind != kind {
		if kind == "lxc" {
			return nil, dieErr("Configuration file 'nodes/%s/lxc/%d.conf' does not exist", c.str("node"), vmid)
		}
		return nil, dieErr("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", c.str("node"), vmid)
	}
	return g, nil
}

func (s *Sim) handleVersion(c *call) (any, error) {
	release := s.version
	if parts := strings.Split(s.version, "."); len(parts) >= 2 {
		release = parts[0] + "." + parts[1]
	}
	return map[string]any{"version": s.version, "release": release, "repoid": "5d2f4a1c9b3e7f60", "console": "xtermjs"}, nil
}

func (s *Sim) handleNodes(c *call) (any, error) {
	out := []map[string]any{}
	for _, n := range s.nodes {
		e := map[string]any{"node": n.name, "id": "node/" + n.name, "type": "node", "level": "",
			"ssl_fingerprint": fakeFingerprint(n.name)}
		if n.offline {
			e["status"] = "offline"
		} else {
			e["status"] = "online"
			e["cpu"] = 0.01
			e["maxcpu"] = n.cpus
			e["mem"] = n.memory / 8
			e["maxmem"] = n.memory
			e["disk"] = int64(8 << 30)
			e["maxdisk"] = int64(100 << 30)
			e["uptime"] = int64(time.Since(s.bootTime).Seconds()) + 86400
		}
		out = append(out, e)
	}
	return out, nil
}

func fakeFingerprint(name string) string {
	h := sha1Hex("fingerprint:" + name)
	h += sha1Hex(h)
	var parts []string
	for i := 0; i < 64; i += 2 {
		parts = append(parts, strings.ToUpper(h[i:i+2]))
	}
	return strings.Join(parts, ":")
}

func (s *Sim) sortedGuests() []*guest {
	out := make([]*guest, 0, len(s.guests))
	for _, g := range s.guests {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].vmid < out[j].vmid })
	return out
}

func (s *Sim) handleResources(c *call) (any, error) {
	typ := c.str("type")
	out := []map[string]any{}
	if typ == "" || typ == "node" {
		for _, n := range s.nodes {
			e := map[string]any{"id": "node/" + n.name, "type": "node", "node": n.name, "level": "",
				"cgroup-mode": 2}
			if n.offline {
				e["status"] = "offline"
			} else {
				e["status"] = "online"
				e["maxcpu"], e["cpu"], e["maxmem"], e["mem"] = n.cpus, 0.01, n.memory, n.memory/8
				e["maxdisk"], e["disk"] = int64(100<<30), int64(8<<30)
				e["uptime"] = int64(time.Since(s.bootTime).Seconds()) + 86400
			}
			out = append(out, e)
		}
	}
	if typ == "" || typ == "vm" {
		for _, g := range s.sortedGuests() {
			e := s.vmStatus(g, false)
			e["id"] = fmt.Sprintf("%s/%d", g.kind, g.vmid)
			e["type"] = g.kind
			e["node"] = g.node
			if _, ok := e["template"]; !ok {
				e["template"] = 0
			}
			delete(e, "pid")
			if g.pool != "" {
				e["pool"] = g.pool
			}
			if g.ha {
				e["hastate"] = g.haState
			}
			if s.resourcesLag > 0 && !g.createdAt.IsZero() && time.Since(g.createdAt) < s.resourcesLag {
				// name, status and template come from RRD data pvestatd broadcasts about every 10 s.
				e["status"] = "unknown"
				delete(e, "name")
			}
			out = append(out, e)
		}
	}
	if typ == "" || typ == "storage" {
		for _, n := range s.nodes {
			for _, st := range s.storages {
				if !st.onNode(n.name) {
					continue
				}
				used := s.storageUsed(st, n.name)
				e := map[string]any{"id": "storage/" + n.name + "/" + st.id, "type": "storage", "storage": st.id,
					"node": n.name, "plugintype": st.typ, "content": st.contentList(), "shared": boolInt(st.shared),
					"maxdisk": st.total, "disk": used, "status": "available"}
				if st.disabled {
					e["status"] = "unknown"
				}
				out = append(out, e)
			}
		}
	}
	if typ == "sdn" {
		for _, n := range s.nodes {
			out = append(out, map[string]any{"id": "sdn/" + n.name + "/localnetwork", "type": "sdn", "sdn": "localnetwork",
				"node": n.name, "status": "ok"})
		}
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// handleClusterOptions is GET /cluster/options (pve-manager API2/Cluster.pm get_options): datacenter.cfg
// as parsed, tag-style as an object.
func (s *Sim) handleClusterOptions(c *call) (any, error) {
	out := map[string]any{}
	for k, v := range s.datacenter {
		out[k] = v
	}
	if len(s.tagStyle) > 0 {
		ts := map[string]any{}
		for k, v := range s.tagStyle {
			if k == "case-sensitive" {
				ts[k] = atoiDef(v, 0)
				continue
			}
			ts[k] = v
		}
		out["tag-style"] = ts
	}
	return out, nil
}

// parseTagStyle parses a tag-style property string (case-sensitive, ordering, shape, color-map).
func parseTagStyle(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, tok := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(tok), "=")
		if !ok {
			return nil, fmt.Errorf("invalid token %q", tok)
		}
		switch k {
		case "case-sensitive":
			b, ok := parseBoolToken(val)
			if !ok {
				return nil, fmt.Errorf("case-sensitive: invalid boolean %q", val)
			}
			out[k] = b
		case "ordering", "shape", "color-map":
			out[k] = val
		default:
			return nil, fmt.Errorf("unknown key %q", k)
		}
	}
	return out, nil
}

// parseBoolToken reads a PVE boolean (1, 0, yes, no, on, off, true, false) as "1" or "0".
func parseBoolToken(v string) (string, bool) {
	switch strings.ToLower(v) {
	case "1", "yes", "on", "true":
		return "1", true
	case "0", "no", "off", "false":
		return "0", true
	}
	return "", false
}

// handleNextID is GET /cluster/nextid (pve-manager API2/Cluster.pm): the value is a string.
func (s *Sim) handleNextID(c *call) (any, error) {
	if c.has("vmid") {
		vmid := c.vmid()
		if _, taken := s.guests[vmid]; taken {
			return nil, paramErr(map[string]string{"vmid": fmt.Sprintf("VM %d already exists", vmid)})
		}
		return c.str("vmid"), nil
	}
	for id := 100; id < 1000000; id++ {
		if _, taken := s.guests[id]; !taken {
			return strconv.Itoa(id), nil
		}
	}
	return nil, dieErr("unable to get any free VMID in range [100, 999999]")
}
