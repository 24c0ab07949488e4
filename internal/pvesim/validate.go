package pvesim

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/pvesim/schema"
)

// Request parameter validation, a port of pve-common JSONSchema.pm check_object/check_prop/check_type and
// parse_property_string. Error texts are PVE's, word for word.

// value is one request parameter: its text, and for JSON bodies the kind of JSON value it was.
type value struct {
	s    string
	kind string // "" for a scalar; "bool" for a JSON boolean; "ARRAY"/"HASH" for JSON arrays/objects
}

// formatError is PVE::Exception "format error" with per-key errors, raised by parse_property_string.
type formatError struct {
	errors map[string]string
}

func (e *formatError) Error() string {
	// PVE::Exception::stringify: the message, then "key: error\n" for every error.
	var b strings.Builder
	b.WriteString("format error\n")
	for _, k := range slices.Sorted(maps.Keys(e.errors)) {
		fmt.Fprintf(&b, "%s: %s\n", k, e.errors[k])
	}
	return b.String()
}

func addError(errs map[string]string, path, msg string) {
	if path == "" {
		path = "_root"
	}
	if old, ok := errs[path]; ok {
		errs[path] = old + `\n` + msg // PVE joins with a literal backslash-n
		return
	}
	errs[path] = msg
}

var (
	reIndexed = regexp.MustCompile(`^([a-z][a-z_\-]*?)(\d+)$`)
)

// indexMax is the highest index of each indexed option, from the option descriptions in qemu-server and
// pve-container ($MAX_NETS, $MAX_UNUSED_DISKS, ...). Keys are "<kind>:<base>" with kind qemu or lxc.
var indexMax = map[string]int{
	"qemu:ide": 3, "qemu:sata": 5, "qemu:scsi": 30, "qemu:virtio": 15, "qemu:net": 31, "qemu:unused": 255,
	"qemu:hostpci": 15, "qemu:usb": 13, "qemu:serial": 3, "qemu:parallel": 2, "qemu:numa": 7,
	"qemu:ipconfig": 31, "qemu:virtiofs": 9,
	"lxc:mp": 255, "lxc:unused": 255, "lxc:net": 31, "lxc:dev": 255,
}

// lookupProp finds the schema of a parameter, expanding indexed options (net[n] → net0…net31).
func lookupProp(props map[string]*schema.Prop, kind, key string) *schema.Prop {
	if p, ok := props[key]; ok && !strings.HasSuffix(key, "[n]") {
		return p
	}
	m := reIndexed.FindStringSubmatch(key)
	if m == nil {
		return nil
	}
	p, ok := props[m[1]+"[n]"]
	if !ok {
		return nil
	}
	if len(m[2]) > 1 && m[2][0] == '0' {
		return nil
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		return nil
	}
	if max, ok := indexMax[kind+":"+m[1]]; ok && n > max {
		return nil
	}
	return p
}

