package manifest

import "github.com/proxops/proxops/internal/yamldecode"

// Missing is a field a guest's manifest must declare before ProxOps can create the guest, with why.
type Missing struct {
	Field   string
	Message string
}

// MissingToCreate lists what a guest's manifest lacks to create the guest on PVE. Validation accepts a
// manifest without these fields because they are create parameters PVE does not keep (a container's
// template) or settings an existing guest may lack (a VM without disks); they matter only when the guest has
// to be created.
func (r *Resource) MissingToCreate() []Missing {
	var out []Missing
	if s := r.LXC(); s != nil {
		if s.Template == "" {
			out = append(out, Missing{Field: "spec.template", Message: "a container is created from a CTTemplate, and PVE keeps no record of the one an existing container was made from (an adopted manifest names none): name the CTTemplate to create it from"})
		}
		if s.Root.Size.IsZero() {
			out = append(out, Missing{Field: "spec.root.size", Message: "the root volume is created with a size: set it"})
		}
		for i, m := range s.MountPoints {
			if m.Size.IsZero() {
				out = append(out, Missing{Field: yamldecode.Index("spec.mount-points", i) + ".size", Message: "a mount point volume is created with a size: set it"})
			}
		}
	}
	if s := r.VM(); s != nil && s.Clone == "" && len(s.Disks) == 0 {
		out = append(out, Missing{Field: "spec.disks", Message: "a VM is created with at least one disk (or from spec.clone): declare its disks"})
	}
	return out
}
