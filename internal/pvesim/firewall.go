package pvesim

import (
	"crypto/sha1" //nolint:gosec // PVE's digests are SHA-1
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/firewall"
)

// The firewall (pve-firewall src/PVE/API2/Firewall/*.pm over src/PVE/Firewall.pm): a guest's options,
// rules, IP sets and aliases (<vmid>.fw), and the cluster's options, rules, security groups, IP sets and
// aliases (cluster.fw). The simulator keeps each file's content in memory as PVE's parser returns it; the
// digests are PVE's: copy_list_with_digest over a list, copy_opject_with_digest over options.

// fwRule is one rule as the parser keeps it: the rule properties that are set, enable always present.
type fwRule map[string]string

// fwIPSet is one IP set: its comment and entries (cidr, nomatch, comment), newest first.
type fwIPSet struct {
	comment string
	entries []map[string]string
}

// fwConf is one firewall file.
type fwConf struct {
	options map[string]string
	rules   []fwRule
	ipsets  map[string]*fwIPSet
	aliases map[string]map[string]string // lower-cased name → name, cidr, comment, ipversion
	groups  map[string][]fwRule          // cluster.fw only
	gcomm   map[string]string            // group comments
}

func newFWConf() *fwConf {
	return &fwConf{options: map[string]string{}, ipsets: map[string]*fwIPSet{},
		aliases: map[string]map[string]string{}, groups: map[string][]fwRule{}, gcomm: map[string]string{}}
}

// ruleKeys are PVE's $rule_properties that a rule keeps (pos and digest are request-only).
var ruleKeys = []string{"type", "action", "macro", "iface", "source", "dest", "proto", "enable", "log", "sport",
	"dport", "comment", "icmp-type"}

