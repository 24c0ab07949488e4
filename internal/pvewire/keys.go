package pvewire

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pveformat"
)

// Keys the manifest model covers, per guest type (indexed keys are listed by prefix below).
var (
	qemuModelled = set("name", "description", "tags", "cpu", "cores", "sockets", "memory", "numa", "machine", "bios",
		"vga", "scsihw", "serial0", "efidisk0", "tpmstate0", "onboot", "startup", "protection", "agent", "acpi",
		"tablet", "hotplug", "boot", "ciuser", "sshkeys", "cipassword", "nameserver", "searchdomain")
	qemuModelledPrefixes = []string{"scsi", "virtio", "sata", "ide", "net", "hostpci", "ipconfig"}

	lxcModelled = set("hostname", "description", "tags", "arch", "cores", "memory", "swap", "rootfs", "nameserver",
		"searchdomain", "unprivileged", "protection", "onboot", "console", "features", "startup")
	lxcModelledPrefixes = []string{"mp", "net"}

	// Keys PVE maintains itself: never compared, never gaps.
	qemuBookkeeping = set("digest", "meta", "vmgenid", "smbios1", "lock", "template", "parent", "snaptime",
		"runningmachine", "runningcpu", "vmstate", "pending")
	lxcBookkeeping = set("digest", "ostype", "lock", "template", "parent", "snaptime", "pending")
	// Indexed bookkeeping keys: volumes detached from the config.
	bookkeepingPrefixes = []string{"unused"}
)

