package adopt

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/repo"
)

// RepoState is what a repository tells one cluster's adoption (the Input fields of the same names).
type RepoState struct {
	Declared  []*manifest.Resource
	Occupied  []string
	Templates map[int]string
	// Adopted are the files adoption wrote earlier for the cluster.
	Adopted []string
}

// FromRepository reads a repository (a work tree or a snapshot) for one cluster's adoption: the resources
// its composition declares in files an operator wrote, and those of the operator's files under the
// cluster's own directories (listed or not); every file under a kind root adoption did not write (never
// overwritten); and, from the files adoption wrote for the cluster, the CTTemplates operators named.
func FromRepository(fsys fs.FS, r *repo.Repository, cluster string) (RepoState, error) {
	st := RepoState{Templates: map[int]string{}}
	adopted := map[string]bool{}
	seen := map[string]bool{}
	for _, root := range manifest.KindRoots {
		err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == root && errors.Is(err, fs.ErrNotExist) {
					return fs.SkipDir
				}
				return err
			}
			if d.IsDir() || !(strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				return nil
			}
			content, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			own := path.Dir(p) == path.Join(root, cluster)
			if IsAdopted(content) {
				adopted[p] = true
				if !own {
					return nil
				}
				st.Adopted = append(st.Adopted, p)
				res, _ := manifest.Parse(p, content)
				for _, x := range res {
					if s := x.LXC(); s != nil && s.Template != "" && s.VMID > 0 {
						st.Templates[s.VMID] = s.Template
					}
				}
				return nil
			}
			st.Occupied = append(st.Occupied, p)
			if own {
				res, _ := manifest.Parse(p, content)
				for _, x := range res {
					key := p + " " + x.Ref().String()
					if !seen[key] {
						seen[key] = true
						st.Declared = append(st.Declared, x)
					}
				}
			}
			return nil
		})
		if err != nil {
			return RepoState{}, fmt.Errorf("read %s/: %w", root, err)
		}
	}
	if c := r.Cluster(cluster); c != nil {
		for _, x := range c.Resources {
			key := x.Source.File + " " + x.Ref().String()
			if adopted[x.Source.File] || seen[key] {
				continue
			}
			seen[key] = true
			st.Declared = append(st.Declared, x)
		}
	}
	slices.Sort(st.Occupied)
	slices.Sort(st.Adopted)
	return st, nil
}
