package pvesim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/pvesim/schema"
)

// Guest config files in PVE's own text format. Sources: qemu-server src/PVE/QemuServer.pm parse_vm_config
// and write_vm_config; pve-container src/PVE/LXC/Config.pm parse_pct_config and write_pct_config.

// section is one part of a config file: the current config, the pending changes, a snapshot or a special
// section. conf holds "description" like any other key; lxc holds the raw lxc.* lines in file order.
type section struct {
	conf map[string]string
	lxc  [][2]string
}

func newSection() *section { return &section{conf: map[string]string{}} }

// configFile is a parsed guest config file.
type configFile struct {
	current   *section
	pending   *section // nil when there is no pending section
	snapshots map[string]*section
	special   map[string]*section // [special:<name>] sections (qemu), kept verbatim
}

// confDesc describes the config keys of one guest type: their schema (from the API schema) and how to treat
// the value on load.
type confDesc struct {
	kind  string // qemu or lxc
	props map[string]*schema.Prop
}

// extraConfigKeys are config-file keys that the API does not accept but the file may hold
// (QemuServer.pm json_config_properties skips them; LXC/Config.pm likewise).
var extraConfigKeys = map[string]*schema.Prop{
	"parent":         {Type: "string", Optional: true, Format: "pve-configid"},
	"snaptime":       {Type: "integer", Optional: true},
	"vmstate":        {Type: "string", Optional: true, Format: "pve-volume-id"},
	"runningmachine": {Type: "string", Optional: true},
	"runningcpu":     {Type: "string", Optional: true},
	"meta":           {Type: "string", Optional: true},
	"snapstate":      {Type: "string", Optional: true},
}

// prop returns the schema of a config key, or nil for an unknown key.
func (d *confDesc) prop(key string) *schema.Prop {
	if p := lookupProp(d.props, d.kind, key); p != nil {
		return p
	}
	if d.kind == "lxc" && (key == "runningmachine" || key == "runningcpu" || key == "meta") {
		return nil
	}
	if d.kind == "lxc" && key == "vmstate" {
		return &schema.Prop{Type: "string", Optional: true} // LXC/Config.pm: informative only
	}
	return extraConfigKeys[key]
}

// isDrive reports whether a qemu key is a disk/cdrom drive (pve-qm-ide/scsi/virtio/sata and efidisk/tpm).
func isDrive(key string) bool {
	switch key {
	case "efidisk0", "tpmstate0":
		return true
	}
	for _, bus := range driveBuses {
		if n, ok := strings.CutPrefix(key, bus.prefix); ok {
			return smallIndex(n, bus.max)
		}
	}
	return false
}

// driveBuses are the drive keys with an index: ide0-3, sata0-5, scsi0-30, virtio0-15.
var driveBuses = [...]struct {
	prefix string
	max    int
}{{"ide", 3}, {"sata", 5}, {"scsi", 30}, {"virtio", 15}}

var (
	reLXCRawLine  = regexp.MustCompile(`^(lxc\.[a-z0-9_\-.]+)(:|\s*=)\s*(.*?)\s*$`)
	reDescrLine   = regexp.MustCompile(`^(description):\s*(.*\S)\s*$`)
	reDeleteLine  = regexp.MustCompile(`^delete:\s*(.*\S)\s*$`)
	reKeyLine     = regexp.MustCompile(`^([a-z][a-z_\-]*\d*):\s*(.+?)\s*$`)
	reSnapSection = regexp.MustCompile(`(?i)^\[([a-z][a-z0-9_\-]+)\]\s*$`)
	reSpecial     = regexp.MustCompile(`(?i)^\[special:([a-z][a-z0-9_\-]*)\]\s*$`)
	reAnySection  = regexp.MustCompile(`^\[([^\]]*)\]\s*$`)
	reBlank       = regexp.MustCompile(`^\s*$`)
)

// specialSections are the [special:<name>] sections parse_vm_config knows (its $special_schemas); any
// other section that is neither [PENDING] nor a snapshot is skipped with a warning, its lines unread.
var specialSections = []string{"cloudinit", "fleecing"}

