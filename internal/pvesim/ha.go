package pvesim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// High availability (pve-ha-manager src/PVE/API2/HA/Resources.pm, Rules.pm, Groups.pm, Status.pm over
// resources.cfg, rules.cfg and groups.cfg). A guest is HA-managed while resources.cfg lists it; its
// guest.ha and guest.haState mirror the resource (haSync). The simulated HA manager acts haDelay after a
// change of a resource's requested state: a started resource's guest starts, a stopped or disabled one's
// stops, an ignored one is left alone, and a migrate or relocate request moves the guest to its target.
// Rules exist only on PVE 9 clusters, groups only on PVE 8 ones (Spec.Version); the other answers as for
// a path PVE does not serve.

// haConfig is the HA stack's configuration: resources by sid (vm:100, ct:101), rules and groups by id.
type haConfig struct {
	resources map[string]*haResource
	rules     map[string]map[string]string
	groups    map[string]map[string]string
}

func newHAConfig() haConfig {
	return haConfig{resources: map[string]*haResource{}, rules: map[string]map[string]string{}, groups: map[string]map[string]string{}}
}

// haResource is one resources.cfg entry: its options (state, comment, max_restart, max_relocate,
// failback, group), and what the manager is doing with it.
type haResource struct {
	sid  string
	vmid int
	opts map[string]string
	// target is the node a migrate or relocate request moves the guest to ("" for none), move which.
	target, move string
	// seq counts requests, so that only the manager's latest pass acts.
	seq int
}

func (r *haResource) state() string {
	if st := r.opts["state"]; st != "" {
		return st
	}
	return "started"
}

var reHASid = regexp.MustCompile(`^(?:(vm|ct):)?([1-9][0-9]{2,8})$`)

func init() {
	namedFormats["pve-ha-resource-or-vm-id"] = func(v string) error {
		if !reHASid.MatchString(v) {
			return ferr("unable to parse service id '%s'", v)
		}
		return nil
	}
	namedFormats["pve-ha-resource-id"] = func(v string) error {
		if m := reHASid.FindStringSubmatch(v); m == nil || m[1] == "" {
			return ferr("unable to parse service id '%s'", v)
		}
		return nil
	}
	namedFormats["pve-ha-node"] = func(v string) error {
		name, prio, hasPrio := strings.Cut(v, ":")
		if !reNode.MatchString(name) {
			return ferr("value does not look like a valid node name")
		}
		if hasPrio {
			if n, err := strconv.Atoi(prio); err != nil || n < 0 || !isDigitString(prio) {
				return ferr("invalid node priority '%s'", prio)
			}
		}
		return nil
	}
	namedFormats["pve-ha-resource-id-list"] = listOf(namedFormats["pve-ha-resource-id"])
	namedFormats["pve-ha-node-list"] = listOf(namedFormats["pve-ha-node"])

	add := map[string]handler{
		"GET /cluster/ha/resources":                 (*Sim).handleHAResourceList,
		"POST /cluster/ha/resources":                (*Sim).handleHAResourceCreate,
		"GET /cluster/ha/resources/{sid}":           (*Sim).handleHAResourceRead,
		"PUT /cluster/ha/resources/{sid}":           (*Sim).handleHAResourceUpdate,
		"DELETE /cluster/ha/resources/{sid}":        (*Sim).handleHAResourceDelete,
		"POST /cluster/ha/resources/{sid}/migrate":  func(s *Sim, c *call) (any, error) { return s.handleHAMove(c, "migrate") },
		"POST /cluster/ha/resources/{sid}/relocate": func(s *Sim, c *call) (any, error) { return s.handleHAMove(c, "relocate") },
		"GET /cluster/ha/rules":                     (*Sim).handleHARuleList,
		"POST /cluster/ha/rules":                    (*Sim).handleHARuleCreate,
		"GET /cluster/ha/rules/{rule}":              (*Sim).handleHARuleRead,
		"PUT /cluster/ha/rules/{rule}":              (*Sim).handleHARuleUpdate,
		"DELETE /cluster/ha/rules/{rule}":           (*Sim).handleHARuleDelete,
		"GET /cluster/ha/groups":                    (*Sim).handleHAGroupList,
		"POST /cluster/ha/groups":                   (*Sim).handleHAGroupCreate,
		"GET /cluster/ha/groups/{group}":            (*Sim).handleHAGroupRead,
		"PUT /cluster/ha/groups/{group}":            (*Sim).handleHAGroupUpdate,
		"DELETE /cluster/ha/groups/{group}":         (*Sim).handleHAGroupDelete,
		"GET /cluster/ha/status/current":            (*Sim).handleHAStatusCurrent,
		"GET /cluster/ha/status/manager_status":     (*Sim).handleHAManagerStatus,
	}
	maps.Copy(handlers, add)
}

