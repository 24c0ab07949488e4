package firewall

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// The checks below are pve-firewall's own (PVE/Firewall.pm): what PVE accepts in a rule, an IP set entry
// and an alias, so a declared firewall is refused in git, with its position, rather than by PVE mid-apply.

// Actions are the actions of an in or out rule.
var Actions = []string{"ACCEPT", "DROP", "REJECT"}

// LogLevels are the log levels of a rule and of a guest's log-level options.
var LogLevels = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug", "nolog"}

// CheckProto checks a protocol: a name of /etc/protocols or a number 0-255.
func CheckProto(p string) error {
	if IsProtocolName(p) {
		return nil
	}
	if n, err := strconv.Atoi(p); err == nil && n >= 0 && n <= 255 {
		return nil
	}
	return fmt.Errorf("unknown protocol %q", p)
}

var (
	portRangeRE = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
	portNumRE   = regexp.MustCompile(`^[0-9]+$`)
	// NameRE is the name of a security group, an IP set or an alias.
	NameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_]+$`)
	// GuestIfaceRE is the interface of a guest's rule: one of its NICs.
	GuestIfaceRE = regexp.MustCompile(`^net[0-9]+$`)
	// IfaceRE is PVE's interface name of a rule (pve-iface): a host interface, with a VLAN (.N) or alias
	// (:N) suffix.
	IfaceRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{1,20}([:.]\d+)?$`)
)

// CheckPorts checks a port list as PVE does: numbers, ranges lo:hi, service names, at most 15 numbers.
func CheckPorts(v string) error {
	count := 0
	for _, item := range strings.Split(v, ",") {
		switch m := portRangeRE.FindStringSubmatch(item); {
		case item == "":
			return fmt.Errorf("extraneous commas in port list %q", v)
		case m != nil:
			count += 2
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			switch {
			case a > 65535:
				return fmt.Errorf("invalid port %s", m[1])
			case b > 65535:
				return fmt.Errorf("invalid port %s", m[2])
			case a > b:
				return fmt.Errorf("backwards range %s:%s not allowed, did you mean %s:%s?", m[1], m[2], m[2], m[1])
			}
		case portNumRE.MatchString(item):
			count++
			if n, _ := strconv.Atoi(item); n > 65535 {
				return fmt.Errorf("invalid port %s", item)
			}
		case !IsServiceName(item):
			return fmt.Errorf("invalid port %q (a number, a range lo:hi or a service name)", item)
		}
	}
	if count > 15 {
		return fmt.Errorf("too many entries in port list (more than 15 numbers)")
	}
	return nil
}

// CheckICMPType checks the ICMP type of a rule of protocol proto as PVE does: a name of that protocol's
// types (icmp's, or icmpv6's for icmpv6 and ipv6-icmp), or a number type[/code].
func CheckICMPType(proto, v string) error {
	if ValidICMPType(proto, v) {
		return nil
	}
	return fmt.Errorf("invalid icmp-type %q for proto %s", v, proto)
}

// IsICMP reports whether a protocol is ICMP or ICMPv6.
func IsICMP(p string) bool { return p == "icmp" || p == "icmpv6" || p == "ipv6-icmp" }

// RefKind is what a name in a rule refers to.
type RefKind string

const (
	RefIPSet RefKind = "ipset"
	RefAlias RefKind = "alias"
	RefGroup RefKind = "group"
)

// Ref is a reference of a rule's address (or a group rule) to a named object. Scope is "dc" (the
// cluster's), "guest" (the guest's own) or "" (the guest's own first, then the cluster's).
type Ref struct {
	Kind  RefKind
	Scope string
	Name  string
}

func (r Ref) String() string {
	n := r.Name
	if r.Scope != "" {
		n = r.Scope + "/" + n
	}
	if r.Kind == RefIPSet {
		return "IP set +" + n
	}
	if r.Kind == RefGroup {
		return "security group " + n
	}
	return "alias " + n
}

func scoped(v string) (scope, name string) {
	if s, n, ok := strings.Cut(v, "/"); ok && (s == "dc" || s == "guest") {
		return s, n
	}
	return "", v
}

// CheckAddress checks a rule's source or destination as PVE's parse_address_list does: an IP set
// (+name), an alias, or a list of addresses and networks (or one range). It returns the reference when the
// address names an object.
func CheckAddress(v string) (*Ref, error) {
	if rest, ok := strings.CutPrefix(v, "+"); ok {
		scope, name := scoped(rest)
		if !NameRE.MatchString(name) || len(name) > 64 {
			return nil, fmt.Errorf("invalid IP set name %q", rest)
		}
		return &Ref{Kind: RefIPSet, Scope: scope, Name: name}, nil
	}
	if scope, name := scoped(v); NameRE.MatchString(name) {
		if len(name) > 64 {
			return nil, fmt.Errorf("alias name %q is too long", name)
		}
		return &Ref{Kind: RefAlias, Scope: scope, Name: name}, nil
	}
	elems := strings.Split(v, ",")
	version, ranges := 0, false
	for _, e := range elems {
		if e == "" {
			return nil, fmt.Errorf("extraneous commas in address list %q", v)
		}
		var vers int
		if lo, hi, ok := strings.Cut(e, "-"); ok {
			a, err1 := netip.ParseAddr(lo)
			b, err2 := netip.ParseAddr(hi)
			if err1 != nil || err2 != nil || a.Is4() != b.Is4() || b.Less(a) {
				return nil, fmt.Errorf("invalid IP range %q", e)
			}
			ranges, vers = true, ipVersion(a)
		} else {
			n, err := CheckCIDR(e)
			if err != nil {
				return nil, err
			}
			vers = n
		}
		if version != 0 && vers != version {
			return nil, fmt.Errorf("mixed IPv4 and IPv6 addresses in %q", v)
		}
		version = vers
	}
	if ranges && len(elems) > 1 {
		return nil, fmt.Errorf("a range cannot be part of a list (%q)", v)
	}
	return nil, nil
}

// CheckCIDR checks an address or network; it returns its IP version.
func CheckCIDR(v string) (int, error) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return 0, fmt.Errorf("invalid network %q", v)
		}
		return ipVersion(p.Addr()), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return 0, fmt.Errorf("invalid IP address or network %q", v)
	}
	return ipVersion(a), nil
}

func ipVersion(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// BuiltinIPSet reports the IP sets PVE provides to a guest's rules without a definition: the cluster's
// management and blacklist, and the guest's ipfilter-net<n>.
func BuiltinIPSet(name string) bool {
	switch {
	case name == "management" || name == "blacklist":
		return true
	case strings.HasPrefix(name, "ipfilter-net"):
		_, err := strconv.Atoi(strings.TrimPrefix(name, "ipfilter-net"))
		return err == nil
	}
	return false
}