// parseConfigFile parses a config file the way PVE's non-strict parser does: bad lines produce warnings
// and are skipped. The current config is the part before the first section.
//
// QEMU (parse_vm_config): [PENDING] (once: a second gives "duplicate section: pending"), the known
// [special:<name>] sections (cloudinit, fleecing; a repeat gives "duplicate special section"), snapshots
// (a repeat gives "duplicate snapshot section"), and any other [...] header gives "skipping unknown section"
// and the lines up to the next header are skipped silently. LXC (parse_pct_config): [pve:pending] and
// snapshots only, a repeat silently replaces the earlier one, and any other [...] line is an ordinary bad
// line ("unable to parse config"); its messages say "vm" too.
func parseConfigFile(d *confDesc, vmid int, raw string) (*configFile, []string) {
	p := &confParser{d: d, vmid: vmid, qemu: d.kind == "qemu", kind: "current",
		cf: &configFile{current: newSection(), snapshots: map[string]*section{}, special: map[string]*section{}}}
	p.cur = p.cf.current
	p.pendingRE = regexp.MustCompile(`(?i)^\[PENDING\]\s*$`)
	if !p.qemu {
		p.pendingRE = regexp.MustCompile(`(?i)^\[pve:pending\]\s*$`)
	}
	for _, line := range strings.Split(raw, "\n") {
		if reBlank.MatchString(line) || p.header(line) {
			continue
		}
		if p.cur != nil { // inside an unknown section: parse_vm_config skips its lines without a word
			p.line(line)
		}
	}
	p.finish()
	return p.cf, p.warnings
}

// confParser is the state of reading one guest config file: the section being read (nil inside an unknown
// one) and its kind, the description comment lines collected so far, and the warnings PVE would log.
type confParser struct {
	d         *confDesc
	vmid      int
	qemu      bool
	pendingRE *regexp.Regexp
	cf        *configFile
	cur       *section
	kind      string
	descr     *string
	warnings  []string
}

func (p *confParser) warn(format string, a ...any) {
	p.warnings = append(p.warnings, fmt.Sprintf(format, a...))
}

// finish ends a section: its collected comment lines become its description.
func (p *confParser) finish() {
	if p.descr != nil {
		if p.qemu {
			p.cur.conf["description"] = strings.TrimRight(*p.descr, " \t\r\n\f\v")
		} else if perlTrue(*p.descr) {
			// parse_pct_config keeps the trailing newline of the last comment line.
			p.cur.conf["description"] = *p.descr
		}
	}
	p.descr = nil
}

// enter ends the section being read and starts reading into next.
func (p *confParser) enter(next *section, kind string) {
	p.finish()
	p.cur, p.kind = next, kind
}

// header reads a section header line ([PENDING], a special section, a snapshot, or an unknown section) and
// reports whether line was one.
func (p *confParser) header(line string) bool {
	cf, vmid := p.cf, p.vmid
	switch {
	case p.pendingRE.MatchString(line):
		if p.qemu && cf.pending != nil {
			p.warn("vm %d - duplicate section: pending", vmid)
		}
		cf.pending = newSection()
		p.enter(cf.pending, "pending")
	case p.qemu && reSpecial.MatchString(line) && slices.Contains(specialSections, strings.ToLower(reSpecial.FindStringSubmatch(line)[1])):
		name := strings.ToLower(reSpecial.FindStringSubmatch(line)[1])
		if _, dup := cf.special[name]; dup {
			p.warn("vm %d - duplicate special section: %s", vmid, name)
		}
		sec := newSection()
		p.enter(sec, "special")
		cf.special[name] = sec
	case reSnapSection.MatchString(line):
		name := reSnapSection.FindStringSubmatch(line)[1]
		if _, dup := cf.snapshots[name]; dup && p.qemu {
			p.warn("vm %d - duplicate snapshot section: %s", vmid, name)
		}
		sec := newSection()
		p.enter(sec, "snapshot")
		cf.snapshots[name] = sec
	case p.qemu && reAnySection.MatchString(line):
		p.finish()
		p.warn("vm %d - skipping unknown section: '%s'", vmid, reAnySection.FindStringSubmatch(line)[1])
		p.cur, p.kind = nil, "unknown"
	default:
		return false
	}
	return true
}

// appendDescr adds text to the description being collected.
func (p *confParser) appendDescr(text string) {
	s := ""
	if p.descr != nil {
		s = *p.descr
	}
	s += text
	p.descr = &s
}