func set(keys ...string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// IsModelled reports whether the manifest model covers a config key of a guest type.
func IsModelled(t inventory.GuestType, key string) bool {
	keys, prefixes := qemuModelled, qemuModelledPrefixes
	if t == inventory.LXC {
		keys, prefixes = lxcModelled, lxcModelledPrefixes
	}
	return inKeys(keys, prefixes, key)
}

// inKeys reports whether key is one of keys or an indexed key (net0, mp1) of one of prefixes.
func inKeys(keys map[string]bool, prefixes []string, key string) bool {
	if keys[key] {
		return true
	}
	for _, p := range prefixes {
		if isIndexed(key, p) {
			return true
		}
	}
	return false
}

// IsBookkeeping reports whether a key is PVE's own bookkeeping (digest, meta, smbios1, vmgenid, lock,
// unusedN, ...), which is neither compared nor reported as a gap.
func IsBookkeeping(t inventory.GuestType, key string) bool {
	keys := qemuBookkeeping
	if t == inventory.LXC {
		keys = lxcBookkeeping
	}
	return inKeys(keys, bookkeepingPrefixes, key)
}

// Gap is a live setting the manifest model does not cover: a whole key, or one token of a modelled
// property string (Token set).
type Gap struct {
	Key   string
	Token string
	// Value is the live value, or Redacted for a secret.
	Value string
}

// Redacted replaces a secret value in a gap.
const Redacted = "<redacted>"

// secretKeys are keys whose values are never shown; so is any key that contains one of secretWords.
var (
	secretKeys  = set("cipassword", "sshkeys", "password", "sshkey", "keyfile", "secret")
	secretWords = []string{"token", "secret", "password"}
)

// IsSecretKey reports whether the value of a config key (or of a property-string token) may be a secret and
// is never shown: cipassword, sshkeys, password, sshkey, keyfile, secret, and any key containing token,
// secret or password.
func IsSecretKey(key string) bool {
	k := strings.ToLower(key)
	if secretKeys[k] {
		return true
	}
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// secretNameWords mark a word of a gap's value as carrying a secret; benignWords are removed before the
// check, so that a PCI passthrough or a keyboard does not count.
var (
	secretNameWords = []string{"pass", "pwd", "secret", "token", "key", "credential", "auth"}
	benignWords     = []string{"passthrough", "bypass", "keyboard"}
)

func mentionsSecret(s string) bool {
	s = strings.ToLower(s)
	for _, w := range benignWords {
		s = strings.ReplaceAll(s, w, "")
	}
	for _, w := range secretNameWords {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// RedactValue hides what looks like a secret inside a value that is shown whole (a gap of an unmodelled
// key such as LXC env, raw lxc.* keys or qemu args), keeping the rest readable. The rule:
//
//   - The value is split into words at whitespace and NUL (a literal NUL byte or the two characters \0), the
//     separators of command lines and of LXC's env list. Separators are kept as they are.
//   - In every word, the password of a URL's user information (scheme://user:password@host) is redacted.
//   - A word that mentions a secret word (case-insensitive: pass, pwd, secret, token, key, credential, auth;
//     after removing passthrough, bypass and keyboard) has the value of each of its comma-separated NAME=value parts redacted; when such a value is itself
//     NAME=value with a NAME that mentions a secret word, only its innermost value is redacted
//     (lxc.environment=DB_PASSWORD=<redacted>). Parts without "=" are kept.
//   - A word that starts with "-", mentions a secret word and has no "=" (a command-line flag such as
//     --auth-token) has the next word redacted whole.
//
// The result depends on the value alone, so gap reports stay deterministic.
func RedactValue(v string) string {
	if v == Redacted {
		return v
	}
	var b strings.Builder
	redactNext := false
	for _, w := range splitWords(v) {
		if w.sep {
			b.WriteString(w.text)
			continue
		}
		if redactNext {
			b.WriteString(Redacted)
			redactNext = false
			continue
		}
		word := redactURLPassword(w.text)
		if mentionsSecret(word) {
			if strings.HasPrefix(word, "-") && !strings.Contains(word, "=") {
				redactNext = true
			} else {
				parts := strings.Split(word, ",")
				for i, p := range parts {
					parts[i] = redactAssignment(p)
				}
				word = strings.Join(parts, ",")
			}
		}
		b.WriteString(word)
	}
	return b.String()
}

// redactAssignment redacts the value of NAME=value, descending into a value that is itself NAME=value
// with a secret-looking NAME; a part without "=" is returned as it is.
func redactAssignment(p string) string {
	name, val, ok := strings.Cut(p, "=")
	if !ok {
		return p
	}
	if inner, _, nested := strings.Cut(val, "="); nested && mentionsSecret(inner) {
		return name + "=" + redactAssignment(val)
	}
	return name + "=" + Redacted
}

// redactURLPassword replaces the password of every scheme://user:password@ in a word.
func redactURLPassword(w string) string {
	var b strings.Builder
	for {
		i := strings.Index(w, "://")
		if i < 0 {
			b.WriteString(w)
			return b.String()
		}
		b.WriteString(w[:i+3])
		rest := w[i+3:]
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		authority := rest[:end]
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			if user, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
				authority = user + ":" + Redacted + authority[at:]
			}
		}
		b.WriteString(authority)
		w = rest[end:]
	}
}

type word struct {
	text string
	sep  bool
}

// splitWords cuts a value into words and the separator runs between them (whitespace, NUL bytes and the
// two-character sequence \0); joining the texts gives the value back.
func splitWords(v string) []word {
	var out []word
	start, inSep := 0, false
	flush := func(end int, sep bool) {
		if end > start {
			out = append(out, word{text: v[start:end], sep: sep})
		}
		start = end
	}
	for i := 0; i < len(v); {
		n := 0
		switch {
		case v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r' || v[i] == 0:
			n = 1
		case v[i] == '\\' && i+1 < len(v) && v[i+1] == '0':
			n = 2
		}
		if (n > 0) != inSep {
			flush(i, inSep)
			inSep = n > 0
		}
		if n == 0 {
			n = 1
		}
		i += n
	}
	flush(len(v), inSep)
	return out
}

// modelledTokens lists, per kind of property string, the tokens the model covers; any other token of a
// modelled key is a gap. Tokens PVE derives (size, media on a CD drive) count as covered.
var modelledTokens = map[string]map[string]bool{
	"disk":     set("file", "volume", "size", "iothread", "discard", "ssd", "aio", "media", "import-from", "format"),
	"efidisk":  set("file", "volume", "size", "efitype", "pre-enrolled-keys", "format"),
	"tpmstate": set("file", "volume", "size", "version", "format"),
	"net":      set("bridge", "tag", "rate", "firewall", "macaddr", "model"),
	"hostpci":  set("host", "pcie"),
	"ipconfig": set("ip", "gw"),
	"agent":    set("enabled"),
	"cpu":      set("cputype", "hidden"),
	"vga":      set("type"),
	"boot":     set("order"),
	"lxcnet":   set("name", "bridge", "hwaddr", "type", "tag", "rate", "firewall", "ip", "gw"),
	"rootfs":   set("volume", "size"),
	"mp":       set("volume", "size", "mp", "ro", "backup", "acl", "quota", "shared", "mountoptions"),
	"features": set("nesting", "keyctl", "fuse"),
	"machine":  set("type"),
	"memory":   set("current"),
}

// Gaps lists a guest's live settings the manifest model does not cover, sorted by key and token: every key
// that is neither modelled nor bookkeeping, and the unmodelled tokens of modelled property strings (a NIC's
// mtu, a disk's backup=, a PCI device's x-vga). The values of secret keys (IsSecretKey) are redacted whole,
// and secret-looking parts of every other value are redacted by RedactValue.
func Gaps(g inventory.Guest) []Gap {
	var out []Gap
	for _, e := range g.Config {
		if !e.HasValue {
			continue
		}
		k, v := e.Key, e.Value
		switch {
		case g.Type == inventory.QEMU && k == "smbios1":
			// uuid is the guest's identity (PVE's); every other setting is an operator's.
			for _, t := range pveformat.ParseProps(v, "") {
				if t.Key != "uuid" {
					out = append(out, Gap{Key: k, Token: t.Key, Value: RedactValue(t.Value)})
				}
			}
			continue
		case IsBookkeeping(g.Type, k):
			continue
		case !IsModelled(g.Type, k):
			if IsSecretKey(k) {
				v = Redacted
			}
			out = append(out, Gap{Key: k, Value: RedactValue(v)})
			continue
		}
		for _, t := range unmodelledTokens(g.Type, k, v) {
			if IsSecretKey(k) || IsSecretKey(t.Key) {
				t.Value = Redacted
			}
			t.Value = RedactValue(t.Value)
			out = append(out, Gap{Key: k, Token: t.Key, Value: t.Value})
		}
	}
	slices.SortFunc(out, func(a, b Gap) int { return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.Token, b.Token)) })
	return out
}

