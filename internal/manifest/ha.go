package manifest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/yamldecode"
)

// GuestHA is a guest's spec.ha: the HA resource (vm:<vmid>, ct:<vmid>) ProxOps keeps for it.
type GuestHA struct {
	// State is the resource's requested state: started (the default), stopped, disabled or ignored. While
	// HA manages the guest (all but ignored) its run state is this one.
	State string `yaml:"state,omitempty"`
	// MaxRestart and MaxRelocate are PVE's max_restart and max_relocate; absent: not owned.
	MaxRestart  *int `yaml:"max-restart,omitempty"`
	MaxRelocate *int `yaml:"max-relocate,omitempty"`
	// Failback is PVE 9's failback; absent: not owned.
	Failback *bool `yaml:"failback,omitempty"`
	// Comment is the resource's comment without the ownership marker, which ProxOps appends.
	Comment string `yaml:"comment,omitempty"`
}

// The requested states of an HA resource.
const (
	HAStarted  = "started"
	HAStopped  = "stopped"
	HADisabled = "disabled"
	HAIgnored  = "ignored"
)

// HARuleSpec is the spec of an HARule: a PVE 9 HA rule (/cluster/ha/rules).
type HARuleSpec struct {
	// ID is PVE's rule id; defaults to metadata.name.
	ID string `yaml:"id,omitempty"`
	// Type is node-affinity or resource-affinity.
	Type string `yaml:"type"`
	// Resources name the guests the rule is about by manifest name (name, or VM/name and LXC/name where a VM
	// and a container share the name); each must declare spec.ha.
	Resources []string `yaml:"resources"`
	// Nodes are a node-affinity rule's nodes, each with an optional priority (higher first).
	Nodes []HARuleNode `yaml:"nodes,omitempty"`
	// Strict keeps a node-affinity rule's resources on its nodes only.
	Strict bool `yaml:"strict,omitempty"`
	// Affinity is a resource-affinity rule's positive (together) or negative (apart).
	Affinity string `yaml:"affinity,omitempty"`
	// Disable keeps the rule without applying it.
	Disable bool `yaml:"disable,omitempty"`
	// Comment is the rule's comment without the ownership marker, which ProxOps appends.
	Comment string `yaml:"comment,omitempty"`
}

// HARuleNode is one node of a node-affinity rule.
type HARuleNode struct {
	Node     string `yaml:"node"`
	Priority *int   `yaml:"priority,omitempty"`
}

// The HA rule types and affinities.
const (
	HARuleNodeAffinity     = "node-affinity"
	HARuleResourceAffinity = "resource-affinity"
	AffinityPositive       = "positive"
	AffinityNegative       = "negative"
)

// HARule returns the spec of an HARule, else nil.
func (r *Resource) HARule() *HARuleSpec {
	s, _ := r.Spec.(*HARuleSpec)
	return s
}

// GuestHA returns a guest's spec.ha, nil when it declares none.
func (r *Resource) GuestHA() *GuestHA { return r.guest().ha }

// HAState is the requested state of spec.ha: started when absent.
func (h *GuestHA) HAState() string {
	if h.State == "" {
		return HAStarted
	}
	return h.State
}

// Manages reports whether HA manages the guest's run state (every state but ignored).
func (h *GuestHA) Manages() bool { return h != nil && h.HAState() != HAIgnored }

// RunState is the guest's run state an HA state asks for: started, or stopped for stopped and disabled; ""
// for ignored, which leaves it to spec.state.
func (h *GuestHA) RunState() State {
	switch h.HAState() {
	case HAStarted:
		return StateStarted
	case HAStopped, HADisabled:
		return StateStopped
	default:
		return ""
	}
}

// HASID is a guest's HA resource id: vm:<vmid> for a VM, ct:<vmid> for a container.
func HASID(k Kind, vmid int) string {
	if k.IsContainer() {
		return "ct:" + strconv.Itoa(vmid)
	}
	return "vm:" + strconv.Itoa(vmid)
}

// IDOrName is the rule's PVE id: spec.id, else the manifest's name.
func (s *HARuleSpec) IDOrName(name string) string {
	if s.ID != "" {
		return s.ID
	}
	return name
}

// NodeList is a node-affinity rule's nodes as PVE writes them: node[:priority], comma-separated.
func (s *HARuleSpec) NodeList() string {
	parts := make([]string, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		if n.Priority != nil {
			parts = append(parts, fmt.Sprintf("%s:%d", n.Node, *n.Priority))
		} else {
			parts = append(parts, n.Node)
		}
	}
	return strings.Join(parts, ",")
}

// ParseGuestName splits a rule's resource entry into a kind (VM or LXC, "" for a bare name) and a name.
func ParseGuestName(v string) (Kind, string) {
	if ref, ok := ParseRef(v); ok {
		return ref.Kind, ref.Name
	}
	return "", v
}

func resolveHA(h *GuestHA) *GuestHA {
	if h == nil {
		return nil
	}
	out := *h
	out.State = h.HAState()
	out.MaxRestart, out.MaxRelocate, out.Failback = clonePtr(h.MaxRestart), clonePtr(h.MaxRelocate), clonePtr(h.Failback)
	return &out
}

func resolveHARule(name string, s *HARuleSpec) *HARuleSpec {
	out := *s
	out.ID = s.IDOrName(name)
	out.Resources = append([]string(nil), s.Resources...)
	out.Nodes = make([]HARuleNode, len(s.Nodes))
	for i, n := range s.Nodes {
		out.Nodes[i] = HARuleNode{Node: n.Node, Priority: clonePtr(n.Priority)}
	}
	return &out
}

