package adopt

import (
	"path"
	"strconv"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
)

// maxName is the longest manifest name.
const maxName = 63

// Name turns a PVE name or a file name into a manifest name: lower case, every run of characters other than
// letters and digits one hyphen, no hyphen at either end, at most 63 characters. It returns "" when nothing
// is left.
func Name(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	return truncate(b.String(), maxName)
}

// truncate cuts a name to n characters without leaving a hyphen at its end.
func truncate(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.TrimRight(s, "-")
}

// GuestName is the manifest name of a guest: its PVE name (qemu name, lxc hostname) made a manifest name,
// or vm-<vmid> / ct-<vmid> when nothing of it is left.
func GuestName(container bool, pveName string, vmid int) string {
	if n := Name(pveName); n != "" {
		return n
	}
	if container {
		return "ct-" + strconv.Itoa(vmid)
	}
	return "vm-" + strconv.Itoa(vmid)
}

// ArtifactName is the manifest name of a storage artifact: its file name, extension included, made a
// manifest name (debian-12.iso becomes debian-12-iso).
func ArtifactName(filename string) string {
	if n := Name(filename); n != "" {
		return n
	}
	return "file"
}

// Path is where adoption writes a manifest: <kind root>/<cluster>/<name>.yaml.
func Path(kind manifest.Kind, cluster, name string) string {
	return path.Join(kind.Root(), cluster, name+".yaml")
}

// withSuffix appends -<suffix> to a name, shortening the name so the result stays within 63 characters.
func withSuffix(name, suffix string) string {
	suffix = Name(suffix)
	if suffix == "" {
		return name
	}
	return truncate(name, maxName-len(suffix)-1) + "-" + suffix
}

// namer hands out the names of one kind: a candidate gets its base name unless an earlier candidate, a
// declared resource or a file adoption must not overwrite has it; then base-<id>, then base-<id>-2, ...
type namer struct {
	kind     manifest.Kind
	cluster  string
	taken    map[string]bool
	occupied map[string]bool
}

func (n *namer) assign(base, id string) string {
	free := func(name string) bool {
		return !n.taken[name] && !n.occupied[Path(n.kind, n.cluster, name)]
	}
	name := base
	if !free(name) {
		name = withSuffix(base, id)
		for i := 2; !free(name); i++ {
			name = withSuffix(base, id+"-"+strconv.Itoa(i))
		}
	}
	n.taken[name] = true
	return name
}