func unmodelledTokens(t inventory.GuestType, key, value string) pveformat.Props {
	kind, defaultKey := tokenKind(t, key)
	if kind == "" {
		return nil
	}
	p := pveformat.ParseProps(value, defaultKey)
	if kind == "net" {
		p = ParseNIC(value).Props
	}
	var out pveformat.Props
	for _, tok := range p {
		if !modelledTokens[kind][tok.Key] {
			out = append(out, tok)
		}
	}
	return out
}

// qemuTokenDefaults are the default keys of the QEMU property strings whose modelledTokens entry is named
// after the config key.
var qemuTokenDefaults = map[string]string{"agent": "enabled", "cpu": "cputype", "vga": "type", "boot": "legacy",
	"machine": "type", "memory": "current"}

// tokenKind names the modelledTokens entry of a config key whose tokens are compared one by one, and the
// default key of its property string; "" for any other key.
func tokenKind(t inventory.GuestType, key string) (kind, defaultKey string) {
	if t == inventory.LXC {
		switch {
		case key == "rootfs":
			return "rootfs", "volume"
		case isIndexed(key, "mp"):
			return "mp", "volume"
		case isIndexed(key, "net"):
			return "lxcnet", ""
		case key == "features":
			return "features", ""
		}
		return "", ""
	}
	switch {
	case key == "efidisk0":
		return "efidisk", "file"
	case key == "tpmstate0":
		return "tpmstate", "file"
	case isDiskSlot(key):
		return "disk", "file"
	case isIndexed(key, "net"):
		return "net", "model"
	case isIndexed(key, "hostpci"):
		return "hostpci", "host"
	case isIndexed(key, "ipconfig"):
		return "ipconfig", ""
	}
	if d, ok := qemuTokenDefaults[key]; ok {
		return key, d
	}
	return "", ""
}

// String renders a gap as key=value or key.token=value.
func (g Gap) String() string {
	var b strings.Builder
	b.WriteString(g.Key)
	if g.Token != "" {
		b.WriteByte('.')
		b.WriteString(g.Token)
	}
	b.WriteByte('=')
	b.WriteString(g.Value)
	return b.String()
}

// ModelledKeys lists the config keys of a guest type the manifest model covers, sorted; ModelledPrefixes the
// prefixes of its indexed keys (scsi for scsi0, scsi1, ...).
func ModelledKeys(t inventory.GuestType) []string {
	if t == inventory.LXC {
		return slices.Sorted(maps.Keys(lxcModelled))
	}
	return slices.Sorted(maps.Keys(qemuModelled))
}

// ModelledPrefixes lists the prefixes of the indexed config keys a guest type's model covers, sorted.
func ModelledPrefixes(t inventory.GuestType) []string {
	p := qemuModelledPrefixes
	if t == inventory.LXC {
		p = lxcModelledPrefixes
	}
	out := slices.Clone(p)
	slices.Sort(out)
	return out
}

// BookkeepingKeys lists PVE's own bookkeeping keys of a guest type, sorted; BookkeepingPrefixes the
// prefixes of indexed ones (unused0, unused1, ...).
func BookkeepingKeys(t inventory.GuestType) []string {
	if t == inventory.LXC {
		return slices.Sorted(maps.Keys(lxcBookkeeping))
	}
	return slices.Sorted(maps.Keys(qemuBookkeeping))
}

// BookkeepingPrefixes lists the prefixes of indexed bookkeeping keys, sorted.
func BookkeepingPrefixes() []string { return slices.Clone(bookkeepingPrefixes) }
