package pve

import (
	"context"
	"net/http"

	"github.com/proxops/proxops/internal/inventory"
)

// regenerateCloudInit rebuilds a VM's cloud-init drive from its config: PUT …/qemu/{vmid}/cloudinit
// (qemu-server cloudinit_update, synchronous). The request is idempotent: a drive already current is
// written again, nothing else changes. The guest must be ProxOps' (readOwned) and still the one the plan saw
// (its fingerprint).
func (a *applier) regenerateCloudInit(ctx context.Context) error {
	if a.op.GuestType != inventory.QEMU {
		return terminal("%s: only a VM has a cloud-init drive", a.what())
	}
	g, err := a.readOwned(ctx)
	if err != nil {
		return err
	}
	if fp := a.op.Precondition.Fingerprint; fp != "" && inventory.Fingerprint(g) != fp {
		return conflict("%s: the live guest's identity %q is not the recorded %q", a.what(), inventory.Fingerprint(g), fp)
	}
	for _, kv := range a.op.Precondition.Expect {
		if live, _ := effective(g, kv.Key); live != kv.Value {
			return conflict("%s: %s changed since the plan (expected %q, found %q)", a.what(), kv.Key,
				redactValue(kv.Key, kv.Value), live)
		}
	}
	if _, _, err := a.send(ctx, http.MethodPut, "/nodes/{node}/qemu/{vmid}/cloudinit", []string{a.op.Node, a.vmid()}, nil, nil); err != nil {
		return failed(err, "%s", a.what())
	}
	return nil
}
