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

// macros are PVE's standard macros ($pve_fw_macros) in their preferred spelling.
var macros = []string{"Amanda", "Auth", "BGP", "BitTorrent", "BitTorrent32", "Ceph", "CVS", "Citrix", "DAAP",
	"DCC", "DHCPfwd", "DHCPv6", "DNS", "Distcc", "FTP", "Finger", "GNUnet", "GRE", "Git", "HKP", "HTTP", "HTTPS",
	"ICPV2", "ICQ", "IMAP", "IMAPS", "IPIP", "IPsec", "IPsecah", "IPsecnat", "IRC", "Jetdirect", "L2TP", "LDAP",
	"LDAPS", "MSNP", "MSSQL", "Mail", "MDNS", "Munin", "MySQL", "NNTP", "NNTPS", "NTP", "NeighborDiscovery", "OSPF",
	"OpenVPN", "PCA", "PMG", "POP3", "POP3S", "PPtP", "Ping", "PostgreSQL", "Printer", "RDP", "RIP", "RNDC", "Razor",
	"Rdate", "Rsync", "SANE", "SMB", "SMBswat", "SMTP", "SMTPS", "SNMP", "SPAMD", "SPICEproxy", "SSH", "SVN", "SixXS",
	"Squid", "Submission", "Syslog", "TFTP", "Telnet", "Telnets", "Time", "Trcrt", "VNC", "VNCL", "Web", "Webcache",
	"Webmin", "Whois"}

// CanonicalMacro returns PVE's spelling of a macro named in any case (PVE stores that spelling).
func CanonicalMacro(name string) (string, bool) {
	for _, m := range macros {
		if strings.EqualFold(m, name) {
			return m, true
		}
	}
	return "", false
}

// protocols are the protocol names of /etc/protocols on a PVE node.
var protocols = map[string]bool{"ip": true, "icmp": true, "igmp": true, "ggp": true, "ipencap": true, "st": true,
	"tcp": true, "egp": true, "igp": true, "pup": true, "udp": true, "hmp": true, "xns-idp": true, "rdp": true,
	"iso-tp4": true, "dccp": true, "xtp": true, "ddp": true, "idpr-cmtp": true, "ipv6": true, "ipv6-route": true,
	"ipv6-frag": true, "idrp": true, "rsvp": true, "gre": true, "esp": true, "ah": true, "skip": true,
	"ipv6-icmp": true, "icmpv6": true, "ipv6-nonxt": true, "ipv6-opts": true, "rspf": true, "vmtp": true,
	"eigrp": true, "ospf": true, "ax.25": true, "ipip": true, "etherip": true, "encap": true, "pim": true,
	"ipcomp": true, "vrrp": true, "l2tp": true, "isis": true, "sctp": true, "fc": true, "mobility-header": true,
	"udplite": true, "mpls-in-ip": true, "manet": true, "hip": true, "shim6": true, "wesp": true, "rohc": true,
	"ethernet": true}

// protocolsWithPorts is $PROTOCOLS_WITH_PORTS.
var protocolsWithPorts = map[string]bool{"udp": true, "17": true, "udplite": true, "136": true, "tcp": true,
	"6": true, "dccp": true, "33": true, "sctp": true, "132": true}

// CheckProto checks a protocol: a name of /etc/protocols or a number 0-255.
func CheckProto(p string) error {
	if protocols[p] {
		return nil
	}
	if n, err := strconv.Atoi(p); err == nil && n >= 0 && n <= 255 {
		return nil
	}
	return fmt.Errorf("unknown protocol %q", p)
}

// ProtoHasPorts reports whether ports may be given with a protocol.
func ProtoHasPorts(p string) bool { return protocolsWithPorts[p] }

// services are the /etc/services names a port list may use.
var services = map[string]bool{"ftp-data": true, "ftp": true, "ssh": true, "telnet": true, "smtp": true,
	"domain": true, "tftp": true, "http": true, "kerberos": true, "pop3": true, "sunrpc": true, "ntp": true,
	"imap2": true, "snmp": true, "bgp": true, "ldap": true, "https": true, "submissions": true, "syslog": true,
	"submission": true, "ldaps": true, "imaps": true, "pop3s": true, "openvpn": true, "mysql": true,
	"postgresql": true, "rsync": true, "microsoft-ds": true, "netbios-ns": true, "netbios-dgm": true,
	"netbios-ssn": true, "bootps": true, "bootpc": true, "isakmp": true, "ipsec-nat-t": true}

var (
	portRangeRE = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
	portNumRE   = regexp.MustCompile(`^[0-9]+$`)
	// NameRE is the name of a security group, an IP set or an alias.
	NameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_]+$`)
	// GuestIfaceRE is the interface of a guest's rule: one of its NICs.
	GuestIfaceRE = regexp.MustCompile(`^net[0-9]+$`)
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
		case !services[item]:
			return fmt.Errorf("invalid port %q (a number, a range lo:hi or a service name)", item)
		}
	}
	if count > 15 {
		return fmt.Errorf("too many entries in port list (more than 15 numbers)")
	}
	return nil
}

// icmpTypes are $icmp_type_names and $icmpv6_type_names.
var icmpTypes = map[string]bool{"any": true, "echo-reply": true, "destination-unreachable": true,
	"network-unreachable": true, "host-unreachable": true, "protocol-unreachable": true, "port-unreachable": true,
	"fragmentation-needed": true, "source-route-failed": true, "network-unknown": true, "host-unknown": true,
	"network-prohibited": true, "host-prohibited": true, "TOS-network-unreachable": true,
	"TOS-host-unreachable": true, "communication-prohibited": true, "host-precedence-violation": true,
	"precedence-cutoff": true, "source-quench": true, "redirect": true, "network-redirect": true,
	"host-redirect": true, "TOS-network-redirect": true, "TOS-host-redirect": true, "echo-request": true,
	"router-advertisement": true, "router-solicitation": true, "time-exceeded": true, "ttl-zero-during-transit": true,
	"ttl-zero-during-reassembly": true, "parameter-problem": true, "ip-header-bad": true,
	"required-option-missing": true, "timestamp-request": true, "timestamp-reply": true, "address-mask-request": true,
	"address-mask-reply": true, "no-route": true, "beyond-scope": true, "address-unreachable": true,
	"failed-policy": true, "reject-route": true, "packet-too-big": true, "bad-header": true,
	"unknown-header-type": true, "unknown-option": true, "neighbor-solicitation": true,
	"neighbour-solicitation": true, "neighbor-advertisement": true, "neighbour-advertisement": true}

// CheckICMPType checks an ICMP or ICMPv6 type: a name or a number (type[/code]).
func CheckICMPType(v string) error {
	if icmpTypes[v] {
		return nil
	}
	t, c, hasCode := strings.Cut(v, "/")
	if n, err := strconv.Atoi(t); err == nil && n >= 0 && n <= 255 {
		if !hasCode {
			return nil
		}
		if m, err := strconv.Atoi(c); err == nil && m >= 0 && m <= 255 {
			return nil
		}
	}
	return fmt.Errorf("invalid icmp-type %q", v)
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