func isDigitString(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// majorVersion is the simulated PVE's major version (9 unless Spec.Version says otherwise).
func (s *Sim) majorVersion() int {
	major, _, _ := strings.Cut(s.version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 9
	}
	return n
}

// notServed is the answer to a path the simulated PVE version does not have.
func notServed(c *call) error {
	return &apiError{status: 501, msg: fmt.Sprintf("Method '%s %s' not implemented", c.method, c.path)}
}

// haSid resolves a sid parameter (vm:100, ct:100, or a bare vmid typed from the guest) as parse_sid does.
func (s *Sim) haSid(v string) (sid string, vmid int, err error) {
	m := reHASid.FindStringSubmatch(v)
	if m == nil {
		return "", 0, dieErr("unable to parse service id '%s'", v)
	}
	vmid, _ = strconv.Atoi(m[2])
	typ := m[1]
	if typ == "" {
		g, ok := s.guests[vmid]
		if !ok {
			return "", 0, dieErr("unable to find VM/CT %d", vmid)
		}
		typ = "vm"
		if g.kind == "lxc" {
			typ = "ct"
		}
	}
	return typ + ":" + m[2], vmid, nil
}

// haGuest is the guest of a resource, nil when it is gone.
func (s *Sim) haGuest(r *haResource) *guest {
	g, ok := s.guests[r.vmid]
	if !ok {
		return nil
	}
	if (g.kind == "lxc") != strings.HasPrefix(r.sid, "ct:") {
		return nil
	}
	return g
}

// haSync mirrors a resource on its guest.
func (s *Sim) haSync(vmid int) {
	g, ok := s.guests[vmid]
	if !ok {
		return
	}
	g.ha, g.haState = false, ""
	for _, r := range s.ha.resources {
		if r.vmid == vmid && s.haGuest(r) == g {
			g.ha, g.haState = true, r.state()
		}
	}
}

// haKick has the manager act on a resource after haDelay, unless a newer request comes first.
func (s *Sim) haKick(r *haResource) {
	r.seq++
	seq, sid := r.seq, r.sid
	s.after(s.haDelay, func() {
		cur := s.ha.resources[sid]
		if cur == nil || cur != r || cur.seq != seq {
			return
		}
		s.haAct(cur)
	})
}

// haAct is one pass of the manager over a resource: the move first, then the requested state.
func (s *Sim) haAct(r *haResource) {
	g := s.haGuest(r)
	if g == nil {
		return
	}
	state := r.state()
	if state == "ignored" {
		r.target, r.move = "", ""
		return
	}
	if r.target != "" {
		if r.target != g.node && s.node(r.target) != nil {
			if g.running && r.move == "relocate" {
				g.running, g.qmpstatus = false, ""
			}
			// A minimal move of the guest's config between nodes; the simulator's migration machinery
			// replaces it where it covers HA's moves.
			g.node = r.target
		}
		r.target, r.move = "", ""
	}
	switch {
	case state == "started" && !g.running:
		if g.kind == "qemu" {
			_ = s.qemuStartNow(g, taskLog{t: &task{}})
		} else if g.conf()["template"] != "1" {
			s.applyPending(g)
			g.running, g.startedAt = true, time.Now()
		}
	case (state == "stopped" || state == "disabled") && g.running:
		g.running, g.qmpstatus = false, ""
		s.applyPending(g)
	}
}

// haRequest sets a resource's requested state (a hastart or hastop task, ha-manager set) and wakes the
// manager.
func (s *Sim) haRequest(vmid int, state string) {
	for _, r := range s.ha.resources {
		if r.vmid == vmid {
			r.opts["state"] = state
			s.haSync(vmid)
			s.haKick(r)
		}
	}
}

// haPurge removes a destroyed guest's resource and its sid from the rules (destroy with purge).
func (s *Sim) haPurge(vmid int) {
	for sid, r := range s.ha.resources {
		if r.vmid == vmid {
			delete(s.ha.resources, sid)
			s.haDropFromRules(sid)
		}
	}
}

// haDropFromRules removes a sid from every rule; a rule left without resources is deleted.
func (s *Sim) haDropFromRules(sid string) {
	for id, rule := range s.ha.rules {
		list := slices.DeleteFunc(splitList(rule["resources"]), func(x string) bool { return x == sid })
		if len(list) == 0 {
			delete(s.ha.rules, id)
			continue
		}
		rule["resources"] = strings.Join(list, ",")
	}
}

// haResourceOptions are the options of a resource create or update.
var haResourceOptions = []string{"comment", "failback", "group", "max_relocate", "max_restart", "state"}

func (s *Sim) haSetOptions(r *haResource, c *call) {
	for _, k := range haResourceOptions {
		if !c.has(k) {
			continue
		}
		v := c.str(k)
		if k == "failback" {
			v, _ = parseBoolean(v)
		}
		if k == "state" && v == "enabled" {
			v = "started" // an alias PVE keeps for compatibility
		}
		r.opts[k] = v
	}
}

// haCheckGroup checks a resource's group: groups exist only on PVE 8, and the group must exist there.
func (s *Sim) haCheckGroup(c *call) error {
	if !c.has("group") {
		return nil
	}
	if s.majorVersion() >= 9 {
		return paramErr(map[string]string{"group": "ha groups have been migrated to rules"})
	}
	if g := c.str("group"); s.ha.groups[g] == nil {
		return dieErr("group '%s' does not exist", g)
	}
	return nil
}

func (s *Sim) haResourceJSON(r *haResource) map[string]any {
	out := map[string]any{"sid": r.sid, "type": r.sid[:2], "state": r.state(), "digest": s.haDigest()}
	for k, v := range r.opts {
		if k == "state" {
			continue
		}
		if k == "max_restart" || k == "max_relocate" || k == "failback" {
			n, _ := strconv.Atoi(v)
			out[k] = n
			continue
		}
		out[k] = v
	}
	return out
}

// haDigest stands in for the digest of resources.cfg: it changes whenever a resource does.
func (s *Sim) haDigest() string {
	var b strings.Builder
	for _, sid := range slices.Sorted(maps.Keys(s.ha.resources)) {
		r := s.ha.resources[sid]
		fmt.Fprintf(&b, "%s|", sid)
		for _, k := range slices.Sorted(maps.Keys(r.opts)) {
			fmt.Fprintf(&b, "%s=%s|", k, r.opts[k])
		}
	}
	return sha1Hex(b.String())
}

func (s *Sim) haResource(c *call) (*haResource, error) {
	sid, _, err := s.haSid(c.str("sid"))
	if err != nil {
		return nil, err
	}
	r := s.ha.resources[sid]
	if r == nil {
		return nil, dieErr("no such resource '%s'", sid)
	}
	return r, nil
}

// handleHAResourceList is GET /cluster/ha/resources (type filters vm or ct).
func (s *Sim) handleHAResourceList(c *call) (any, error) {
	out := []map[string]any{}
	for _, sid := range slices.Sorted(maps.Keys(s.ha.resources)) {
		if t := c.str("type"); t != "" && !strings.HasPrefix(sid, t+":") {
			continue
		}
		out = append(out, s.haResourceJSON(s.ha.resources[sid]))
	}
	return out, nil
}

func (s *Sim) handleHAResourceRead(c *call) (any, error) {
	r, err := s.haResource(c)
	if err != nil {
		return nil, err
	}
	return s.haResourceJSON(r), nil
}

// handleHAResourceCreate is POST /cluster/ha/resources: an existing guest becomes HA-managed.
func (s *Sim) handleHAResourceCreate(c *call) (any, error) {
	sid, vmid, err := s.haSid(c.str("sid"))
	if err != nil {
		return nil, err
	}
	if t := c.str("type"); t != "" && !strings.HasPrefix(sid, t+":") {
		return nil, paramErr(map[string]string{"type": fmt.Sprintf("type mismatch - '%s' is not of type '%s'", sid, t)})
	}
	if s.ha.resources[sid] != nil {
		return nil, dieErr("resource ID '%s' already defined", sid)
	}
	g, ok := s.guests[vmid]
	if !ok || (g.kind == "lxc") != strings.HasPrefix(sid, "ct:") {
		return nil, dieErr("resource '%s' does not exist in cluster", sid)
	}
	if err := s.haCheckGroup(c); err != nil {
		return nil, err
	}
	r := &haResource{sid: sid, vmid: vmid, opts: map[string]string{}}
	s.haSetOptions(r, c)
	if r.opts["state"] == "" {
		r.opts["state"] = "started"
	}
	s.ha.resources[sid] = r
	s.haSync(vmid)
	s.haKick(r)
	return nil, nil
}

// handleHAResourceUpdate is PUT /cluster/ha/resources/{sid}.
func (s *Sim) handleHAResourceUpdate(c *call) (any, error) {
	r, err := s.haResource(c)
	if err != nil {
		return nil, err
	}
	if d := c.str("digest"); d != "" && d != s.haDigest() {
		return nil, dieErr("detected modified configuration - file changed by other user? Try again.")
	}
	if err := s.haCheckGroup(c); err != nil {
		return nil, err
	}
	for _, k := range splitList(c.str("delete")) {
		if k == "sid" || k == "type" || !slices.Contains(haResourceOptions, k) {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
		delete(r.opts, k)
	}
	s.haSetOptions(r, c)
	s.haSync(r.vmid)
	s.haKick(r)
	return nil, nil
}

// handleHAResourceDelete is DELETE /cluster/ha/resources/{sid}: the guest is left as it is; with purge
// (the default) the sid also leaves the rules.
func (s *Sim) handleHAResourceDelete(c *call) (any, error) {
	r, err := s.haResource(c)
	if err != nil {
		return nil, err
	}
	delete(s.ha.resources, r.sid)
	if c.str("purge") != "0" {
		s.haDropFromRules(r.sid)
	}
	s.haSync(r.vmid)
	return nil, nil
}

// handleHAMove is POST …/migrate and …/relocate: the manager moves the guest to node (a relocate stops it
// first and starts it there).
func (s *Sim) handleHAMove(c *call, kind string) (any, error) {
	sid, _, err := s.haSid(c.str("sid"))
	if err != nil {
		return nil, err
	}
	r := s.ha.resources[sid]
	if r == nil {
		return nil, dieErr("service '%s' is not HA managed", sid)
	}
	target := c.str("node")
	if s.node(target) == nil {
		return nil, dieErr("node '%s' is not a member of the cluster", target)
	}
	// service_is_ha_managed: an ignored resource behaves as if HA did not manage it. A disabled one is moved
	// by the manager as a stopped service.
	if r.state() == "ignored" {
		return nil, dieErr("resource '%s' is not HA managed", sid)
	}
	r.target, r.move = target, kind
	s.haKick(r)
	if s.majorVersion() < 9 {
		return nil, nil
	}
	return map[string]any{"sid": sid, "requested-node": target, "comigrated-resources": []string{}, "blocking-resources": []any{}}, nil
}

// crmState is the state the CRM shows for a resource.
func (s *Sim) crmState(r *haResource) string {
	g := s.haGuest(r)
	if g == nil {
		return "error"
	}
	switch st := r.state(); {
	case st == "ignored":
		return "ignored"
	case r.target != "" && r.target != g.node:
		if r.move == "relocate" {
			return "relocate"
		}
		return "migrate"
	case st == "started" && g.running:
		return "started"
	case st == "started":
		return "request_start"
	case g.running:
		return "request_stop"
	case st == "disabled":
		return "disabled"
	default:
		return "stopped"
	}
}

// handleHAStatusCurrent is GET /cluster/ha/status/current: quorum, master, the nodes' LRMs and each resource.
func (s *Sim) handleHAStatusCurrent(c *call) (any, error) {
	master := s.nodes[0].name
	now := s.stampUnix()
	out := []map[string]any{
		{"id": "quorum", "type": "quorum", "node": master, "status": "OK", "quorate": 1},
	}
	if len(s.ha.resources) > 0 {
		out = append(out, map[string]any{"id": "master", "type": "master", "node": master,
			"status": fmt.Sprintf("%s (active, %s)", master, time.Unix(now, 0).Format("Mon Jan 2 15:04:05 2006")), "timestamp": now})
	}
	for _, n := range s.nodes {
		st := "idle"
		for _, r := range s.ha.resources {
			if g := s.haGuest(r); g != nil && g.node == n.name {
				st = "active"
			}
		}
		out = append(out, map[string]any{"id": "lrm:" + n.name, "type": "lrm", "node": n.name,
			"status": fmt.Sprintf("%s (%s, %s)", n.name, st, time.Unix(now, 0).Format("Mon Jan 2 15:04:05 2006")), "timestamp": now})
	}
	for _, sid := range slices.Sorted(maps.Keys(s.ha.resources)) {
		r := s.ha.resources[sid]
		node := ""
		if g := s.haGuest(r); g != nil {
			node = g.node
		}
		crm := s.crmState(r)
		e := map[string]any{"id": "service:" + sid, "type": "service", "sid": sid, "node": node, "state": crm,
			"crm_state": crm, "request_state": r.state(), "status": fmt.Sprintf("%s (%s, %s)", sid, node, crm),
			"max_restart": 1, "max_relocate": 1, "failback": 1}
		for _, k := range []string{"max_restart", "max_relocate", "failback"} {
			if v, ok := r.opts[k]; ok {
				e[k], _ = strconv.Atoi(v)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// handleHAManagerStatus is GET /cluster/ha/status/manager_status: the CRM's view of the nodes and resources.
func (s *Sim) handleHAManagerStatus(c *call) (any, error) {
	nodes := map[string]any{}
	for _, n := range s.nodes {
		nodes[n.name] = "online"
		if n.offline {
			nodes[n.name] = "unknown"
		}
	}
	services := map[string]any{}
	for sid, r := range s.ha.resources {
		e := map[string]any{"state": s.crmState(r), "uid": fmt.Sprintf("%x", r.seq)}
		if g := s.haGuest(r); g != nil {
			e["node"] = g.node
		}
		if r.target != "" {
			e["target"] = r.target
		}
		services[sid] = e
	}
	ms := map[string]any{"master_node": s.nodes[0].name, "node_status": nodes, "service_status": services, "timestamp": s.stampUnix()}
	return map[string]any{"manager_status": ms, "quorum": map[string]any{"node": s.nodes[0].name, "quorate": "1"}}, nil
}

// haRuleKeys are the options each rule type takes besides resources, comment and disable.
var haRuleKeys = map[string][]string{"node-affinity": {"nodes", "strict"}, "resource-affinity": {"affinity"}}

// haRuleOptions collects a rule request's options, checking the type's own ones.
func (s *Sim) haRuleOptions(c *call, typ string, into map[string]string) error {
	errs := map[string]string{}
	for _, k := range []string{"nodes", "strict", "affinity"} {
		if c.has(k) && !slices.Contains(haRuleKeys[typ], k) {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		}
	}
	if len(errs) > 0 {
		return paramErr(errs)
	}
	for _, k := range append([]string{"resources", "comment", "disable"}, haRuleKeys[typ]...) {
		if !c.has(k) {
			continue
		}
		v := c.str(k)
		if k == "strict" || k == "disable" {
			v, _ = parseBoolean(v)
		}
		into[k] = v
	}
	return nil
}

// checkHARule checks a rule as the rules' feasibility checks do: its resources are HA resources, a
// node-affinity rule's nodes exist, a resource-affinity rule names at least two resources, and a resource
// is in at most one node-affinity rule.
func (s *Sim) checkHARule(id string, rule map[string]string) error {
	typ := rule["type"]
	missing := map[string]string{}
	if typ == "node-affinity" && rule["nodes"] == "" {
		missing["nodes"] = "property is missing and it is not optional"
	}
	if typ == "resource-affinity" && rule["affinity"] == "" {
		missing["affinity"] = "property is missing and it is not optional"
	}
	if len(missing) > 0 {
		return paramErr(missing)
	}
	resources := splitList(rule["resources"])
	for _, sid := range resources {
		if s.ha.resources[sid] == nil {
			return dieErr("cannot use unmanaged resource '%s' in rule '%s'", sid, id)
		}
	}
	for _, n := range splitList(rule["nodes"]) {
		name, _, _ := strings.Cut(n, ":")
		if s.node(name) == nil {
			return dieErr("node '%s' in rule '%s' is not a cluster node", name, id)
		}
	}
	if typ == "resource-affinity" && len(resources) < 2 {
		return dieErr("rule '%s' must specify at least two resources", id)
	}
	if typ == "node-affinity" {
		for _, other := range slices.Sorted(maps.Keys(s.ha.rules)) {
			o := s.ha.rules[other]
			if other == id || o["type"] != "node-affinity" {
				continue
			}
			for _, sid := range resources {
				if slices.Contains(splitList(o["resources"]), sid) {
					return dieErr("resource '%s' is already used in node affinity rule '%s'", sid, other)
				}
			}
		}
	}
	return nil
}

func (s *Sim) haRuleJSON(id string, rule map[string]string) map[string]any {
	out := map[string]any{"rule": id, "digest": s.haDigest()}
	for k, v := range rule {
		if k == "strict" || k == "disable" {
			out[k], _ = strconv.Atoi(v)
			continue
		}
		out[k] = v
	}
	return out
}

// haSection is an id-keyed section of the HA configuration, rules (PVE 9) or groups (PVE 8): the release
// that serves it, the path parameter naming an entry, and the entry's name in PVE's messages.
type haSection struct {
	param   string
	noun    string
	served  func(*Sim, *call) error
	entries func(*Sim) map[string]map[string]string
}

var (
	haRules = haSection{param: "rule", noun: "ha rule", served: (*Sim).rulesServed,
		entries: func(s *Sim) map[string]map[string]string { return s.ha.rules }}
	haGroups = haSection{param: "group", noun: "ha group", served: (*Sim).groupsServed,
		entries: func(s *Sim) map[string]map[string]string { return s.ha.groups }}
)

// haEntry is the entry of sec that c names, when this release serves sec and the entry exists.
func (s *Sim) haEntry(c *call, sec haSection) (id string, entry map[string]string, err error) {
	if err := sec.served(s, c); err != nil {
		return "", nil, err
	}
	id = c.str(sec.param)
	if entry = sec.entries(s)[id]; entry == nil {
		return id, nil, dieErr("no such %s '%s'", sec.noun, id)
	}
	return id, entry, nil
}

// haNewID is the id of the entry of sec that c creates, when this release serves sec and the id is free.
func (s *Sim) haNewID(c *call, sec haSection) (string, error) {
	if err := sec.served(s, c); err != nil {
		return "", err
	}
	id := c.str(sec.param)
	if sec.entries(s)[id] != nil {
		return "", dieErr("%s '%s' already defined", sec.noun, id)
	}
	return id, nil
}

func (s *Sim) rulesServed(c *call) error {
	if s.majorVersion() < 9 {
		return notServed(c)
	}
	return nil
}

func (s *Sim) handleHARuleList(c *call) (any, error) {
	if err := s.rulesServed(c); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.ha.rules)) {
		rule := s.ha.rules[id]
		if t := c.str("type"); t != "" && rule["type"] != t {
			continue
		}
		if res := c.str("resource"); res != "" && !slices.Contains(splitList(rule["resources"]), res) {
			continue
		}
		out = append(out, s.haRuleJSON(id, rule))
	}
	return out, nil
}

func (s *Sim) handleHARuleRead(c *call) (any, error) {
	id, rule, err := s.haEntry(c, haRules)
	if err != nil {
		return nil, err
	}
	return s.haRuleJSON(id, rule), nil
}

func (s *Sim) handleHARuleCreate(c *call) (any, error) {
	id, err := s.haNewID(c, haRules)
	if err != nil {
		return nil, err
	}
	rule := map[string]string{"type": c.str("type")}
	if err := s.haRuleOptions(c, rule["type"], rule); err != nil {
		return nil, err
	}
	if err := s.checkHARule(id, rule); err != nil {
		return nil, err
	}
	s.ha.rules[id] = rule
	return nil, nil
}

func (s *Sim) handleHARuleUpdate(c *call) (any, error) {
	id, rule, err := s.haEntry(c, haRules)
	if err != nil {
		return nil, err
	}
	if t := c.str("type"); t != rule["type"] {
		return nil, paramErr(map[string]string{"type": fmt.Sprintf("rule type mismatch - '%s' is a '%s' rule", id, rule["type"])})
	}
	if d := c.str("digest"); d != "" && d != s.haDigest() {
		return nil, dieErr("detected modified configuration - file changed by other user? Try again.")
	}
	next := maps.Clone(rule)
	for _, k := range splitList(c.str("delete")) {
		if !slices.Contains(append([]string{"comment", "disable"}, haRuleKeys[rule["type"]]...), k) {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
		delete(next, k)
	}
	if err := s.haRuleOptions(c, rule["type"], next); err != nil {
		return nil, err
	}
	if err := s.checkHARule(id, next); err != nil {
		return nil, err
	}
	s.ha.rules[id] = next
	return nil, nil
}

func (s *Sim) handleHARuleDelete(c *call) (any, error) {
	id, _, err := s.haEntry(c, haRules)
	if err != nil {
		return nil, err
	}
	delete(s.ha.rules, id)
	return nil, nil
}

// Groups: PVE 8's node preferences of resources (nodes node[:prio], restricted, nofailback, comment).

func (s *Sim) groupsServed(c *call) error {
	if s.majorVersion() >= 9 {
		return notServed(c)
	}
	return nil
}

var haGroupOptions = []string{"nodes", "restricted", "nofailback", "comment"}

func (s *Sim) haGroupJSON(id string, g map[string]string) map[string]any {
	out := map[string]any{"group": id, "type": "group", "digest": s.haDigest()}
	for k, v := range g {
		if k == "restricted" || k == "nofailback" {
			out[k], _ = strconv.Atoi(v)
			continue
		}
		out[k] = v
	}
	return out
}

func (s *Sim) haGroupSet(c *call, g map[string]string) error {
	for _, k := range haGroupOptions {
		if !c.has(k) {
			continue
		}
		v := c.str(k)
		if k == "restricted" || k == "nofailback" {
			v, _ = parseBoolean(v)
		}
		g[k] = v
	}
	for _, n := range splitList(g["nodes"]) {
		name, _, _ := strings.Cut(n, ":")
		if s.node(name) == nil {
			return dieErr("node '%s' is not a cluster node", name)
		}
	}
	return nil
}

func (s *Sim) handleHAGroupList(c *call) (any, error) {
	if err := s.groupsServed(c); err != nil {
		return nil, err
	}
	out := []map[string]any{}
	for _, id := range slices.Sorted(maps.Keys(s.ha.groups)) {
		out = append(out, s.haGroupJSON(id, s.ha.groups[id]))
	}
	return out, nil
}

func (s *Sim) handleHAGroupRead(c *call) (any, error) {
	id, g, err := s.haEntry(c, haGroups)
	if err != nil {
		return nil, err
	}
	return s.haGroupJSON(id, g), nil
}

func (s *Sim) handleHAGroupCreate(c *call) (any, error) {
	id, err := s.haNewID(c, haGroups)
	if err != nil {
		return nil, err
	}
	g := map[string]string{}
	if err := s.haGroupSet(c, g); err != nil {
		return nil, err
	}
	s.ha.groups[id] = g
	return nil, nil
}

func (s *Sim) handleHAGroupUpdate(c *call) (any, error) {
	id, g, err := s.haEntry(c, haGroups)
	if err != nil {
		return nil, err
	}
	next := maps.Clone(g)
	for _, k := range splitList(c.str("delete")) {
		if k == "nodes" || !slices.Contains(haGroupOptions, k) {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unknown option '%s'", k)})
		}
		delete(next, k)
	}
	if err := s.haGroupSet(c, next); err != nil {
		return nil, err
	}
	s.ha.groups[id] = next
	return nil, nil
}

func (s *Sim) handleHAGroupDelete(c *call) (any, error) {
	id, _, err := s.haEntry(c, haGroups)
	if err != nil {
		return nil, err
	}
	for _, sid := range slices.Sorted(maps.Keys(s.ha.resources)) {
		if s.ha.resources[sid].opts["group"] == id {
			return nil, dieErr("ha group '%s' is used by resource '%s'", id, sid)
		}
	}
	delete(s.ha.groups, id)
	return nil, nil
}

// HAResource returns a resource's options with its crm state under "crm_state" (nil when there is none),
// for tests.
func (s *Sim) HAResource(sid string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.ha.resources[sid]
	if r == nil {
		return nil
	}
	out := maps.Clone(r.opts)
	out["crm_state"] = s.crmState(r)
	if g := s.haGuest(r); g != nil {
		out["node"] = g.node
	}
	return out
}

// setHAManaged makes a guest an HA resource whose requested state is its power state (the manager has
// nothing to do), or removes its resource and its sid from the rules.
func (s *Sim) setHAManaged(g *guest, managed bool) {
	typ := "vm"
	if g.kind == "lxc" {
		typ = "ct"
	}
	sid := fmt.Sprintf("%s:%d", typ, g.vmid)
	if !managed {
		if s.ha.resources[sid] != nil {
			delete(s.ha.resources, sid)
			s.haDropFromRules(sid)
		}
		s.haSync(g.vmid)
		return
	}
	state := "stopped"
	if g.running {
		state = "started"
	}
	r := s.ha.resources[sid]
	if r == nil {
		r = &haResource{sid: sid, vmid: g.vmid, opts: map[string]string{}}
		s.ha.resources[sid] = r
	}
	r.opts["state"] = state
	s.haSync(g.vmid)
}
