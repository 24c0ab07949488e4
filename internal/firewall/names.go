package firewall

import (
	"strconv"
	"strings"
)

// The names pve-firewall knows, from PVE/Firewall.pm and a PVE node's /etc/protocols and /etc/services: one
// table each, read by the checks of declared rules and by the simulator alike.

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

// IsProtocolName reports whether p is a protocol name of /etc/protocols on a PVE node.
func IsProtocolName(p string) bool { return protocols[p] }

// protocolsWithPorts is $PROTOCOLS_WITH_PORTS.
var protocolsWithPorts = map[string]bool{"udp": true, "17": true, "udplite": true, "136": true, "tcp": true,
	"6": true, "dccp": true, "33": true, "sctp": true, "132": true}

// ProtoHasPorts reports whether ports may be given with a protocol.
func ProtoHasPorts(p string) bool { return protocolsWithPorts[p] }

// services are the /etc/services names a port list may use.
var services = map[string]bool{"ftp-data": true, "ftp": true, "ssh": true, "telnet": true, "smtp": true,
	"domain": true, "tftp": true, "http": true, "kerberos": true, "pop3": true, "sunrpc": true, "ntp": true,
	"imap2": true, "snmp": true, "bgp": true, "ldap": true, "https": true, "submissions": true, "syslog": true,
	"submission": true, "ldaps": true, "imaps": true, "pop3s": true, "openvpn": true, "mysql": true,
	"postgresql": true, "rsync": true, "microsoft-ds": true, "netbios-ns": true, "netbios-dgm": true,
	"netbios-ssn": true, "bootps": true, "bootpc": true, "isakmp": true, "ipsec-nat-t": true}

// IsServiceName reports whether a port list may name s (a service of /etc/services).
func IsServiceName(s string) bool { return services[s] }

// icmpTypes are $icmp_type_names.
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
	"address-mask-reply": true}

// icmpv6Types are $icmpv6_type_names.
var icmpv6Types = map[string]bool{"destination-unreachable": true, "no-route": true,
	"communication-prohibited": true, "beyond-scope": true, "address-unreachable": true, "port-unreachable": true,
	"failed-policy": true, "reject-route": true, "packet-too-big": true, "time-exceeded": true,
	"ttl-zero-during-transit": true, "ttl-zero-during-reassembly": true, "parameter-problem": true,
	"bad-header": true, "unknown-header-type": true, "unknown-option": true, "echo-request": true,
	"echo-reply": true, "router-solicitation": true, "router-advertisement": true, "neighbor-solicitation": true,
	"neighbour-solicitation": true, "neighbor-advertisement": true, "neighbour-advertisement": true,
	"redirect": true}

// IsICMPTypeName reports whether name is an ICMP type name of proto: icmp's names for icmp, icmpv6's for
// icmpv6 and ipv6-icmp, either for any other proto (where PVE's format check takes both).
func IsICMPTypeName(proto, name string) bool {
	switch proto {
	case "icmp":
		return icmpTypes[name]
	case "icmpv6", "ipv6-icmp":
		return icmpv6Types[name]
	}
	return icmpTypes[name] || icmpv6Types[name]
}

// ValidICMPType reports whether v is an ICMP type PVE takes for proto: a name (IsICMPTypeName) or a number
// type[/code], each from 0 to 255.
func ValidICMPType(proto, v string) bool {
	if IsICMPTypeName(proto, v) {
		return true
	}
	t, c, hasCode := strings.Cut(v, "/")
	if n, err := strconv.Atoi(t); err != nil || n < 0 || n > 255 {
		return false
	}
	if !hasCode {
		return true
	}
	m, err := strconv.Atoi(c)
	return err == nil && m >= 0 && m <= 255
}