// line reads one line inside a known section: a comment, an lxc raw key, a description, a delete list or a
// key: value line, checked against the key's format as PVE does.
func (p *confParser) line(line string) {
	cur, vmid, qemu := p.cur, p.vmid, p.qemu
	if strings.HasPrefix(line, "#") {
		p.appendDescr(decodeText(line[1:]) + "\n")
		return
	}
	if !qemu {
		if m := reLXCRawLine.FindStringSubmatch(line); m != nil {
			cur.lxc = append(cur.lxc, [2]string{m[1], m[3]})
			return
		}
	}
	if m := reDescrLine.FindStringSubmatch(line); m != nil {
		p.appendDescr(decodeText(m[2]))
		return
	}
	if m := reDeleteLine.FindStringSubmatch(line); m != nil {
		switch {
		case p.kind == "pending":
			cur.conf["delete"] = m[1]
		case qemu:
			p.warn("vm %d - property 'delete' is only allowed in [PENDING]", vmid)
		default:
			p.warn("vm %d - property 'delete' is only allowed in [pve:pending]", vmid)
		}
		return
	}
	m := reKeyLine.FindStringSubmatch(line)
	if m == nil {
		p.warn("vm %d - unable to parse config: %s", vmid, line)
		return
	}
	key, val := m[1], m[2]
	if p.kind == "special" {
		cur.conf[key] = val
		return
	}
	if qemu && key == "cdrom" {
		key = "ide2"
	}
	if key == "args" && qemu {
		cur.conf[key] = val
		return
	}
	norm, err := p.d.checkConfigValue(key, val)
	if err != nil {
		p.warn("vm %d - unable to parse value of '%s' - %s", vmid, m[1], strings.TrimSuffix(err.Error(), "\n"))
		return
	}
	cur.conf[key] = norm
}

// perlTrue is Perl's truth of a string: neither empty nor "0".
func perlTrue(s string) bool { return s != "" && s != "0" }

// perlSplitLines is Perl's split(/\n/, $s): the lines of s without the trailing empty fields (so
// "a\nb\n" and "a\nb\n\n" give two lines, as PVE writes them).
func perlSplitLines(s string) []string {
	out := strings.Split(s, "\n")
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// checkConfigValue is QemuServer::check_type / PVE::LXC::Config::check_type: booleans take on/yes/true
// and are stored as 1/0, integers and numbers are checked, formats are validated. Qemu drives are
// re-printed (parse_drive + print_drive), so they come back normalised.
func (d *confDesc) checkConfigValue(key, val string) (string, error) {
	p := d.prop(key)
	if p == nil {
		return "", ferr("unknown setting '%s'", key)
	}
	if strings.ContainsAny(val, "\r\n") {
		return "", ferr("property contains a line feed")
	}
	switch p.Type {
	case "boolean":
		b, ok := parseBoolean(val)
		if !ok {
			return "", ferr("type check ('boolean') failed - got '%s'", val)
		}
		return b, nil
	case "integer":
		if !regexp.MustCompile(`^\d+$`).MatchString(val) {
			return "", ferr("type check ('integer') failed - got '%s'", val)
		}
		n, _ := strconv.ParseInt(val, 10, 64)
		return strconv.FormatInt(n, 10), nil
	case "number":
		if !regexp.MustCompile(`^(\d+)(\.\d+)?$`).MatchString(val) {
			return "", ferr("type check ('number') failed - got '%s'", val)
		}
		return val, nil
	}
	if p.FormatObject != nil {
		parsed, err := parsePropertyString(p.FormatObject, val, key)
		if err != nil {
			return "", err
		}
		if d.kind == "qemu" && isDrive(key) {
			return printPropertyString(p.FormatObject, parsed), nil
		}
		return val, nil
	}
	if p.Format != "" {
		if err := checkNamedFormat(p.Format, val, key); err != nil {
			return "", err
		}
		return val, nil
	}
	return strings.TrimSuffix(strings.TrimPrefix(val, `"`), `"`), nil
}

// encodeText is PVE::Tools::encode_text: everything outside 0x20-0x39 and 0x3b-0x7e is %XX-escaped.
func encodeText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c >= 0x20 && c <= 0x39) || (c >= 0x3b && c <= 0x7e) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// decodeText is PVE::Tools::decode_text (uri_unescape).
func decodeText(s string) string {
	if out, err := url.PathUnescape(s); err == nil {
		return out
	}
	return s
}

