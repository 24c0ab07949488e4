package adopt

import (
	"cmp"
	"regexp"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
)

// artifactKinds maps a storage content type to the artifact kind adopted from it.
var artifactKinds = map[string]manifest.Kind{
	"iso": manifest.KindISO, "vztmpl": manifest.KindCTTemplate, "import": manifest.KindDiskImage,
}

// extensions are the file name endings each artifact kind accepts.
var extensions = map[manifest.Kind][]string{
	manifest.KindISO:        {".iso", ".img"},
	manifest.KindCTTemplate: {".tar", ".tar.zst", ".tar.xz", ".tar.gz"},
	manifest.KindDiskImage:  {".qcow2", ".vmdk", ".raw"},
}

var filenameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// file is one storage file and the nodes that list it.
type file struct {
	kind     manifest.Kind
	storage  string
	filename string
	volid    string
	nodes    []string
}

// splitVolid returns the file name of <storage>:<content>/<file>.
func splitVolid(volid, content string) (storage, filename string, ok bool) {
	storage, rest, ok := strings.Cut(volid, ":")
	if !ok {
		return "", "", false
	}
	filename, ok = strings.CutPrefix(rest, content+"/")
	if !ok || filename == "" || strings.Contains(filename, "/") {
		return "", "", false
	}
	return storage, filename, true
}

// adoptArtifacts writes one manifest per file (kind, storage, file name), placed on every node that lists
// it. A file a declared manifest already places is referenced by that manifest's name instead.
func (r *run) adoptArtifacts() error {
	byVolid := map[string]*file{}
	for _, n := range r.nodes {
		for _, v := range n.Volumes {
			kind, ok := artifactKinds[v.Content]
			if !ok {
				continue
			}
			storage, filename, ok := splitVolid(v.Volid, v.Content)
			if !ok {
				continue
			}
			key := string(kind) + " " + v.Volid
			f := byVolid[key]
			if f == nil {
				f = &file{kind: kind, storage: storage, filename: filename, volid: v.Volid}
				byVolid[key] = f
			}
			if !slices.Contains(f.nodes, n.Node) {
				f.nodes = append(f.nodes, n.Node)
			}
		}
	}
	files := make([]*file, 0, len(byVolid))
	for _, f := range byVolid {
		slices.Sort(f.nodes)
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b *file) int {
		return cmp.Or(cmp.Compare(a.kind, b.kind), cmp.Compare(a.filename, b.filename), cmp.Compare(a.storage, b.storage))
	})
	for _, f := range files {
		if name, ok := r.declaredArtifact(f); ok {
			r.skip(Skipped{Kind: f.kind, Node: f.nodes[0], Volid: f.volid,
				Reason: "declared in git as " + manifest.Ref{Kind: f.kind, Name: name}.String()})
			continue
		}
		lower := strings.ToLower(f.filename)
		switch {
		case !filenameRE.MatchString(f.filename):
			r.skip(Skipped{Kind: f.kind, Node: f.nodes[0], Volid: f.volid,
				Reason: "the file name has characters a manifest's spec.filename does not allow (letters, digits, dots, hyphens and underscores)"})
			continue
		case !slices.ContainsFunc(extensions[f.kind], func(e string) bool { return strings.HasSuffix(lower, e) }):
			r.skip(Skipped{Kind: f.kind, Node: f.nodes[0], Volid: f.volid,
				Reason: "a " + string(f.kind) + " file must end in " + strings.Join(extensions[f.kind], ", ")})
			continue
		}
		if err := r.adoptFile(f); err != nil {
			return err
		}
	}
	return nil
}

// declaredArtifact reports whether a declared manifest places the file on all of its nodes.
func (r *run) declaredArtifact(f *file) (string, bool) {
	name := ""
	for _, n := range f.nodes {
		got, ok := r.artifacts[artifactKey{kind: f.kind, node: n, volid: f.volid}]
		if !ok {
			return "", false
		}
		name = got
	}
	return name, name != ""
}

func (r *run) adoptFile(f *file) error {
	name := r.namers[f.kind].assign(ArtifactName(f.filename), f.storage)
	url := PlaceholderURL(f.storage, f.filename)
	res := &manifest.Resource{APIVersion: manifest.APIVersion, Kind: f.kind, Metadata: manifest.Metadata{Name: name},
		Spec: &manifest.ArtifactSpec{Nodes: slices.Clone(f.nodes), Storage: f.storage, Filename: f.filename, URL: url}}
	m := Manifest{Path: Path(f.kind, r.in.Cluster, name), Resource: res, Node: f.nodes[0], Volid: f.volid}
	m.Incomplete = validationErrors(res)
	for _, n := range f.nodes {
		k := artifactKey{kind: f.kind, node: n, volid: f.volid}
		if _, dup := r.artifacts[k]; !dup {
			r.artifacts[k] = name
		}
	}
	r.lookup[res.Ref()] = manifest.Resolve(res)
	r.res.Gaps = append(r.res.Gaps, inventory.Gap{
		Setting: inventory.Setting{Kind: string(f.kind), Name: name, Node: f.nodes[0], Key: "url", Value: url},
		Note:    "PVE does not record where a file came from: set the real download URL (and a checksum) before the file is ever needed again"})
	return r.emit(m, f.volid)
}