var (
	reFWName     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9\-_]+$`)
	reFWAction   = regexp.MustCompile(`^(ACCEPT|DROP|REJECT)$`)
	reFWGuestNet = regexp.MustCompile(`^net(\d+)$`)
	rePortRange  = regexp.MustCompile(`^([0-9]+):([0-9]+)$`)
	rePortNum    = regexp.MustCompile(`^([0-9]+)$`)
)

func init() {
	namedFormats["pve-fw-addr-spec"] = func(v string) error { _, err := fwParseAddressList(v); return err }
	namedFormats["pve-fw-dport-spec"] = func(v string) error { return fwParsePorts(v, true) }
	namedFormats["pve-fw-sport-spec"] = func(v string) error { return fwParsePorts(v, false) }
	namedFormats["pve-fw-protocol-spec"] = func(v string) error {
		if v == "" || firewall.IsProtocolName(v) {
			return nil
		}
		if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 255 {
			return nil
		}
		return ferr("unknown protocol '%s'", v)
	}
	namedFormats["pve-fw-icmp-type-spec"] = func(v string) error {
		if v == "" || firewall.ValidICMPType("", v) {
			return nil
		}
		return ferr("invalid icmp-type value '%s'", v)
	}
	namedFormats["IPorCIDR"] = func(v string) error { _, err := fwIPOrCIDR(v); return err }
	namedFormats["IPorCIDRorAlias"] = func(v string) error {
		if fwAliasRef(v) {
			return nil
		}
		_, err := fwIPOrCIDR(v)
		return err
	}
	namedFormats["pve-iface"] = func(v string) error {
		if !firewall.IfaceRE.MatchString(v) {
			return ferr("invalid network interface name '%s'", v)
		}
		return nil
	}
}

// fwScopedName splits a reference's scope: "dc/name" and "guest/name" name the cluster's or the guest's
// object explicitly (PVE 8.2 and later); an unscoped name is looked up in the guest first, then the cluster.
func fwScopedName(v string) (scope, name string) {
	if s, n, ok := strings.Cut(v, "/"); ok && (s == "dc" || s == "guest") {
		return s, n
	}
	return "", v
}

// fwAliasRef reports whether an address is an alias name (scoped or not).
func fwAliasRef(v string) bool {
	_, n := fwScopedName(v)
	return reFWName.MatchString(n)
}

// fwIPOrCIDR is pve_verify_ip_or_cidr: an address or network; it returns the IP version.
func fwIPOrCIDR(v string) (int, error) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return 0, ferr("invalid prefix length in %s", v)
		}
		return ipVersion(p.Addr()), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return 0, ferr("value does not look like a valid IP address or CIDR network")
	}
	return ipVersion(a), nil
}

func ipVersion(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// fwParseAddressList is parse_address_list: an IP set reference (+name), an alias, or a list of
// addresses, networks and (alone) one range. It returns the IP version of a literal list.
func fwParseAddressList(v string) (int, error) {
	if strings.HasPrefix(v, "+") && !strings.ContainsAny(v, " \t\n") {
		if len(v) > 64+1+len("guest/") {
			return 0, ferr("ipset name too long")
		}
		return 0, nil
	}
	if fwAliasRef(v) {
		if len(v) > 64+len("guest/") {
			return 0, ferr("alias name too long")
		}
		return 0, nil
	}
	elems := strings.Split(v, ",")
	version, ranges := 0, false
	for _, e := range elems {
		if e == "" {
			return 0, ferr("extraneous commas in list")
		}
		var vers int
		if lo, hi, ok := strings.Cut(e, "-"); ok {
			a, err1 := netip.ParseAddr(lo)
			b, err2 := netip.ParseAddr(hi)
			if err1 != nil || err2 != nil || a.Is4() != b.Is4() || b.Less(a) {
				return 0, ferr("invalid IP address: Invalid IP range %s", e)
			}
			ranges, vers = true, ipVersion(a)
		} else {
			n, err := fwIPOrCIDR(e)
			if err != nil {
				return 0, ferr("invalid IP address: Invalid IP %s", e)
			}
			vers = n
		}
		if version != 0 && vers != version {
			return 0, ferr("detected mixed ipv4/ipv6 addresses in address list '%s'", v)
		}
		version = vers
	}
	if ranges && len(elems) > 1 {
		return 0, ferr("you can't use a range in a list")
	}
	return version, nil
}

// fwParsePorts is parse_port_name_number_or_range.
func fwParsePorts(v string, dport bool) error {
	elems := strings.Split(v, ",")
	count, icmp := 0, false
	for _, item := range elems {
		if item == "" {
			return ferr("extraneous commas in list")
		}
		if m := rePortRange.FindStringSubmatch(item); m != nil {
			count += 2
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			switch {
			case a > 65535:
				return ferr("invalid port '%s'", m[1])
			case b > 65535:
				return ferr("invalid port '%s'", m[2])
			case a > b:
				return ferr("backwards range '%s:%s' not allowed, did you mean '%s:%s'?", m[1], m[2], m[2], m[1])
			}
		} else if m := rePortNum.FindStringSubmatch(item); m != nil {
			count++
			if n, _ := strconv.Atoi(m[1]); n > 65535 {
				return ferr("invalid port '%s'", m[1])
			}
		} else if dport && firewall.IsICMPTypeName("", item) {
			icmp = true
		} else if !firewall.IsServiceName(item) {
			return ferr("invalid port '%s'", item)
		}
	}
	if icmp && count > 0 {
		return ferr("ICMP ports not allowed in port range")
	}
	if count > 15 {
		return ferr("too many entries in port list (> 15 numbers)")
	}
	return nil
}

// fwListDigest is copy_list_with_digest's digest: SHA-1 over every entry's sorted key:value lines.
func fwListDigest(list []map[string]string) string {
	h := sha1.New() //nolint:gosec // PVE's digest
	for _, e := range list {
		for _, k := range slices.Sorted(maps.Keys(e)) {
			fmt.Fprintf(h, "%s:%s\n", k, e[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fwListWithDigest is copy_list_with_digest: copies of the entries, each with the list's digest.
func fwListWithDigest(list []map[string]string) ([]map[string]any, string) {
	d := fwListDigest(list)
	out := []map[string]any{}
	for _, e := range list {
		m := map[string]any{"digest": d}
		for k, v := range e {
			m[k] = fwJSONValue(k, v)
		}
		out = append(out, m)
	}
	return out, d
}

// fwJSONValue is how PVE's JSON carries a value: the integer properties as numbers.
func fwJSONValue(k, v string) any {
	switch k {
	case "enable", "ipversion", "nomatch", "pos":
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return v
}

func rulesAsMaps(rules []fwRule) []map[string]string {
	out := make([]map[string]string, len(rules))
	for i, r := range rules {
		out[i] = r
	}
	return out
}

// assertIfModified is PVE::Tools::assert_if_modified.
func assertIfModified(digest string, c *call) error {
	if c.has("digest") && c.str("digest") != "" && c.str("digest") != digest {
		return dieErr("detected modified configuration - file changed by other user? Try again.")
	}
	return nil
}

// fwScope is what a firewall request works on: the cluster file, or a guest's file with the cluster's.
type fwScope struct {
	cluster *fwConf
	conf    *fwConf // the file the request changes
	env     string  // "vm", "ct", "cluster" or "group"
	vmid    int
}

// clusterFW returns cluster.fw, created empty on first use.
func (s *Sim) clusterFW() *fwConf {
	if s.firewallCluster == nil {
		s.firewallCluster = newFWConf()
	}
	return s.firewallCluster
}

// guestFW returns a guest's firewall file, created empty on first use; a destroyed guest's file is removed
// by dropGuestFW.
func (s *Sim) guestFW(vmid int) *fwConf {
	if s.firewallGuests == nil {
		s.firewallGuests = map[int]*fwConf{}
	}
	f := s.firewallGuests[vmid]
	if f == nil {
		f = newFWConf()
		s.firewallGuests[vmid] = f
	}
	return f
}

// fwScopeOf finds the firewall file a request addresses by its path template.
func (s *Sim) fwScopeOf(c *call) (*fwScope, error) {
	if strings.HasPrefix(c.template, "/cluster/") {
		return &fwScope{cluster: s.clusterFW(), conf: s.clusterFW(), env: "cluster"}, nil
	}
	kind, env := "qemu", "vm"
	if strings.Contains(c.template, "/lxc/") {
		kind, env = "lxc", "ct"
	}
	g, err := s.guestOn(c, kind)
	if err != nil {
		return nil, err
	}
	return &fwScope{cluster: s.clusterFW(), conf: s.guestFW(g.vmid), env: env, vmid: g.vmid}, nil
}

// dropGuestFW removes a destroyed guest's firewall file, as destroy_vm does.
func (s *Sim) dropGuestFW(vmid int) { delete(s.firewallGuests, vmid) }

// ----- options -----

var guestFWOptions = []string{"enable", "macfilter", "dhcp", "ndp", "radv", "ipfilter", "policy_in", "policy_out",
	"log_level_in", "log_level_out"}

var clusterFWOptions = []string{"enable", "ebtables", "policy_in", "policy_out", "policy_forward", "log_ratelimit"}

// fwOptionsDigest is copy_opject_with_digest's digest.
func fwOptionsDigest(o map[string]string) string {
	return fwListDigest([]map[string]string{o})
}

func (s *Sim) handleFWOptionsGet(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	out := map[string]any{"digest": fwOptionsDigest(sc.conf.options)}
	for k, v := range sc.conf.options {
		out[k] = fwOptionValue(k, v)
	}
	return out, nil
}

func fwOptionValue(k, v string) any {
	switch k {
	case "policy_in", "policy_out", "policy_forward", "log_level_in", "log_level_out", "log_ratelimit":
		return v
	}
	n, _ := strconv.Atoi(v)
	return n
}

func (s *Sim) handleFWOptionsSet(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	if err := assertIfModified(fwOptionsDigest(sc.conf.options), c); err != nil {
		return nil, err
	}
	known := guestFWOptions
	if sc.env == "cluster" {
		known = clusterFWOptions
	}
	opts := maps.Clone(sc.conf.options)
	for _, k := range splitList(c.str("delete")) {
		if !slices.Contains(known, k) {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("no such option '%s'", k)})
		}
		delete(opts, k)
	}
	for _, k := range known {
		if !c.has(k) {
			continue
		}
		v := c.str(k)
		if b, ok := parseBoolean(v); ok && k != "policy_in" && k != "policy_out" && k != "policy_forward" &&
			!strings.HasPrefix(k, "log_") {
			v = b
		}
		opts[k] = v
	}
	sc.conf.options = opts
	return nil, nil
}

// ----- rules -----

// fwRules finds the rule list a rules request addresses: a group's, the cluster's or a guest's.
func (s *Sim) fwRules(c *call) (*fwScope, []fwRule, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, nil, err
	}
	if strings.HasPrefix(c.template, "/cluster/firewall/groups/") {
		g := c.str("group")
		rules, ok := sc.cluster.groups[g]
		if !ok {
			return nil, nil, dieErr("no such security group '%s'", g)
		}
		sc.env = "group"
		return sc, rules, nil
	}
	return sc, sc.conf.rules, nil
}

func (sc *fwScope) saveRules(c *call, rules []fwRule) {
	if sc.env == "group" {
		sc.cluster.groups[c.str("group")] = rules
		return
	}
	sc.conf.rules = rules
}

func (s *Sim) handleFWRulesGet(c *call) (any, error) {
	_, rules, err := s.fwRules(c)
	if err != nil {
		return nil, err
	}
	list, _ := fwListWithDigest(rulesAsMaps(rules))
	for i, r := range list {
		r["pos"] = i
	}
	return list, nil
}

func (s *Sim) handleFWRuleGet(c *call) (any, error) {
	_, rules, err := s.fwRules(c)
	if err != nil {
		return nil, err
	}
	list, _ := fwListWithDigest(rulesAsMaps(rules))
	pos, _ := strconv.Atoi(c.str("pos"))
	if pos >= len(list) {
		return nil, dieErr("no rule at position %d", pos)
	}
	list[pos]["pos"] = pos
	return list[pos], nil
}

// handleFWRuleCreate is create_rule: PVE puts the new rule first whatever pos says, and does not check the
// digest; a rule created without enable is disabled.
func (s *Sim) handleFWRuleCreate(c *call) (any, error) {
	sc, rules, err := s.fwRules(c)
	if err != nil {
		return nil, err
	}
	rule := fwRule{}
	copyRuleData(rule, c)
	if err := s.verifyRule(rule, sc); err != nil {
		return nil, err
	}
	if !c.has("enable") {
		rule["enable"] = "0"
	}
	sc.saveRules(c, append([]fwRule{rule}, rules...))
	return nil, nil
}

// fwRuleToChange finds the rule list a change of one rule addresses (fwRules) and the rule's position in it,
// when the list is still the one the client read (digest) and has a rule there.
func (s *Sim) fwRuleToChange(c *call) (sc *fwScope, rules []fwRule, pos int, err error) {
	if sc, rules, err = s.fwRules(c); err != nil {
		return nil, nil, 0, err
	}
	if err := assertIfModified(fwListDigest(rulesAsMaps(rules)), c); err != nil {
		return nil, nil, 0, err
	}
	pos, _ = strconv.Atoi(c.str("pos"))
	if pos >= len(rules) {
		return nil, nil, 0, dieErr("no rule at position %d", pos)
	}
	return sc, rules, pos, nil
}

// handleFWRuleUpdate is update_rule: with moveto a move (other arguments ignored), else a change in place.
func (s *Sim) handleFWRuleUpdate(c *call) (any, error) {
	sc, rules, pos, err := s.fwRuleToChange(c)
	if err != nil {
		return nil, err
	}
	if c.has("moveto") {
		if to, _ := strconv.Atoi(c.str("moveto")); to != pos {
			sc.saveRules(c, firewall.MoveRule(rules, pos, to))
			return nil, nil
		}
	}
	rule := maps.Clone(rules[pos])
	copyRuleData(rule, c)
	for _, k := range splitList(c.str("delete")) {
		if !slices.Contains(ruleKeys, k) && k != "pos" && k != "digest" {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("no such property ('%s')", k)})
		}
		if k == "type" || k == "action" {
			return nil, paramErr(map[string]string{"delete": fmt.Sprintf("unable to delete required property '%s'", k)})
		}
		delete(rule, k)
	}
	delete(rule, "ipversion")
	if err := s.verifyRule(rule, sc); err != nil {
		return nil, err
	}
	out := slices.Clone(rules)
	out[pos] = rule
	sc.saveRules(c, out)
	return nil, nil
}

func (s *Sim) handleFWRuleDelete(c *call) (any, error) {
	sc, rules, pos, err := s.fwRuleToChange(c)
	if err != nil {
		return nil, err
	}
	sc.saveRules(c, slices.Delete(slices.Clone(rules), pos, pos+1))
	return nil, nil
}

// copyRuleData is copy_rule_data: every rule property given; ” or '-' removes it.
func copyRuleData(rule fwRule, c *call) {
	for _, k := range ruleKeys {
		if !c.has(k) {
			continue
		}
		if v := c.str(k); v == "" || v == "-" {
			delete(rule, k)
		} else {
			rule[k] = v
		}
	}
}

// verifyRule is verify_rule: the first error is raised as a parameter error. It sets the rule's ipversion
// and the macro's preferred spelling as PVE does.
func (s *Sim) verifyRule(rule fwRule, sc *fwScope) error {
	fail := func(k, msg string) error { return paramErr(map[string]string{k: msg}) }
	typ, action := rule["type"], rule["action"]
	if typ == "" {
		return fail("type", "missing property")
	}
	if action == "" {
		return fail("action", "missing property")
	}
	switch typ {
	case "in", "out":
		if !reFWAction.MatchString(action) {
			return fail("action", fmt.Sprintf("unknown action '%s'", action))
		}
	case "group":
		if sc.env == "group" {
			return fail("type", "security groups not allowed")
		}
		if !reFWName.MatchString(action) {
			return fail("action", "invalid characters in security group name")
		}
	default:
		return fail("type", fmt.Sprintf("unknown rule type '%s'", typ))
	}
	if iface := rule["iface"]; iface != "" {
		if sc.env == "group" {
			return fail("type", "parameter -i not allowed for this rule type")
		}
		if (sc.env == "vm" || sc.env == "ct") && !reFWGuestNet.MatchString(iface) {
			return fail("iface", `value does not match the regex pattern 'net\d+'`)
		}
	}
	if m := rule["macro"]; m != "" {
		pref, ok := firewall.CanonicalMacro(m)
		if !ok {
			return fail("macro", fmt.Sprintf("unknown macro '%s'", m))
		}
		rule["macro"] = pref
	}
	version := 0
	setVersion := func(v int) error {
		if v != 0 && version != 0 && v != version {
			return dieErr("detected mixed ipv4/ipv6 addresses in rule")
		}
		if v != 0 {
			version = v
		}
		return nil
	}
	proto := rule["proto"]
	switch proto {
	case "icmp":
		version = 4
	case "icmpv6", "ipv6-icmp":
		version = 6
	}
	if rule["dport"] != "" {
		if proto == "" {
			return fail("proto", "missing property - 'dport' requires this property")
		}
		if !firewall.ProtoHasPorts(proto) && proto != "icmp" && proto != "icmpv6" {
			return fail("dport", fmt.Sprintf("protocol '%s' does not support ports", proto))
		}
	}
	if it := rule["icmp-type"]; it != "" {
		if proto != "icmp" && proto != "icmpv6" && proto != "ipv6-icmp" {
			return fail("proto", "missing property - 'icmp-type' requires this property")
		}
		if rule["dport"] != "" {
			return fail("icmp-type", "'icmp-type' cannot be specified together with 'dport'")
		}
		if !firewall.ValidICMPType(proto, it) {
			return fail("icmp-type", fmt.Sprintf("invalid icmp-type '%s' for proto '%s'", it, proto))
		}
	}
	if rule["sport"] != "" {
		if proto == "" {
			return fail("proto", "missing property - 'sport' requires this property")
		}
		if !firewall.ProtoHasPorts(proto) {
			return fail("sport", fmt.Sprintf("protocol '%s' does not support ports", proto))
		}
	}
	for _, k := range []string{"source", "dest"} {
		v := rule[k]
		if v == "" {
			continue
		}
		n, err := fwParseAddressList(v)
		if err != nil {
			return fail(k, strings.TrimSuffix(err.Error(), "\n"))
		}
		if err := setVersion(n); err != nil {
			return err
		}
		vers, err := s.checkFWRef(k, v, sc)
		if err != nil {
			return err
		}
		if err := setVersion(vers); err != nil {
			return err
		}
	}
	delete(rule, "ipversion")
	if version != 0 {
		rule["ipversion"] = strconv.Itoa(version)
	}
	return nil
}

// checkFWRef checks that an IP set or alias a rule names exists where the scope looks (the guest's own
// file, then the cluster's; dc/ and guest/ name one of them); it returns an alias's IP version.
func (s *Sim) checkFWRef(k, v string, sc *fwScope) (int, error) {
	local := sc.conf
	if sc.env == "cluster" || sc.env == "group" {
		local = nil
	}
	if rest, ok := strings.CutPrefix(v, "+"); ok {
		scope, name := fwScopedName(rest)
		if !reFWName.MatchString(name) || (scope == "guest" && local == nil) {
			return 0, paramErr(map[string]string{k: fmt.Sprintf("invalid ipset name '%s'", v)})
		}
		found := (scope != "guest" && (sc.cluster.ipsets[name] != nil || fwBuiltinIPSet(name, sc))) ||
			(scope != "dc" && local != nil && local.ipsets[name] != nil)
		if !found {
			return 0, paramErr(map[string]string{k: fmt.Sprintf("no such ipset '%s'", rest)})
		}
		return 0, nil
	}
	if !fwAliasRef(v) {
		return 0, nil
	}
	scope, name := fwScopedName(v)
	var e map[string]string
	if scope != "dc" && local != nil {
		e = local.aliases[strings.ToLower(name)]
	}
	if e == nil && scope != "guest" {
		e = sc.cluster.aliases[strings.ToLower(name)]
	}
	if e == nil {
		return 0, paramErr(map[string]string{k: fmt.Sprintf("no such alias '%s'", v)})
	}
	n, _ := strconv.Atoi(e["ipversion"])
	return n, nil
}

// fwBuiltinIPSet reports the IP sets PVE provides without a definition: management and blacklist at
// cluster level, and a guest's ipfilter-net<n>.
func fwBuiltinIPSet(name string, sc *fwScope) bool {
	switch {
	case name == "management" || name == "blacklist":
		return true
	case strings.HasPrefix(name, "ipfilter-net"):
		return sc.env == "vm" || sc.env == "ct"
	}
	return false
}

// ----- IP sets -----

func ipsetIndex(conf *fwConf) []map[string]string {
	var out []map[string]string
	for _, n := range slices.Sorted(maps.Keys(conf.ipsets)) {
		e := map[string]string{"name": n}
		if cm := conf.ipsets[n].comment; cm != "" {
			e["comment"] = cm
		}
		out = append(out, e)
	}
	return out
}

func (s *Sim) handleFWIPSetList(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	list, _ := fwListWithDigest(ipsetIndex(sc.conf))
	return list, nil
}

// handleFWIPSetCreate is create_ipset: a new empty set, or with rename an existing set renamed.
func (s *Sim) handleFWIPSetCreate(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	if err := assertIfModified(fwListDigest(ipsetIndex(sc.conf)), c); err != nil {
		return nil, err
	}
	name := c.str("name")
	if old := c.str("rename"); old != "" {
		set := sc.conf.ipsets[old]
		if set == nil {
			return nil, paramErr(map[string]string{"name": fmt.Sprintf("IPSet '%s' does not exist", old)})
		}
		if sc.conf.ipsets[name] != nil && name != old {
			return nil, paramErr(map[string]string{"name": fmt.Sprintf("IPSet '%s' does already exist", name)})
		}
		delete(sc.conf.ipsets, old)
		if c.has("comment") {
			set.comment = c.str("comment")
		}
		sc.conf.ipsets[name] = set
		return nil, nil
	}
	if sc.conf.ipsets[name] != nil {
		return nil, paramErr(map[string]string{"name": fmt.Sprintf("IPSet '%s' already exists", name)})
	}
	sc.conf.ipsets[name] = &fwIPSet{comment: c.str("comment")}
	return nil, nil
}

func (s *Sim) fwIPSet(c *call) (*fwScope, *fwIPSet, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, nil, err
	}
	set := sc.conf.ipsets[c.str("name")]
	if set == nil {
		return nil, nil, dieErr("no such IPSet '%s'", c.str("name"))
	}
	return sc, set, nil
}

func (s *Sim) handleFWIPSetGet(c *call) (any, error) {
	_, set, err := s.fwIPSet(c)
	if err != nil {
		return nil, err
	}
	list, _ := fwListWithDigest(set.entries)
	return list, nil
}

// handleFWIPSetDelete is delete_ipset: only an empty set unless force.
func (s *Sim) handleFWIPSetDelete(c *call) (any, error) {
	sc, set, err := s.fwIPSet(c)
	if err != nil {
		return nil, err
	}
	if len(set.entries) > 0 && c.str("force") != "1" {
		return nil, dieErr("IPSet '%s' is not empty", c.str("name"))
	}
	delete(sc.conf.ipsets, c.str("name"))
	return nil, nil
}

// handleFWIPSetAdd is create_ip: an address, network or alias name, once per set.
func (s *Sim) handleFWIPSetAdd(c *call) (any, error) {
	sc, set, err := s.fwIPSet(c)
	if err != nil {
		return nil, err
	}
	cidr := c.str("cidr")
	if fwAliasRef(cidr) {
		if _, err := s.checkFWRef("cidr", cidr, sc); err != nil {
			return nil, err
		}
	}
	for _, e := range set.entries {
		if e["cidr"] == cidr {
			return nil, paramErr(map[string]string{"cidr": fmt.Sprintf("address '%s' already exists", cidr)})
		}
	}
	e := map[string]string{"cidr": cidr}
	if b, _ := parseBoolean(c.str("nomatch")); b == "1" {
		e["nomatch"] = "1"
	}
	if cm := c.str("comment"); cm != "" {
		e["comment"] = cm
	}
	set.entries = append([]map[string]string{e}, set.entries...)
	return nil, nil
}

func ipsetEntry(set *fwIPSet, cidr string) int {
	return slices.IndexFunc(set.entries, func(e map[string]string) bool { return e["cidr"] == cidr })
}

func (s *Sim) handleFWIPSetEntryGet(c *call) (any, error) {
	_, set, err := s.fwIPSet(c)
	if err != nil {
		return nil, err
	}
	list, _ := fwListWithDigest(set.entries)
	i := ipsetEntry(set, c.str("cidr"))
	if i < 0 {
		return nil, dieErr("no such IP/Network")
	}
	return list[i], nil
}

func (s *Sim) handleFWIPSetEntryUpdate(c *call) (any, error) {
	_, set, err := s.fwIPSet(c)
	if err != nil {
		return nil, err
	}
	if err := assertIfModified(fwListDigest(set.entries), c); err != nil {
		return nil, err
	}
	i := ipsetEntry(set, c.str("cidr"))
	if i < 0 {
		return nil, dieErr("no such IP/Network")
	}
	e := map[string]string{"cidr": c.str("cidr")}
	if b, _ := parseBoolean(c.str("nomatch")); b == "1" {
		e["nomatch"] = "1"
	}
	if cm := c.str("comment"); cm != "" {
		e["comment"] = cm
	}
	set.entries[i] = e
	return nil, nil
}

func (s *Sim) handleFWIPSetEntryDelete(c *call) (any, error) {
	_, set, err := s.fwIPSet(c)
	if err != nil {
		return nil, err
	}
	if err := assertIfModified(fwListDigest(set.entries), c); err != nil {
		return nil, err
	}
	if i := ipsetEntry(set, c.str("cidr")); i >= 0 {
		set.entries = slices.Delete(set.entries, i, i+1)
	}
	return nil, nil
}

// ----- aliases -----

func aliasList(conf *fwConf) []map[string]string {
	var out []map[string]string
	for _, k := range slices.Sorted(maps.Keys(conf.aliases)) {
		out = append(out, conf.aliases[k])
	}
	return out
}

func (s *Sim) handleFWAliasList(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	list, _ := fwListWithDigest(aliasList(sc.conf))
	return list, nil
}

func newAlias(name, cidr, comment string) map[string]string {
	e := map[string]string{"name": name, "cidr": cidr}
	if comment != "" {
		e["comment"] = comment
	}
	if v, err := fwIPOrCIDR(cidr); err == nil {
		e["ipversion"] = strconv.Itoa(v)
	}
	return e
}

// handleFWAliasCreate is create_alias: names are unique ignoring case.
func (s *Sim) handleFWAliasCreate(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	name := c.str("name")
	if sc.conf.aliases[strings.ToLower(name)] != nil {
		return nil, paramErr(map[string]string{"name": fmt.Sprintf("alias '%s' already exists", name)})
	}
	sc.conf.aliases[strings.ToLower(name)] = newAlias(name, c.str("cidr"), c.str("comment"))
	return nil, nil
}

func (s *Sim) handleFWAliasGet(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	e := sc.conf.aliases[strings.ToLower(c.str("name"))]
	if e == nil {
		return nil, dieErr("no such alias")
	}
	out := map[string]any{}
	for k, v := range e {
		out[k] = fwJSONValue(k, v)
	}
	return out, nil
}

// handleFWAliasUpdate is update_alias: a new address and comment, or with rename a new name.
func (s *Sim) handleFWAliasUpdate(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	if err := assertIfModified(fwListDigest(aliasList(sc.conf)), c); err != nil {
		return nil, err
	}
	name := c.str("name")
	if sc.conf.aliases[strings.ToLower(name)] == nil {
		return nil, paramErr(map[string]string{"name": fmt.Sprintf("no such alias '%s'", name)})
	}
	if !c.has("cidr") {
		return nil, paramErr(map[string]string{"cidr": "property is missing and it is not optional"})
	}
	newName := name
	if r := c.str("rename"); r != "" {
		if !strings.EqualFold(r, name) && sc.conf.aliases[strings.ToLower(r)] != nil {
			return nil, paramErr(map[string]string{"name": fmt.Sprintf("alias '%s' already exists", r)})
		}
		newName = r
	}
	delete(sc.conf.aliases, strings.ToLower(name))
	sc.conf.aliases[strings.ToLower(newName)] = newAlias(newName, c.str("cidr"), c.str("comment"))
	return nil, nil
}

func (s *Sim) handleFWAliasDelete(c *call) (any, error) {
	sc, err := s.fwScopeOf(c)
	if err != nil {
		return nil, err
	}
	if err := assertIfModified(fwListDigest(aliasList(sc.conf)), c); err != nil {
		return nil, err
	}
	delete(sc.conf.aliases, strings.ToLower(c.str("name")))
	return nil, nil
}

// ----- security groups -----

func groupIndex(conf *fwConf) []map[string]string {
	var out []map[string]string
	for _, g := range slices.Sorted(maps.Keys(conf.groups)) {
		e := map[string]string{"group": g}
		if cm := conf.gcomm[g]; cm != "" {
			e["comment"] = cm
		}
		out = append(out, e)
	}
	return out
}

func (s *Sim) handleFWGroupList(c *call) (any, error) {
	list, _ := fwListWithDigest(groupIndex(s.clusterFW()))
	return list, nil
}

// handleFWGroupCreate is create_security_group: a new empty group, or with rename an existing one renamed
// (guest rules naming the old group are not rewritten). cluster.fw keeps group names in lower case.
func (s *Sim) handleFWGroupCreate(c *call) (any, error) {
	conf := s.clusterFW()
	if err := assertIfModified(fwListDigest(groupIndex(conf)), c); err != nil {
		return nil, err
	}
	group := strings.ToLower(c.str("group"))
	if old := strings.ToLower(c.str("rename")); old != "" {
		rules, ok := conf.groups[old]
		if !ok {
			return nil, paramErr(map[string]string{"group": fmt.Sprintf("Security group '%s' does not exist", c.str("rename"))})
		}
		if _, taken := conf.groups[group]; taken && group != old {
			return nil, paramErr(map[string]string{"group": fmt.Sprintf("Security group '%s' does already exist", c.str("group"))})
		}
		comment := conf.gcomm[old]
		delete(conf.groups, old)
		delete(conf.gcomm, old)
		if c.has("comment") {
			comment = c.str("comment")
		}
		conf.groups[group], conf.gcomm[group] = rules, comment
		return nil, nil
	}
	if _, ok := conf.groups[group]; ok {
		return nil, paramErr(map[string]string{"group": fmt.Sprintf("Security group '%s' already exists", c.str("group"))})
	}
	conf.groups[group] = []fwRule{}
	conf.gcomm[group] = c.str("comment")
	return nil, nil
}

func (s *Sim) handleFWGroupDelete(c *call) (any, error) {
	conf := s.clusterFW()
	g := c.str("group")
	rules, ok := conf.groups[g]
	if !ok {
		return nil, dieErr("no such security group '%s'", g)
	}
	if len(rules) > 0 {
		return nil, dieErr("Security group '%s' is not empty", g)
	}
	delete(conf.groups, g)
	delete(conf.gcomm, g)
	return nil, nil
}

func init() {
	for _, kind := range []string{"qemu", "lxc"} {
		b := "/nodes/{node}/" + kind + "/{vmid}/firewall"
		addFWHandlers(b)
	}
	addFWHandlers("/cluster/firewall")
	handlers["GET /cluster/firewall/groups"] = (*Sim).handleFWGroupList
	handlers["POST /cluster/firewall/groups"] = (*Sim).handleFWGroupCreate
	handlers["GET /cluster/firewall/groups/{group}"] = (*Sim).handleFWRulesGet
	handlers["POST /cluster/firewall/groups/{group}"] = (*Sim).handleFWRuleCreate
	handlers["DELETE /cluster/firewall/groups/{group}"] = (*Sim).handleFWGroupDelete
	handlers["GET /cluster/firewall/groups/{group}/{pos}"] = (*Sim).handleFWRuleGet
	handlers["PUT /cluster/firewall/groups/{group}/{pos}"] = (*Sim).handleFWRuleUpdate
	handlers["DELETE /cluster/firewall/groups/{group}/{pos}"] = (*Sim).handleFWRuleDelete
}

// addFWHandlers routes the endpoints a guest and the cluster share under base.
func addFWHandlers(b string) {
	handlers["GET "+b+"/options"] = (*Sim).handleFWOptionsGet
	handlers["PUT "+b+"/options"] = (*Sim).handleFWOptionsSet
	handlers["GET "+b+"/rules"] = (*Sim).handleFWRulesGet
	handlers["POST "+b+"/rules"] = (*Sim).handleFWRuleCreate
	handlers["GET "+b+"/rules/{pos}"] = (*Sim).handleFWRuleGet
	handlers["PUT "+b+"/rules/{pos}"] = (*Sim).handleFWRuleUpdate
	handlers["DELETE "+b+"/rules/{pos}"] = (*Sim).handleFWRuleDelete
	handlers["GET "+b+"/ipset"] = (*Sim).handleFWIPSetList
	handlers["POST "+b+"/ipset"] = (*Sim).handleFWIPSetCreate
	handlers["GET "+b+"/ipset/{name}"] = (*Sim).handleFWIPSetGet
	handlers["POST "+b+"/ipset/{name}"] = (*Sim).handleFWIPSetAdd
	handlers["DELETE "+b+"/ipset/{name}"] = (*Sim).handleFWIPSetDelete
	handlers["GET "+b+"/ipset/{name}/{cidr}"] = (*Sim).handleFWIPSetEntryGet
	handlers["PUT "+b+"/ipset/{name}/{cidr}"] = (*Sim).handleFWIPSetEntryUpdate
	handlers["DELETE "+b+"/ipset/{name}/{cidr}"] = (*Sim).handleFWIPSetEntryDelete
	handlers["GET "+b+"/aliases"] = (*Sim).handleFWAliasList
	handlers["POST "+b+"/aliases"] = (*Sim).handleFWAliasCreate
	handlers["GET "+b+"/aliases/{name}"] = (*Sim).handleFWAliasGet
	handlers["PUT "+b+"/aliases/{name}"] = (*Sim).handleFWAliasUpdate
	handlers["DELETE "+b+"/aliases/{name}"] = (*Sim).handleFWAliasDelete
}
