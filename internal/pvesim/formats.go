package pvesim

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"sync"

	"github.com/proxops/proxops/internal/pveformat"
	"github.com/proxops/proxops/internal/pvesim/schema"
)

// Named formats and the helpers PVE's validators use. Sources: pve-common src/PVE/JSONSchema.pm
// (register_format calls, check_format, parse_size, format_size, parse_boolean), src/PVE/Tools.pm
// (split_list), qemu-server src/PVE/QemuServer.pm and QemuServer/Drive.pm (volume formats), pve-container
// src/PVE/LXC/Config.pm (mount point strings). Every message ends in "\n" because PVE dies with one.

var (
	reVMID      = regexp.MustCompile(`^[1-9][0-9]{2,8}$`)
	reNode      = regexp.MustCompile(`^([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	reID        = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	reConfigID  = regexp.MustCompile(`(?i)^[a-z][a-z0-9_-]+$`)
	reDNSName   = regexp.MustCompile(`^(([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)$`)
	reURLEnc    = regexp.MustCompile(`^[-%a-zA-Z0-9_.!~*'()]*$`)
	reMAC       = regexp.MustCompile(`(?i)^[a-f0-9][02468ace](?::[a-f0-9]{2}){5}$`)
	reTag       = regexp.MustCompile(`(?i)^[a-z0-9_][a-z0-9_\-+.]*$`)
	reBridge    = regexp.MustCompile(`^[-_.\w\d]+$`)
	reVolumeID  = regexp.MustCompile(`(?is)^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$`)
	reSize      = regexp.MustCompile(`^(\d+(\.\d+)?)([KMGT])?$`)
	rePoolID    = regexp.MustCompile(`^[A-Za-z0-9.\-_]+(?:/[A-Za-z0-9.\-_]+)*$`)
	reRealm     = regexp.MustCompile(`(?i)^[a-z][a-z0-9\-_.]*[a-z0-9]$`)
	reStartup   = regexp.MustCompile(`^(order=)?(\d+)$|^up=(\d+)$|^down=(\d+)$`)
	reHotplug   = regexp.MustCompile(`^(network|disk|cpu|memory|usb|cloudinit)$`)
	reCpuset    = regexp.MustCompile(`^\d+(-\d+)?(,\d+(-\d+)?)*$`)
	reTimezone  = regexp.MustCompile(`^(host|UTC|[A-Za-z_]+(/[A-Za-z0-9_+\-]+)*)$`)
	reLLIface   = regexp.MustCompile(`^([^%]+)(%[a-zA-Z0-9_.\-]+)?$`)
	reContent   = regexp.MustCompile(`^(images|rootdir|vztmpl|iso|backup|snippets|import|none)$`)
	reTaskState = regexp.MustCompile(`(?i)^(ok|error|warning|unknown)$`)
)

// formatFunc validates one value of a named (code-based) format.
type formatFunc func(v string) error

func ferr(format string, a ...any) error { return fmt.Errorf(format+"\n", a...) }

// namedFormats are PVE's code-ref formats; the -list and -opt suffixes are handled by checkFormat.
var namedFormats = map[string]formatFunc{
	"string": func(string) error { return nil },
	"pve-vmid": func(v string) error {
		if !reVMID.MatchString(v) {
			return ferr("value does not look like a valid VM ID")
		}
		return nil
	},
	"pve-node": func(v string) error {
		if !reNode.MatchString(v) {
			return ferr("value does not look like a valid node name")
		}
		return nil
	},
	"pve-storage-id": func(v string) error {
		if !reID.MatchString(v) {
			return ferr("storage ID '%s' contains illegal characters", v)
		}
		return nil
	},
	"pve-configid": func(v string) error {
		if !reConfigID.MatchString(v) {
			return ferr("invalid configuration ID '%s'", v)
		}
		return nil
	},
	"pve-bridge-id": func(v string) error {
		if !reBridge.MatchString(v) {
			return ferr("invalid bridge ID '%s'", v)
		}
		return nil
	},
	"dns-name": func(v string) error {
		if !reDNSName.MatchString(v) {
			return ferr("value does not look like a valid DNS name")
		}
		return nil
	},
	"urlencoded": func(v string) error {
		if !reURLEnc.MatchString(v) {
			return ferr("invalid urlencoded string: %s", v)
		}
		return nil
	},
	"mac-addr": func(v string) error {
		if !reMAC.MatchString(v) {
			return ferr("value does not look like a valid unicast MAC address")
		}
		return nil
	},
	"pve-tag": func(v string) error {
		if !reTag.MatchString(v) {
			return ferr("invalid characters in tag")
		}
		return nil
	},
	"disk-size": func(v string) error {
		if _, ok := parseSize(v); !ok {
			return ferr("value does not look like a valid disk size: %s", v)
		}
		return nil
	},
	"ipv4": func(v string) error {
		if a, err := netip.ParseAddr(v); err != nil || !a.Is4() {
			return ferr("value does not look like a valid IPv4 address")
		}
		return nil
	},
	"ipv6": func(v string) error {
		if a, err := netip.ParseAddr(v); err != nil || !a.Is6() || a.Zone() != "" {
			return ferr("value does not look like a valid IPv6 address")
		}
		return nil
	},
	"ip": func(v string) error {
		if _, err := netip.ParseAddr(v); err != nil {
			return ferr("value does not look like a valid IP address")
		}
		return nil
	},
	"CIDR": func(v string) error {
		if !isCIDR(v, 4) && !isCIDR(v, 6) {
			return ferr("value does not look like a valid CIDR network")
		}
		return nil
	},
	"CIDRv4": func(v string) error {
		if !isCIDR(v, 4) {
			return ferr("value does not look like a valid IPv4 CIDR network")
		}
		return nil
	},
	"CIDRv6": func(v string) error {
		if !isCIDR(v, 6) {
			return ferr("value does not look like a valid IPv6 CIDR network")
		}
		return nil
	},
	"pve-ipv4-config": func(v string) error {
		if v == "dhcp" || v == "manual" || isCIDR(v, 4) {
			return nil
		}
		return ferr("value does not look like a valid ipv4 network configuration")
	},
	"pve-ipv6-config": func(v string) error {
		if v == "auto" || v == "dhcp" || v == "manual" || isCIDR(v, 6) {
			return nil
		}
		return ferr("value does not look like a valid ipv6 network configuration")
	},
	"address": func(v string) error {
		if _, err := netip.ParseAddr(v); err == nil || reDNSName.MatchString(v) {
			return nil
		}
		return ferr("value does not look like a valid address: %s", v)
	},
	"pve-volume-id": func(v string) error {
		if !reVolumeID.MatchString(v) {
			return ferr("unable to parse volume ID '%s'", v)
		}
		return nil
	},
	// qemu-server QemuServer.pm verify_volume_id_or_qm_path / verify_volume_id_or_absolute_path.
	"pve-volume-id-or-qm-path": func(v string) error {
		if v == "none" || v == "cdrom" || strings.HasPrefix(v, "/") {
			return nil
		}
		if !reVolumeID.MatchString(v) {
			return ferr("unable to parse volume ID '%s'", v)
		}
		return nil
	},
	"pve-volume-id-or-absolute-path": func(v string) error {
		if strings.HasPrefix(v, "/") {
			return nil
		}
		if !reVolumeID.MatchString(v) {
			return ferr("unable to parse volume ID '%s'", v)
		}
		return nil
	},
	// pve-container LXC/Config.pm verify_lxc_mp_string.
	"pve-lxc-mp-string": func(v string) error {
		if strings.Contains(v, "/./") || strings.Contains(v, "/../") || strings.HasSuffix(v, "/.") ||
			strings.HasSuffix(v, "/..") || strings.HasPrefix(v, "./") || strings.HasPrefix(v, "../") {
			return ferr("%s contains illegal character sequences", v)
		}
		return nil
	},
	"pve-lxc-dev-string": func(v string) error {
		if !strings.HasPrefix(v, "/dev/") || strings.Contains(v, "/..") {
			return ferr("not a valid device string")
		}
		return nil
	},
	"pve-poolid": func(v string) error {
		if err := verifyPoolName(v); err != nil {
			return ferr("%v", err)
		}
		return nil
	},
	"pve-realm": func(v string) error {
		if !reRealm.MatchString(v) {
			return ferr("realm ID '%s' contains illegal characters", v)
		}
		return nil
	},
	"pve-startup-order": func(v string) error {
		if v == "" {
			return ferr("unable to parse startup options")
		}
		for _, p := range strings.Split(v, ",") {
			if strings.TrimSpace(p) == "" {
				continue
			}
			if !reStartup.MatchString(p) {
				return ferr("unable to parse startup options")
			}
		}
		return nil
	},
	"pve-hotplug-features": func(v string) error {
		if v == "0" || v == "1" {
			return nil
		}
		for _, p := range strings.Split(v, ",") {
			if !reHotplug.MatchString(p) {
				return ferr("invalid hotplug feature '%s'", p)
			}
		}
		return nil
	},
	"pve-cpuset": func(v string) error {
		if !reCpuset.MatchString(v) {
			return ferr("unable to parse cpuset option")
		}
		return nil
	},
	"pve-ct-timezone": func(v string) error {
		if !reTimezone.MatchString(v) {
			return ferr("invalid time zone '%s'", v)
		}
		return nil
	},
	"lxc-ip-with-ll-iface": func(v string) error {
		m := reLLIface.FindStringSubmatch(v)
		if m == nil {
			return ferr("unable to parse IP address '%s'", v)
		}
		if _, err := netip.ParseAddr(m[1]); err != nil {
			return ferr("unable to parse IP address '%s'", v)
		}
		return nil
	},
	"pve-storage-content": func(v string) error {
		if !reContent.MatchString(v) {
			return ferr("invalid content type '%s'", v)
		}
		return nil
	},
	"pve-task-status-type": func(v string) error {
		if !reTaskState.MatchString(v) {
			return ferr("invalid status '%s'", v)
		}
		return nil
	},
	"pve-priv": func(string) error { return nil },
	"storage-pair": func(v string) error {
		for _, side := range strings.SplitN(v, ":", 2) {
			if side != "1" && !reID.MatchString(side) {
				return ferr("entry '%s' contains invalid ID - storage ID '%s' contains illegal characters", v, side)
			}
		}
		return nil
	},
}

func init() {
	// The -list formats of formats that are lists of another one.
	namedFormats["address-list"] = listOf(namedFormats["address"])
	namedFormats["dns-name-list"] = listOf(namedFormats["dns-name"])
}

func listOf(f formatFunc) formatFunc {
	return func(v string) error {
		for _, x := range splitList(v) {
			if err := f(x); err != nil {
				return err
			}
		}
		return nil
	}
}

func isCIDR(v string, family int) bool {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return false
	}
	bits := p.Bits()
	if family == 4 {
		return p.Addr().Is4() && bits > 7 && bits <= 32
	}
	return p.Addr().Is6() && bits > 7 && bits <= 128
}

// hashFormats are PVE's hash-based named formats that the API schema does not expand. Each is written from
// its definition in qemu-server (QemuServer.pm, QemuServer/CPUConfig.pm, QemuServer/Cloudinit.pm).
// Formats not listed here (pve-qm-hostpci, pve-qemu-sev-fmt, pve-qemu-tdx-fmt) are accepted unchecked;
// docs/simulator.md lists them.
var hashFormats = map[string]map[string]*schema.Prop{
	"pve-qm-ipconfig": {
		"ip":  {Type: "string", Optional: true, Format: "pve-ipv4-config"},
		"gw":  {Type: "string", Optional: true, Format: "ipv4"},
		"ip6": {Type: "string", Optional: true, Format: "pve-ipv6-config"},
		"gw6": {Type: "string", Optional: true, Format: "ipv6"},
	},
	"pve-qm-smbios1": {
		"uuid":         {Type: "string", Optional: true, Pattern: `[a-fA-F0-9]{8}(?:-[a-fA-F0-9]{4}){3}-[a-fA-F0-9]{12}`},
		"version":      {Type: "string", Optional: true, Pattern: `[A-Za-z0-9+/]+={0,2}`},
		"serial":       {Type: "string", Optional: true, Pattern: `[A-Za-z0-9+/]+={0,2}`},
		"manufacturer": {Type: "string", Optional: true, Pattern: `[A-Za-z0-9+/]+={0,2}`},
		"product":      {Type: "string", Optional: true, Pattern: `[A-Za-z0-9+/]+={0,2}`},
		"sku":          {Type: "string", Optional: true, Pattern: `[A-Za-z0-9+/]+={0,2}`},
		"family":       {Type: "string", Optional: true, Pattern: `[A-Za-z0-9+/]+={0,2}`},
		"base64":       {Type: "boolean", Optional: true},
	},
	"pve-qm-boot": {
		"legacy": {Type: "string", Optional: true, DefaultKey: true, Pattern: `[acdn]{1,4}`},
		"order":  {Type: "string", Optional: true, Pattern: `[A-Za-z0-9]+(;[A-Za-z0-9]+)*`},
	},
	"pve-vm-cpu-conf": {
		"cputype":         {Type: "string", Optional: true, DefaultKey: true, Pattern: `[^,]+`},
		"flags":           {Type: "string", Optional: true, Pattern: `(?:[+-][a-zA-Z0-9\-_.]+)(?:;[+-][a-zA-Z0-9\-_.]+)*`},
		"hidden":          {Type: "boolean", Optional: true},
		"hv-vendor-id":    {Type: "string", Optional: true, Pattern: `[a-zA-Z0-9]{1,12}`},
		"phys-bits":       {Type: "string", Optional: true, Pattern: `(?:[0-9]+|host)`},
		"guest-phys-bits": {Type: "integer", Optional: true},
		"level":           {Type: "integer", Optional: true},
		"reported-model":  {Type: "string", Optional: true},
	},
	"pve-qm-cicustom": {
		"meta":    {Type: "string", Optional: true, Format: "pve-volume-id"},
		"network": {Type: "string", Optional: true, Format: "pve-volume-id"},
		"user":    {Type: "string", Optional: true, Format: "pve-volume-id"},
		"vendor":  {Type: "string", Optional: true, Format: "pve-volume-id"},
	},
	"pve-qm-watchdog": {
		"model":  {Type: "string", Optional: true, DefaultKey: true, Enum: []string{"i6300esb", "ib700"}},
		"action": {Type: "string", Optional: true, Enum: []string{"reset", "shutdown", "poweroff", "pause", "debug", "none"}},
	},
	"pve-qm-rng": {
		"source":    {Type: "string", DefaultKey: true, Enum: []string{"/dev/urandom", "/dev/random", "/dev/hwrng"}},
		"max_bytes": {Type: "integer", Optional: true},
		"period":    {Type: "integer", Optional: true},
	},
}

// uncheckedFormats are hash formats the simulator accepts without checking.
var uncheckedFormats = map[string]bool{"pve-qm-hostpci": true, "pve-qemu-sev-fmt": true, "pve-qemu-tdx-fmt": true}

func init() {
	namedFormats["pve-qm-bootdisk"] = func(v string) error {
		if !regexp.MustCompile(`^(ide|sata|scsi|virtio|efidisk|tpmstate)\d+$`).MatchString(v) {
			return ferr("invalid drive name '%s'", v)
		}
		return nil
	}
}

// splitList is PVE::Tools::split_list.
func splitList(s string) []string { return pveformat.SplitList(s) }

// parseSize is JSONSchema::parse_size: a number with an optional K/M/G/T binary suffix (PVE's own pattern,
// stricter than what ProxOps reads), in bytes.
func parseSize(v string) (int64, bool) {
	if !reSize.MatchString(v) {
		return 0, false
	}
	n, err := pveformat.ParseSize(v)
	return n, err == nil
}

// formatSize is JSONSchema::format_size: the largest binary unit that divides the size, or bytes.
func formatSize(size int64) string { return pveformat.FormatSize(size) }

// parseBoolean is JSONSchema::parse_boolean, used inside property strings and config files.
func parseBoolean(v string) (string, bool) {
	switch strings.ToLower(v) {
	case "1", "on", "yes", "true":
		return "1", true
	case "0", "off", "no", "false":
		return "0", true
	}
	return v, false
}

var reCache sync.Map // Perl pattern → *regexp.Regexp (nil when it does not compile)

// perlPattern compiles a schema pattern the way check_prop applies it (m/^$pattern$/), translating the
// Perl-only syntax the schema uses: (?^:...) groups, {,n} quantifiers (Perl ≥ 5.34) and \0.
func perlPattern(p string) *regexp.Regexp {
	if re, ok := reCache.Load(p); ok {
		return re.(*regexp.Regexp)
	}
	g := strings.ReplaceAll(p, "(?^:", "(?:")
	g = strings.ReplaceAll(g, "{,", "{0,")
	g = regexp.MustCompile(`\\0([^0-9]|$)`).ReplaceAllString(g, `\x00$1`)
	re, err := regexp.Compile(`^(?:` + g + `)$`)
	if err != nil {
		re = nil
	}
	reCache.Store(p, re)
	return re
}