// validateParams checks request parameters against a method schema (RESTHandler handle → validate).
// kind ("qemu"/"lxc"/"") selects the index ranges. It returns the errors by parameter name.
func validateParams(m *schema.Method, kind string, params map[string]value) map[string]string {
	errs := map[string]string{}
	props := map[string]*schema.Prop{}
	if m.Parameters != nil && m.Parameters.Properties != nil {
		props = m.Parameters.Properties
	}
	// Each missing property is reported under its own name, so the order of this walk does not matter.
	for k, p := range props {
		if strings.HasSuffix(k, "[n]") {
			continue
		}
		if _, ok := params[k]; !ok {
			if !bool(p.Optional) && p.Alias == "" {
				addError(errs, k, "property is missing and it is not optional")
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		p := lookupProp(props, kind, k)
		if p == nil {
			addError(errs, k, "property is not defined in schema and the schema does not allow additional properties")
			continue
		}
		if p.Requires != "" {
			if _, ok := params[p.Requires]; !ok {
				addError(errs, p.Requires, fmt.Sprintf("missing property - '%s' requires this property", k))
			}
		}
		checkProp(params[k], p, k, errs)
	}
	return errs
}

// checkProp is JSONSchema::check_prop for a defined scalar value.
func checkProp(v value, p *schema.Prop, path string, errs map[string]string) {
	if !checkType(v, p.Type, path, errs) {
		return
	}
	if v.kind == "ARRAY" || v.kind == "HASH" {
		return
	}
	s := v.s
	if p.Format != "" || p.FormatObject != nil {
		if err := checkFormat(p, s, path); err != nil {
			addError(errs, path, "invalid format - "+err.Error())
			return
		}
	}
	if p.Pattern != "" {
		if re := perlPattern(p.Pattern); re != nil && !re.MatchString(s) {
			addError(errs, path, "value does not match the regex pattern")
			return
		}
	}
	if p.MaxLength != nil && len(s) > *p.MaxLength {
		addError(errs, path, fmt.Sprintf("value may only be %d characters long", *p.MaxLength))
		return
	}
	if p.MinLength != nil && len(s) < *p.MinLength {
		addError(errs, path, fmt.Sprintf("value must be at least %d characters long", *p.MinLength))
		return
	}
	if isNumber(s) {
		f, _ := strconv.ParseFloat(s, 64)
		if p.Maximum != nil && f > *p.Maximum {
			addError(errs, path, "value must have a maximum value of "+perlNum(*p.Maximum))
			return
		}
		if p.Minimum != nil && f < *p.Minimum {
			addError(errs, path, "value must have a minimum value of "+perlNum(*p.Minimum))
			return
		}
	}
	if len(p.Enum) > 0 {
		for _, e := range p.Enum {
			if e == s {
				return
			}
		}
		addError(errs, path, fmt.Sprintf("value '%s' does not have a value in the enumeration '%s'", s, strings.Join(p.Enum, ", ")))
	}
}

func perlNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// checkType is JSONSchema::check_type for the scalar types (top-level booleans take only 1 and 0).
func checkType(v value, typ, path string, errs map[string]string) bool {
	if typ == "" || typ == "any" {
		return true
	}
	if v.kind == "ARRAY" || v.kind == "HASH" {
		if typ == "array" && v.kind == "ARRAY" || typ == "object" && v.kind == "HASH" {
			return true
		}
		if typ == "array" || typ == "object" {
			addError(errs, path, fmt.Sprintf("type check ('%s') failed", typ))
		} else {
			addError(errs, path, fmt.Sprintf("type check ('%s') failed - got %s", typ, v.kind))
		}
		return false
	}
	if v.kind == "bool" {
		if typ == "boolean" {
			return true
		}
		addError(errs, path, fmt.Sprintf("type check ('%s') failed - got JSON::PP::Boolean", typ))
		return false
	}
	switch typ {
	case "array", "object":
		addError(errs, path, fmt.Sprintf("type check ('%s') failed", typ))
		return false
	case "boolean":
		if v.s != "1" && v.s != "0" {
			addError(errs, path, fmt.Sprintf("type check ('boolean') failed - got '%s'", v.s))
			return false
		}
	case "integer":
		if !isInteger(v.s) {
			addError(errs, path, fmt.Sprintf("type check ('integer') failed - got '%s'", v.s))
			return false
		}
	case "number":
		if !isNumber(v.s) {
			addError(errs, path, fmt.Sprintf("type check ('number') failed - got '%s'", v.s))
			return false
		}
	}
	return true
}

// checkFormat is JSONSchema::check_format: a property-string object, a registered hash format, or a named
// code format with optional -list/-opt suffix.
func checkFormat(p *schema.Prop, v, path string) error {
	if p.FormatObject != nil {
		_, err := parsePropertyString(p.FormatObject, v, path)
		return err
	}
	return checkNamedFormat(p.Format, v, path)
}

func checkNamedFormat(format, v, path string) error {
	if hf, ok := hashFormats[format]; ok {
		_, err := parsePropertyString(hf, v, path)
		return err
	}
	if uncheckedFormats[format] {
		return nil
	}
	name, suffix := format, ""
	if strings.HasSuffix(format, "-list") {
		name, suffix = strings.TrimSuffix(format, "-list"), "list"
	} else if strings.HasSuffix(format, "-opt") {
		name, suffix = strings.TrimSuffix(format, "-opt"), "opt"
	}
	f, ok := namedFormats[name]
	if !ok {
		if ff, ok := namedFormats[format]; ok {
			return ff(v)
		}
		return nil // a format the simulator does not know: accepted, as documented
	}
	switch suffix {
	case "list":
		for _, x := range splitList(v) {
			if err := f(x); err != nil {
				return err
			}
		}
		return nil
	case "opt":
		if v == "" {
			return nil
		}
	}
	return f(v)
}

// parsePropertyString is JSONSchema::parse_property_string: it splits on commas, resolves the default key
// and aliases (keyAlias, e.g. virtio=MAC → model=virtio,macaddr=MAC), normalises booleans, and checks the
// result against the sub-schema. The returned map uses the canonical key names.
func parsePropertyString(format map[string]*schema.Prop, data, path string) (map[string]string, error) {
	res := map[string]string{}
	defaultKey := ""
	for _, part := range strings.Split(data, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		if k, v, ok := keyValue(part); ok {
			if _, dup := res[k]; dup {
				return nil, ferr("duplicate key in comma-separated list property: %s", k)
			}
			sch := format[k]
			if sch != nil && sch.Alias != "" {
				if ka := sch.KeyAlias; ka != "" {
					if _, dup := res[ka]; dup {
						return nil, ferr("key alias '%s' is already defined", ka)
					}
					res[ka] = k
				}
				k = sch.Alias
				sch = format[k]
			}
			if sch == nil {
				return nil, ferr("invalid key in comma-separated list property: %s", k)
			}
			if sch.Type == "boolean" {
				v, _ = parseBoolean(v)
			}
			res[k] = v
		} else if !strings.Contains(part, "=") {
			if defaultKey != "" {
				return nil, ferr("duplicate key in comma-separated list property: %s", defaultKey)
			}
			defaultKey = firstDefaultKey(format)
			if defaultKey == "" {
				return nil, ferr("value without key, but schema does not define a default key")
			}
			if res[defaultKey] != "" {
				return nil, ferr("duplicate key in comma-separated list property: %s", defaultKey)
			}
			res[defaultKey] = part
		} else {
			return nil, ferr("missing key in comma-separated list property")
		}
	}
	errs := map[string]string{}
	sub := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	// Each missing key is reported under its own path, so the order of this walk does not matter.
	for k, p := range format {
		if _, ok := res[k]; !ok && !bool(p.Optional) && p.Alias == "" {
			addError(errs, sub(k), "property is missing and it is not optional")
		}
	}
	for _, k := range slices.Sorted(maps.Keys(res)) {
		p := format[k]
		if p == nil {
			addError(errs, sub(k), "property is not defined in schema and the schema does not allow additional properties")
			continue
		}
		if p.Requires != "" {
			if _, ok := res[p.Requires]; !ok {
				addError(errs, sub(p.Requires), fmt.Sprintf("missing property - '%s' requires this property", sub(k)))
			}
		}
		if p.Alias != "" {
			continue
		}
		checkProp(value{s: res[k]}, p, sub(k), errs)
	}
	if len(errs) > 0 {
		return nil, &formatError{errors: errs}
	}
	return res, nil
}

// firstDefaultKey is the first key in sorted order that a format marks as its default key, or "". The
// formats are walked unsorted: sorting a schema's keys on every parse cost more than the parse.
func firstDefaultKey(format map[string]*schema.Prop) string {
	key := ""
	for k, p := range format {
		if p.DefaultKey && (key == "" || k < key) {
			key = k
		}
	}
	return key
}

// printPropertyString is JSONSchema::print_property_string: the default key first without its name (unless it
// is a keyAlias target), then keyAlias pairs as "<model>=<macaddr>", then the required keys, then the rest
// sorted alphabetically; disk-size values are printed with format_size. skip lists keys to leave out.
func printPropertyString(format map[string]*schema.Prop, data map[string]string, skip ...string) string {
	done := map[string]bool{}
	for _, s := range skip {
		done[s] = true
	}
	defaultKey := ""
	keyAlias := map[string]string{} // e.g. model → macaddr
	var required []string
	for k, p := range format {
		if p.Alias != "" {
			if p.KeyAlias != "" {
				keyAlias[p.KeyAlias] = p.Alias
			}
			continue
		}
		if p.DefaultKey {
			// The last in key order, as a walk of the sorted keys would leave it.
			if k > defaultKey {
				defaultKey = k
			}
		} else if !bool(p.Optional) {
			required = append(required, k)
		}
	}
	slices.Sort(required)
	var parts []string
	render := func(k, v string) string {
		if p := format[k]; p != nil && p.Format == "disk-size" {
			if n, ok := parseSize(v); ok {
				return formatSize(n)
			}
		}
		return v
	}
	if defaultKey != "" && !done[defaultKey] {
		if v, ok := data[defaultKey]; ok && (keyAlias[defaultKey] == "" || data[keyAlias[defaultKey]] == "") {
			parts = append(parts, render(defaultKey, v))
			done[defaultKey] = true
		}
	}
	for _, ka := range slices.Sorted(maps.Keys(keyAlias)) {
		a := keyAlias[ka]
		v, ok1 := data[ka]
		mac, ok2 := data[a]
		if ok1 && ok2 && mac != "" && !done[ka] {
			parts = append(parts, v+"="+mac)
			done[ka], done[a] = true, true
		}
	}
	for _, k := range required {
		if v, ok := data[k]; ok && !done[k] {
			parts = append(parts, k+"="+render(k, v))
			done[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(data)) {
		if !done[k] {
			parts = append(parts, k+"="+render(k, data[k]))
			done[k] = true
		}
	}
	return strings.Join(parts, ",")
}
