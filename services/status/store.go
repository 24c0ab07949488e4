package status

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/bus"
	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

// A cluster's report is one value of the status bucket, keyed by the cluster, while it fits in
// maxStatusValue bytes. A larger one (thousands of guests) is serialized and split into parts of at most
// that size, stored first under <cluster>.part.<n>; the value under the cluster's key then carries the
// report without its lists and where the parts are, with their size and SHA-256. No value grows with the
// cluster, and a reader that meets parts written after the head it read sees the checksum fail and reads
// again. The same head is what is published on the cluster's status subject.
const maxStatusValue = 256 << 10

// partKey is the key of one part of a cluster's report.
func partKey(cluster string, n int) string { return cluster + ".part." + strconv.Itoa(n) }

// storeReport writes a cluster's report and returns the message to publish and the number of parts
// written; parts beyond them, up to had (the parts written before), are deleted.
func storeReport(ctx context.Context, b *bus.Bus, st report.ClusterStatus, had int) (proto.Message, int, error) {
	head, parts, err := wire.SplitClusterStatus(st, maxStatusValue)
	if err != nil {
		return nil, had, err
	}
	for n, p := range parts {
		if _, err := b.PutBytes(ctx, bus.BucketStatus, partKey(st.Cluster, n), p); err != nil {
			return nil, max(had, n), err
		}
	}
	if _, err := b.PutProto(ctx, bus.BucketStatus, st.Cluster, head); err != nil {
		return nil, max(had, len(parts)), err
	}
	for n := len(parts); n < had; n++ {
		if err := b.DeleteKey(ctx, bus.BucketStatus, partKey(st.Cluster, n)); err != nil {
			return head, had, err
		}
	}
	return head, len(parts), nil
}

// StoredClusters lists the clusters that have a report in the status bucket, sorted.
func StoredClusters(ctx context.Context, b *bus.Bus) ([]string, error) {
	keys, err := b.Keys(ctx, bus.BucketStatus)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		if !strings.Contains(k, ".") {
			out = append(out, k)
		}
	}
	return out, nil
}

// ReadStored reads a cluster's report from the status bucket, joining its parts when it is stored in
// parts; bus.ErrNotFound when there is none. The number of parts it was stored in is returned too.
func ReadStored(ctx context.Context, b *bus.Bus, cluster string) (report.ClusterStatus, int, error) {
	var err error
	for range 5 {
		var raw []byte
		if raw, _, err = b.GetBytes(ctx, bus.BucketStatus, cluster); err != nil {
			return report.ClusterStatus{}, 0, err
		}
		var st report.ClusterStatus
		var parts int
		st, parts, err = wire.JoinClusterStatus(raw, func(n int) ([]byte, error) {
			p, _, err := b.GetBytes(ctx, bus.BucketStatus, partKey(cluster, n))
			if errors.Is(err, bus.ErrNotFound) {
				return nil, wire.ErrStatusPartsMismatch
			}
			return p, err
		})
		if !errors.Is(err, wire.ErrStatusPartsMismatch) {
			return st, parts, err
		}
	}
	return report.ClusterStatus{}, 0, err
}