// renderConfigFile writes a config file the way write_vm_config / write_pct_config do: description as
// '#' lines first, then the keys sorted, then [PENDING] (LXC: [pve:pending]), special sections and
// snapshots in name order.
func renderConfigFile(kind string, cf *configFile) string {
	gen := func(s *section, pending bool) string {
		var b strings.Builder
		if descr, ok := s.conf["description"]; ok {
			switch {
			case perlTrue(descr):
				for _, l := range perlSplitLines(descr) {
					b.WriteString("#" + encodeText(l) + "\n")
				}
			case pending && kind == "qemu":
				// write_vm_config marks an emptied description in [PENDING]; write_pct_config writes nothing.
				b.WriteString("#\n")
			}
		}
		for _, k := range slices.Sorted(maps.Keys(s.conf)) {
			if k == "description" {
				continue
			}
			fmt.Fprintf(&b, "%s: %s\n", k, s.conf[k])
		}
		for _, e := range s.lxc {
			fmt.Fprintf(&b, "%s: %s\n", e[0], e[1])
		}
		return b.String()
	}
	out := gen(cf.current, false)
	if cf.pending != nil && (len(cf.pending.conf) > 0 || len(cf.pending.lxc) > 0) {
		if kind == "lxc" {
			out += "\n[pve:pending]\n"
		} else {
			out += "\n[PENDING]\n"
		}
		out += gen(cf.pending, true)
	}
	for _, name := range slices.Sorted(maps.Keys(cf.special)) {
		if name == "cloudinit" && !cf.hasCloudInit() {
			continue // write_vm_config drops the section of a VM without a cloud-init drive
		}
		out += "\n[special:" + name + "]\n" + gen(cf.special[name], false)
	}
	names := make([]string, 0, len(cf.snapshots))
	for n := range cf.snapshots {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out += "\n[" + n + "]\n" + gen(cf.snapshots[n], false)
	}
	return out
}

// hasCloudInit is QemuConfig has_cloudinit: a drive of the current config or of the pending changes is a
// cloud-init drive.
func (c *configFile) hasCloudInit() bool {
	if cloudinitDrive(c.current.conf) != "" {
		return true
	}
	return c.pending != nil && cloudinitDrive(c.pending.conf) != ""
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// pendingDeletes parses the pending "delete" list ("net1,!scsi1": '!' means force), PVE::AbstractConfig
// parse_pending_delete.
func pendingDeletes(s string) map[string]bool {
	out := map[string]bool{}
	for _, k := range splitList(s) {
		force := strings.HasPrefix(k, "!")
		out[strings.TrimPrefix(k, "!")] = force
	}
	return out
}

func printPendingDeletes(m map[string]bool) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] {
			parts = append(parts, "!"+k)
		} else {
			parts = append(parts, k)
		}
	}
	return strings.Join(parts, ",")
}

// setPending records a pending value of k, making the [PENDING] section when there is none.
func (cf *configFile) setPending(k, v string) {
	if cf.pending == nil {
		cf.pending = newSection()
	}
	cf.pending.conf[k] = v
}

// pendDelete records a pending delete of k (add_to_pending_delete).
func (cf *configFile) pendDelete(k string, force bool) {
	dels := map[string]bool{}
	if cf.pending != nil {
		dels = pendingDeletes(cf.pending.conf["delete"])
	}
	dels[k] = force
	cf.setPending("delete", printPendingDeletes(dels))
}

// cancelPendingDelete drops a pending delete of k, which a new value replaces (remove_from_pending_delete).
func (cf *configFile) cancelPendingDelete(k string) {
	if cf.pending == nil {
		return
	}
	dels := pendingDeletes(cf.pending.conf["delete"])
	if _, ok := dels[k]; !ok {
		return
	}
	delete(dels, k)
	cf.pending.conf["delete"] = printPendingDeletes(dels)
	if len(dels) == 0 {
		delete(cf.pending.conf, "delete")
	}
}

// dropPending forgets the pending value of k and says whether there was one.
func (cf *configFile) dropPending(k string) bool {
	if cf.pending == nil {
		return false
	}
	_, ok := cf.pending.conf[k]
	delete(cf.pending.conf, k)
	return ok
}

// tidyPending drops an empty [PENDING] section.
func (cf *configFile) tidyPending() {
	if cf.pending != nil && len(cf.pending.conf) == 0 {
		cf.pending = nil
	}
}
