package pvesim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"time"
)

// The Go API tests and the rest of ProxOps use to read and change the simulated cluster directly.

// Config returns a copy of a guest's current config (the part of the file before any section, pending
// changes not applied), keyed as in the file; description included. ok is false if the guest does not exist.
func (s *Sim) Config(vmid int) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return nil, false
	}
	out := map[string]string{}
	for k, v := range g.conf() {
		out[k] = v
	}
	return out, true
}

// PendingConfig returns a copy of a guest's pending section (with the "delete" list), or nil.
func (s *Sim) PendingConfig(vmid int) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok || g.file.pending == nil {
		return nil
	}
	out := map[string]string{}
	for k, v := range g.file.pending.conf {
		out[k] = v
	}
	return out
}

// RawConfig returns the guest's config file text as PVE would store it.
func (s *Sim) RawConfig(vmid int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return "", false
	}
	return g.raw, true
}

// Exists reports whether a guest with this vmid exists anywhere in the cluster.
func (s *Sim) Exists(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.guests[vmid]
	return ok
}

// NodeOf returns the node and type (qemu or lxc) of a guest.
func (s *Sim) NodeOf(vmid int) (node, kind string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return "", "", false
	}
	return g.node, g.kind, true
}

// Running reports whether a guest is running.
func (s *Sim) Running(vmid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	return ok && g.running
}

// SetConfig sets a config key by hand (drift), bypassing the API and its checks; the digest changes.
func (s *Sim) SetConfig(vmid int, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return fmt.Errorf("set config: guest %d does not exist", vmid)
	}
	g.conf()[key] = value
	g.write()
	return nil
}

// DeleteConfig removes a config key by hand.
func (s *Sim) DeleteConfig(vmid int, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return fmt.Errorf("delete config: guest %d does not exist", vmid)
	}
	delete(g.conf(), key)
	g.write()
	return nil
}

// SetRunning sets a guest's power state by hand (pending changes are not applied).
func (s *Sim) SetRunning(vmid int, running bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.guests[vmid]
	if !ok {
		return fmt.Errorf("set running: guest %d does not exist", vmid)
	}
	g.running = running
	g.qmpstatus = ""
	if running {
		g.qmpstatus, g.startedAt = "running", time.Now()
	}
	return nil
}

// SetToken creates an API token, or gives an existing one a new secret: a rotation, after which the old
// secret is refused at once.
func (s *Sim) SetToken(id, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[id] = secret
}

// Requests returns a copy of the request log, oldest first (secrets redacted).
func (s *Sim) Requests() []RequestLogEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]RequestLogEntry(nil), s.log...)
}

// Count returns how many requests reached a method and schema path, e.g. Count("GET",
// "/nodes/{node}/qemu/{vmid}/pending").
func (s *Sim) Count(method, template string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[method+" "+template]
}

// Counts returns all request counters keyed "METHOD /template".
func (s *Sim) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.counters {
		out[k] = v
	}
	return out
}

// ResetLog clears the request log and the counters.
func (s *Sim) ResetLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
	s.counters = map[string]int{}
}

// Warnings returns the messages PVE's parser would have logged while loading seeded configs.
func (s *Sim) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.warnings...)
}

// DumpState is the JSON form of the simulator's state.
type DumpState struct {
	Guests  []DumpGuest  `json:"guests"`
	Volumes []DumpVolume `json:"volumes"`
	Tasks   []DumpTask   `json:"tasks"`
}

// DumpGuest is one guest in a state dump.
type DumpGuest struct {
	VMID    int    `json:"vmid"`
	Type    string `json:"type"`
	Node    string `json:"node"`
	Running bool   `json:"running"`
	Digest  string `json:"digest"`
	Config  string `json:"config"`
}

// DumpVolume is one volume in a state dump.
type DumpVolume struct {
	VolID   string `json:"volid"`
	Node    string `json:"node,omitempty"`
	Content string `json:"content"`
	Format  string `json:"format"`
	Size    int64  `json:"size"`
	VMID    int    `json:"vmid,omitempty"`
}

// DumpTask is one task in a state dump.
type DumpTask struct {
	UPID   string   `json:"upid"`
	Status string   `json:"status"`
	Exit   string   `json:"exitstatus,omitempty"`
	Log    []string `json:"log"`
}

// Dump returns the state as indented JSON, in a stable order.
func (s *Sim) Dump() ([]byte, error) {
	s.mu.Lock()
	var d DumpState
	for _, g := range s.sortedGuests() {
		d.Guests = append(d.Guests, DumpGuest{VMID: g.vmid, Type: g.kind, Node: g.node, Running: g.running,
			Digest: g.digest(), Config: g.raw})
	}
	for _, v := range s.volumes {
		d.Volumes = append(d.Volumes, DumpVolume{VolID: v.volid, Node: v.node, Content: v.content, Format: v.format,
			Size: v.size, VMID: v.vmid})
	}
	for _, t := range s.taskOrder {
		st := "running"
		if !t.running {
			st = "stopped"
		}
		d.Tasks = append(d.Tasks, DumpTask{UPID: t.upid, Status: st, Exit: t.exit, Log: append([]string(nil), t.lines...)})
	}
	s.mu.Unlock()
	sort.Slice(d.Volumes, func(i, j int) bool {
		if d.Volumes[i].VolID != d.Volumes[j].VolID {
			return d.Volumes[i].VolID < d.Volumes[j].VolID
		}
		return d.Volumes[i].Node < d.Volumes[j].Node
	})
	return json.MarshalIndent(d, "", "  ")
}

// checkPool is RPCEnvironment check_pool_exist (a permission exception in PVE).
func (s *Sim) checkPool(pool string) error {
	if pool == "" || s.pools[pool] != nil {
		return nil
	}
	return permErr(fmt.Sprintf("pool '%s' does not exist", pool))
}

// adminRequest marks the context of a request AdminRequest makes: it is root's, whatever tokens the
// simulator holds. Only a request made in process can carry it.
type adminRequest struct{}

// AdminRequest sends one API request as root@pam, in process, the way an administrator changes PVE by hand
// outside ProxOps (pvesh, the web interface): it passes every check any request passes but the
// authentication, and is logged like one. params travel as the form body (the query of a GET or DELETE). It returns an error
// naming the request, the status and PVE's answer when PVE refuses it.
func (s *Sim) AdminRequest(method, path string, params url.Values) error {
	target, body := "/api2/json"+path, params.Encode()
	if method == http.MethodGet || method == http.MethodDelete {
		if body != "" {
			target += "?" + body
		}
		body = ""
	}
	req := httptest.NewRequestWithContext(context.WithValue(context.Background(), adminRequest{}, true), method, target,
		strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s: %s", method, path, rec.Code, http.StatusText(rec.Code), strings.TrimSpace(rec.Body.String()))
	}
	return nil
}
