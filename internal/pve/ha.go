package pve

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/pveformat"
)

// HAResource is an HA resource as GET /cluster/ha/resources reports it, with where the HA manager has it.
type HAResource struct {
	// SID is vm:<vmid> or ct:<vmid>.
	SID         string
	VMID        int
	State       string // requested: started, stopped, disabled, ignored
	Comment     string
	MaxRestart  int
	MaxRelocate int
	Failback    bool
	Group       string
	// Node and CRMState are the manager's view (GET /cluster/ha/status/current): where the resource is and
	// what the manager is doing (started, stopped, request_start, migrate, ...).
	Node     string
	CRMState string
}

// HARule is a PVE 9 HA rule.
type HARule struct {
	ID        string
	Type      string // node-affinity or resource-affinity
	Resources []string
	// Nodes are node[:priority] entries (node-affinity).
	Nodes    []string
	Strict   bool
	Affinity string // positive or negative (resource-affinity)
	Comment  string
	Disable  bool
}

// HAGroup is a PVE 8 HA group.
type HAGroup struct {
	ID         string
	Nodes      []string
	Restricted bool
	NoFailback bool
	Comment    string
}

// Version is what GET /version reports.
type Version struct {
	Version string // 9.1.1
	Release string // 9.1
	Major   int
}

// ReadVersion reads PVE's version.
func (c *Client) ReadVersion(ctx context.Context) (Version, error) {
	raw, err := c.getRaw(ctx, "/version", nil, nil)
	if err != nil {
		return Version{}, fmt.Errorf("read version: %w", err)
	}
	var v struct {
		Version string `json:"version"`
		Release string `json:"release"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return Version{}, fmt.Errorf("read version: %w", err)
	}
	major, _, _ := strings.Cut(v.Version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return Version{}, fmt.Errorf("read version: unexpected version %q", v.Version)
	}
	return Version{Version: v.Version, Release: v.Release, Major: n}, nil
}

// jsonInt reads a number PVE sends as a number or a string; absent is def.
func jsonInt(raw json.RawMessage, def int) int {
	s := strings.Trim(string(raw), `"`)
	if s == "" || s == "null" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}

// ListHAResources lists the HA resources with the manager's view of each.
func (c *Client) ListHAResources(ctx context.Context) ([]HAResource, error) {
	out, err := c.haResources(ctx)
	if err != nil {
		return nil, err
	}
	status, err := c.haStatus(ctx)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if s, ok := status[out[i].SID]; ok {
			out[i].Node, out[i].CRMState = s[0], s[1]
		}
	}
	return out, nil
}

// haResources lists the HA resources as resources.cfg holds them (GET /cluster/ha/resources).
func (c *Client) haResources(ctx context.Context) ([]HAResource, error) {
	raw, err := c.getRaw(ctx, "/cluster/ha/resources", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list ha resources: %w", err)
	}
	var entries []struct {
		SID         string          `json:"sid"`
		State       string          `json:"state"`
		Comment     string          `json:"comment"`
		Group       string          `json:"group"`
		MaxRestart  json.RawMessage `json:"max_restart"`
		MaxRelocate json.RawMessage `json:"max_relocate"`
		Failback    json.RawMessage `json:"failback"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("list ha resources: %w", err)
	}
	out := make([]HAResource, 0, len(entries))
	for _, e := range entries {
		_, id, _ := strings.Cut(e.SID, ":")
		vmid, err := strconv.Atoi(id)
		if err != nil {
			return nil, fmt.Errorf("list ha resources: unexpected sid %q", e.SID)
		}
		r := HAResource{SID: e.SID, VMID: vmid, State: e.State, Comment: e.Comment, Group: e.Group,
			MaxRestart: jsonInt(e.MaxRestart, 1), MaxRelocate: jsonInt(e.MaxRelocate, 1), Failback: jsonInt(e.Failback, 1) == 1}
		if r.State == "" || r.State == "enabled" {
			r.State = "started"
		}
		out = append(out, r)
	}
	return out, nil
}

// haStatus is the manager's node and state of each resource.
func (c *Client) haStatus(ctx context.Context) (map[string][2]string, error) {
	raw, err := c.getRaw(ctx, "/cluster/ha/status/current", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("read ha status: %w", err)
	}
	var entries []struct {
		Type  string `json:"type"`
		SID   string `json:"sid"`
		Node  string `json:"node"`
		State string `json:"state"`
		CRM   string `json:"crm_state"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("read ha status: %w", err)
	}
	out := map[string][2]string{}
	for _, e := range entries {
		if e.Type != "service" {
			continue
		}
		st := e.CRM
		if st == "" {
			st = e.State
		}
		out[e.SID] = [2]string{e.Node, st}
	}
	return out, nil
}

