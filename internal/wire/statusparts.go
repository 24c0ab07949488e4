package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	statusv1 "github.com/proxops/proxops/internal/gen/proxops/status/v1"
	"github.com/proxops/proxops/internal/report"
)

// A cluster's report too large for one value is stored as a head (the report without its lists, and where
// its parts are) and parts: the serialized report split into pieces of at most the value size.

var (
	// ErrStatusPartsMismatch: the parts read do not match the head (written meanwhile); read again.
	ErrStatusPartsMismatch = errors.New("the report's parts do not match its head")
	// ErrStatusUnreadable: a stored report this version cannot read.
	ErrStatusUnreadable = errors.New("unreadable report")
)

// SplitClusterStatus encodes a cluster's status for storage in values of at most maxValue bytes: the head,
// which is the whole report when it fits, and the parts (none when it fits).
func SplitClusterStatus(s report.ClusterStatus, maxValue int) (head proto.Message, parts [][]byte, err error) {
	full, err := clusterStatusToProto(s)
	if err != nil {
		return nil, nil, fmt.Errorf("status of %s: %w", s.Cluster, err)
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(full)
	if err != nil {
		return nil, nil, fmt.Errorf("status of %s: %w", s.Cluster, err)
	}
	if len(data) <= maxValue {
		return full, nil, nil
	}
	for off := 0; off < len(data); off += maxValue {
		parts = append(parts, data[off:min(off+maxValue, len(data))])
	}
	sum := sha256.Sum256(data)
	h := proto.Clone(full).(*statusv1.ClusterStatus)
	h.Resources, h.Findings, h.Gaps, h.Diagnostics, h.HeldPrunes = nil, nil, nil, nil, nil
	h.SecurityWarnings, h.RefusedOperations, h.FailingNotifications = nil, nil, nil
	if h.Tracking != nil {
		h.Tracking.Operations = nil
	}
	if h.Timing != nil {
		h.Timing.Resources = nil
	}
	h.Parts = &statusv1.StatusParts{Count: uint32(len(parts)), Size: uint64(len(data)), Sha256: hex.EncodeToString(sum[:])}
	return h, parts, nil
}

// JoinClusterStatus decodes a stored head, reading its parts (if any) with part, and returns the status and
// how many parts it had. ErrStatusPartsMismatch says the parts changed under the read; ErrStatusUnreadable
// that the value cannot be decoded; part's errors are returned as they are.
func JoinClusterStatus(raw []byte, part func(n int) ([]byte, error)) (report.ClusterStatus, int, error) {
	head := &statusv1.ClusterStatus{}
	if err := proto.Unmarshal(raw, head); err != nil {
		return report.ClusterStatus{}, 0, fmt.Errorf("%w: %w", ErrStatusUnreadable, err)
	}
	m, n := head, 0
	if p := head.GetParts(); p != nil {
		var data bytes.Buffer
		for n = 0; n < int(p.GetCount()); n++ {
			b, err := part(n)
			if err != nil {
				return report.ClusterStatus{}, 0, err
			}
			data.Write(b)
		}
		sum := sha256.Sum256(data.Bytes())
		if uint64(data.Len()) != p.GetSize() || hex.EncodeToString(sum[:]) != p.GetSha256() {
			return report.ClusterStatus{}, 0, ErrStatusPartsMismatch
		}
		m = &statusv1.ClusterStatus{}
		if err := proto.Unmarshal(data.Bytes(), m); err != nil {
			return report.ClusterStatus{}, 0, fmt.Errorf("%w: %w", ErrStatusUnreadable, err)
		}
	}
	st, err := ClusterStatusFromProto(m)
	if err != nil {
		return report.ClusterStatus{}, 0, fmt.Errorf("%w: %w", ErrStatusUnreadable, err)
	}
	return st, n, nil
}