// haRuleIDRE is PVE's pve-configid.
var haRuleIDRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]+$`)

// guestHA checks a guest's spec.ha and that spec.state agrees with it.
func (c *checker) guestHA(h *GuestHA, state State) {
	if h == nil {
		return
	}
	if c.r.Kind.IsTemplate() {
		c.errorf("spec.ha", "a template never runs and cannot be an HA resource; remove spec.ha")
		return
	}
	switch h.State {
	case "", HAStarted, HAStopped, HADisabled, HAIgnored:
	default:
		c.errorf("spec.ha.state", "invalid HA state %s (want started|stopped|disabled|ignored)", diag.Excerpt(h.State))
	}
	if want := h.RunState(); want != "" && state != "" && state != want {
		c.errorf("spec.state", "is %s, but spec.ha.state %s makes HA keep the guest %s: HA decides the run state of the guests it manages; set spec.state to %s or remove it",
			state, h.HAState(), want, want)
	}
	if h.MaxRestart != nil && *h.MaxRestart < 0 {
		c.errorf("spec.ha.max-restart", "must be 0 or more")
	}
	if h.MaxRelocate != nil && *h.MaxRelocate < 0 {
		c.errorf("spec.ha.max-relocate", "must be 0 or more")
	}
	c.objectComment("spec.ha.comment", h.Comment)
}

// objectComment checks the comment of a cluster object ProxOps marks.
func (c *checker) objectComment(field, v string) {
	if strings.Contains(v, "\x00") {
		c.errorf(field, "must not contain a NUL character")
	}
	if pveformat.Marked(v) {
		c.errorf(field, "must not contain the ownership marker %s: ProxOps adds it", pveformat.OwnershipMarker)
	}
}

// haRule checks an HARule's spec on its own; its resources are resolved against the repository's guests by
// the repository loader.
func (c *checker) haRule(s *HARuleSpec) {
	if s.ID != "" || c.has("spec.id") {
		if !haRuleIDRE.MatchString(s.ID) {
			c.errorf("spec.id", "invalid HA rule id %s (a letter, then letters, digits, hyphens and underscores; at least two characters)", diag.Excerpt(s.ID))
		}
	} else if !haRuleIDRE.MatchString(c.r.Metadata.Name) {
		c.errorf("metadata.name", "%s is not a valid HA rule id (a letter first); set spec.id", diag.Excerpt(c.r.Metadata.Name))
	}
	if len(s.Resources) == 0 {
		c.errorf("spec.resources", "required: the guests the rule is about")
	}
	for i, v := range s.Resources {
		field := yamldecode.Index("spec.resources", i)
		kind, name := ParseGuestName(v)
		if kind != "" && kind != KindVM && kind != KindLXC {
			c.errorf(field, "%s is not a guest: name a VM or an LXC", diag.Excerpt(v))
			continue
		}
		c.name(field, name)
	}
	switch s.Type {
	case HARuleNodeAffinity:
		if len(s.Nodes) == 0 {
			c.errorf("spec.nodes", "required for a node-affinity rule")
		}
		if s.Affinity != "" {
			c.errorf("spec.affinity", "only a resource-affinity rule has an affinity")
		}
		for i, n := range s.Nodes {
			field := yamldecode.Index("spec.nodes", i)
			c.node(field+".node", n.Node)
			if n.Priority != nil && *n.Priority < 0 {
				c.errorf(field+".priority", "must be 0 or more")
			}
		}
	case HARuleResourceAffinity:
		switch s.Affinity {
		case AffinityPositive, AffinityNegative:
		case "":
			c.errorf("spec.affinity", "required for a resource-affinity rule (positive|negative)")
		default:
			c.errorf("spec.affinity", "invalid affinity %s (want positive|negative)", diag.Excerpt(s.Affinity))
		}
		if len(s.Nodes) > 0 {
			c.errorf("spec.nodes", "only a node-affinity rule has nodes")
		}
		if s.Strict {
			c.errorf("spec.strict", "only a node-affinity rule is strict")
		}
		if len(s.Resources) == 1 {
			c.errorf("spec.resources", "a resource-affinity rule names at least two guests")
		}
	case "":
		c.errorf("spec.type", "required (node-affinity|resource-affinity)")
	default:
		c.errorf("spec.type", "invalid HA rule type %s (want node-affinity|resource-affinity)", diag.Excerpt(s.Type))
	}
	c.objectComment("spec.comment", s.Comment)
}

// FindHAGuest resolves a rule's resource entry among a cluster's resources: the VM or LXC of that name (a
// bare name must name one guest). It returns the guest, or why there is none.
func FindHAGuest(entry string, resources []*Resource) (*Resource, string) {
	kind, name := ParseGuestName(entry)
	var found []*Resource
	for _, r := range resources {
		if r.Metadata.Name != name || (r.Kind != KindVM && r.Kind != KindLXC) || (kind != "" && r.Kind != kind) {
			continue
		}
		found = append(found, r)
	}
	switch {
	case len(found) == 0:
		return nil, fmt.Sprintf("no VM or LXC named %s is declared in this cluster", diag.Excerpt(entry))
	case len(found) > 1:
		return nil, fmt.Sprintf("both VM/%s and LXC/%s exist: write VM/%s or LXC/%s", name, name, name, name)
	case found[0].GuestHA() == nil:
		return nil, fmt.Sprintf("%s declares no spec.ha: an HA rule is about HA resources; add spec.ha to it", found[0].Ref())
	}
	return found[0], ""
}