// ListHARules lists the HA rules (PVE 9).
func (c *Client) ListHARules(ctx context.Context) ([]HARule, error) {
	raw, err := c.getRaw(ctx, "/cluster/ha/rules", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list ha rules: %w", err)
	}
	var entries []struct {
		Rule      string          `json:"rule"`
		Type      string          `json:"type"`
		Resources string          `json:"resources"`
		Nodes     string          `json:"nodes"`
		Strict    json.RawMessage `json:"strict"`
		Affinity  string          `json:"affinity"`
		Comment   string          `json:"comment"`
		Disable   json.RawMessage `json:"disable"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("list ha rules: %w", err)
	}
	out := make([]HARule, 0, len(entries))
	for _, e := range entries {
		out = append(out, HARule{ID: e.Rule, Type: e.Type, Resources: pveformat.SplitList(e.Resources),
			Nodes: pveformat.SplitList(e.Nodes), Strict: jsonInt(e.Strict, 0) == 1, Affinity: e.Affinity,
			Comment: e.Comment, Disable: jsonInt(e.Disable, 0) == 1})
	}
	return out, nil
}

// ListHAGroups lists the HA groups (PVE 8).
func (c *Client) ListHAGroups(ctx context.Context) ([]HAGroup, error) {
	raw, err := c.getRaw(ctx, "/cluster/ha/groups", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list ha groups: %w", err)
	}
	var entries []struct {
		Group      string          `json:"group"`
		Nodes      string          `json:"nodes"`
		Restricted json.RawMessage `json:"restricted"`
		NoFailback json.RawMessage `json:"nofailback"`
		Comment    string          `json:"comment"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("list ha groups: %w", err)
	}
	out := make([]HAGroup, 0, len(entries))
	for _, e := range entries {
		out = append(out, HAGroup{ID: e.Group, Nodes: pveformat.SplitList(e.Nodes), Restricted: jsonInt(e.Restricted, 0) == 1,
			NoFailback: jsonInt(e.NoFailback, 0) == 1, Comment: e.Comment})
	}
	return out, nil
}

// readComment finds the object match accepts in a list and returns its comment.
func readComment[T any](list []T, match func(T) (string, bool)) (string, bool) {
	for _, x := range list {
		if comment, ok := match(x); ok {
			return comment, true
		}
	}
	return "", false
}

var haResourceObject = restObject(ObjectKindHAResource, "HA resource", "sid", "/cluster/ha/resources",
	(*Client).ListHAResources, func(r HAResource, id string) (string, bool) { return r.Comment, r.SID == id })

var haRuleObject = func() clusterObject {
	o := restObject(ObjectKindHARule, "HA rule", "rule", "/cluster/ha/rules", (*Client).ListHARules,
		func(r HARule, id string) (string, bool) { return r.Comment, r.ID == id })
	update := o.update
	o.update = func(ctx context.Context, c *Client, id string, body map[string]string) error {
		if body["type"] == "" {
			// PVE's update names the rule's type; a claim writes only the comment.
			raw, err := c.getRaw(ctx, "/cluster/ha/rules/{rule}", []string{id}, nil)
			if err != nil {
				return err
			}
			var r struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("read ha rule %s: %w", id, err)
			}
			body["type"] = r.Type
		}
		return update(ctx, c, id, body)
	}
	return o
}()
