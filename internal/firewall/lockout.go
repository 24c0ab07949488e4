package firewall

import (
	"fmt"
	"strconv"
	"strings"
)

// Guest is what the lock-out check needs of a guest's firewall.
type Guest struct {
	Enabled  bool
	PolicyIn string // "" is PVE's default, DROP
	Rules    []Rule
	Groups   map[string][]Rule // the security groups its group rules may name
}

// GuestLockout reports whether a guest's firewall could lock everyone out: enabled, dropping or rejecting
// inbound traffic by default, and no enabled rule (directly or through a security group) accepting
// anything inbound. The reason says why, for the plan's confirmation hold.
func GuestLockout(g Guest) (bool, string) {
	policy := policyOr(g.PolicyIn)
	if !g.Enabled || policy == "ACCEPT" {
		return false, ""
	}
	for _, r := range expand(g.Rules, g.Groups) {
		if r.Type == "in" && r.Action == "ACCEPT" {
			return false, ""
		}
	}
	return true, fmt.Sprintf("the firewall is enabled with inbound policy %s and no rule accepts inbound traffic", policy)
}

// Cluster is what the lock-out check needs of the cluster's firewall.
type Cluster struct {
	Enabled  bool
	PolicyIn string // "" is PVE's default, DROP
	Rules    []Rule
	Groups   map[string][]Rule
	// Management are the entries of the cluster's management IP set: PVE itself accepts the web interface
	// (8006) and SSH (22) from them. Without them PVE falls back to the cluster network, which the check
	// does not count: an administrator outside it would be locked out.
	Management []string
}

// managementPorts are the ports that must stay reachable for people to repair a cluster.
var managementPorts = []int{8006, 22}

// ClusterLockout reports whether enabling the cluster's firewall could cut administrators off: enabled,
// dropping or rejecting inbound traffic by default, and, for the web interface (8006) or SSH (22), no
// management IP set and no enabled inbound rule that accepts it before a rule dropping it for everyone.
func ClusterLockout(c Cluster) (bool, string) {
	policy := policyOr(c.PolicyIn)
	if !c.Enabled || policy == "ACCEPT" || len(c.Management) > 0 {
		return false, ""
	}
	rules := expand(c.Rules, c.Groups)
	var cut []string
	for _, port := range managementPorts {
		if !reachable(rules, port) {
			cut = append(cut, strconv.Itoa(port))
		}
	}
	if len(cut) == 0 {
		return false, ""
	}
	return true, fmt.Sprintf("the cluster firewall is enabled with inbound policy %s and nothing keeps tcp port %s reachable (no rule accepts it and the management IP set is empty)",
		policy, strings.Join(cut, " and "))
}

func policyOr(p string) string {
	if p == "" {
		return "DROP"
	}
	return p
}

// expand replaces enabled group rules by the group's enabled rules and drops disabled rules, keeping
// the order in which PVE evaluates them.
func expand(rules []Rule, groups map[string][]Rule) []Rule {
	var out []Rule
	for _, r := range rules {
		if !r.Enable {
			continue
		}
		if r.Type != "group" {
			out = append(out, r)
			continue
		}
		for _, gr := range groups[strings.ToLower(r.Action)] {
			if gr.Enable {
				if r.Iface != "" && gr.Iface == "" {
					gr.Iface = r.Iface
				}
				out = append(out, gr)
			}
		}
	}
	return out
}

// reachable walks the inbound rules in order: the first that matches tcp traffic to the port decides,
// an accept from any source or a restricted one keeping it reachable for someone, a drop or reject that
// is not restricted to some sources ending it.
func reachable(rules []Rule, port int) bool {
	for _, r := range rules {
		if r.Type != "in" || !matchesTCPPort(r, port) {
			continue
		}
		if r.Action == "ACCEPT" {
			return true
		}
		if r.Source == "" && r.Dest == "" && r.Iface == "" {
			return false
		}
	}
	return false
}

// macroTCPPorts are the TCP ports of PVE's macros that matter here.
var macroTCPPorts = map[string][]string{"ssh": {"22"}, "pmg": {"8006"}}

func matchesTCPPort(r Rule, port int) bool {
	if r.Macro != "" {
		ports, ok := macroTCPPorts[strings.ToLower(r.Macro)]
		if !ok {
			return false
		}
		if r.DPort != "" {
			return portListHas(r.DPort, port) && portListHas(strings.Join(ports, ","), port)
		}
		return portListHas(strings.Join(ports, ","), port)
	}
	switch r.Proto {
	case "", "tcp", "6":
	default:
		return false
	}
	return r.DPort == "" || portListHas(r.DPort, port)
}

// serviceTCPPorts are /etc/services names a port list may use for the management ports.
var serviceTCPPorts = map[string]int{"ssh": 22}

// portListHas reports whether a PVE port list (numbers, ranges a:b, service names) includes port.
func portListHas(list string, port int) bool {
	for _, item := range strings.Split(list, ",") {
		if lo, hi, ok := strings.Cut(item, ":"); ok {
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil && a <= port && port <= b {
				return true
			}
			continue
		}
		if n, err := strconv.Atoi(item); err == nil {
			if n == port {
				return true
			}
			continue
		}
		if serviceTCPPorts[item] == port {
			return true
		}
	}
	return false
}
