package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/wire"
)

// ownership reads the ownership inventory (KV proxops_owned) of one cluster for pve.Apply: before every write
// to an existing guest, the executor compares the record it reads here with the live guest, so an operation
// never vouches for its own target.
type ownership struct {
	b       *bus.Bus
	cluster string
}

// RecordedFingerprint implements pve.Ownership.
func (o ownership) RecordedFingerprint(ctx context.Context, vmid int) (string, bool, error) {
	key, err := bus.OwnedKey(o.cluster, vmid)
	if err != nil {
		return "", false, err
	}
	data, _, err := o.b.GetBytes(ctx, bus.BucketOwned, key)
	if errors.Is(err, bus.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read ownership record %s: %w", key, err)
	}
	rec, err := wire.UnmarshalOwnedGuest(data)
	if err != nil {
		return "", false, fmt.Errorf("read ownership record %s: %w", key, err)
	}
	if rec.Cluster != o.cluster || rec.VMID != vmid {
		return "", false, fmt.Errorf("ownership record %s names %s/%d", key, rec.Cluster, rec.VMID)
	}
	return rec.Fingerprint, true, nil
}

// ObjectRecorded implements pve.ObjectOwnership: whether the inventory holds a record of the cluster object
// under its key (<cluster>.obj.<kind>.<id>).
func (o ownership) ObjectRecorded(ctx context.Context, kind, id string) (bool, error) {
	key, err := bus.ObjectOwnedKey(o.cluster, bus.ObjectKind(kind), id)
	if err != nil {
		return false, err
	}
	_, _, err = o.b.GetBytes(ctx, bus.BucketOwned, key)
	if errors.Is(err, bus.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read ownership record %s: %w", key, err)
	}
	return true, nil
}
