package pvesim

import (
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/pvewire"
	"github.com/proxops/proxops/internal/testcorpus"
)

// valuePool gathers, per config key of a guest type, values PVE accepts: the schema's own (booleans, enums,
// integers at their minimum or 1) and every value the corpus configs of the type hold for the key.
func valuePool(t *testing.T, s *Sim, typ string) map[string][]string {
	t.Helper()
	d := s.desc(typ)
	pool := map[string][]string{}
	add := func(k, v string) {
		if !slices.Contains(pool[k], v) {
			pool[k] = append(pool[k], v)
		}
	}
	for k, p := range d.props {
		switch {
		case len(p.Enum) > 0:
			for _, e := range p.Enum {
				add(k, e)
			}
		case p.Type == "boolean":
			add(k, "0")
			add(k, "1")
		case p.Type == "integer":
			n := 1
			if p.Minimum != nil && *p.Minimum > 1 {
				n = int(*p.Minimum)
			}
			add(k, strconv.Itoa(n))
		}
	}
	var files []string
	for _, c := range testcorpus.Guests {
		if c.Type != typ {
			continue
		}
		found, err := filepath.Glob(filepath.Join(testcorpus.Dir(c.Name), "*.conf"))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(found)
		files = append(files, found...)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cf, _ := parseConfigFile(d, 100, string(raw))
		for _, k := range slices.Sorted(maps.Keys(cf.current.conf)) {
			if k != "description" && k != "digest" {
				add(k, cf.current.conf[k])
			}
		}
		for _, e := range cf.current.lxc {
			add(e[0], e[1])
		}
	}
	return pool
}

// For random guest configs built from PVE's schema (keys of the config schema with values it accepts, and
// the corpus's values), parse → print → parse is stable: the printed form is a fixed point and loads
// without a warning. And every key of the config is either modelled or a gap (PVE's own bookkeeping aside):
// there is no third outcome.
func TestRandomConfigsFromTheSchemaReprintStablyAndEveryKeyIsModelledOrAGap(t *testing.T) {
	s := newDescs(t)
	rng := rand.New(rand.NewPCG(18, 2026))
	for _, c := range []struct {
		typ   string
		gtype inventory.GuestType
	}{{"qemu", inventory.QEMU}, {"lxc", inventory.LXC}} {
		pool := valuePool(t, s, c.typ)
		keys := make([]string, 0, len(pool))
		for k := range pool {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i := range 300 {
			var b strings.Builder
			for range 1 + rng.IntN(3) {
				b.WriteString("#note " + strconv.Itoa(rng.IntN(100)) + ": a%b\n")
			}
			for range 3 + rng.IntN(15) {
				k := keys[rng.IntN(len(keys))]
				vals := pool[k]
				b.WriteString(k + ": " + vals[rng.IntN(len(vals))] + "\n")
			}
			raw := b.String()
			first, _ := parseConfigFile(s.desc(c.typ), 100, raw)
			printed := renderConfigFile(c.typ, first)
			again, warnings := parseConfigFile(s.desc(c.typ), 100, printed)
			if len(warnings) > 0 {
				t.Fatalf("%s #%d: the printed config loads with warnings %q:\n%s", c.typ, i, warnings, printed)
			}
			if twice := renderConfigFile(c.typ, again); twice != printed {
				t.Fatalf("%s #%d: print → parse → print is not stable:\n%s---\n%s", c.typ, i, printed, twice)
			}
			g := inventory.Guest{VMID: 100, Type: c.gtype}
			for _, k := range slices.Sorted(maps.Keys(again.current.conf)) {
				g.Config = append(g.Config, inventory.Entry{Key: k, Value: again.current.conf[k], HasValue: true})
			}
			for _, e := range again.current.lxc {
				g.Config = append(g.Config, inventory.Entry{Key: e[0], Value: e[1], HasValue: true})
			}
			gaps := pvewire.Gaps(g)
			for _, e := range g.Config {
				modelled, bookkeeping := pvewire.IsModelled(c.gtype, e.Key), pvewire.IsBookkeeping(c.gtype, e.Key)
				gap := slices.ContainsFunc(gaps, func(x pvewire.Gap) bool { return x.Key == e.Key && x.Token == "" })
				if n := btoi(modelled) + btoi(bookkeeping) + btoi(gap); n != 1 {
					t.Fatalf("%s #%d: key %s is modelled=%v bookkeeping=%v gap=%v, want exactly one", c.typ, i, e.Key, modelled, bookkeeping, gap)
				}
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
