package wire_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/report"
	"github.com/proxops/proxops/internal/wire"
)

// A report larger than the value size is split into parts no larger than it and a head without the lists;
// joined again it is the same report. A part that changed under the read is detected, and a report that
// fits is stored whole.
func TestClusterStatusSplitIntoPartsJoinsBackAndDetectsATornRead(t *testing.T) {
	st := report.New("lab")
	st.Phase, st.Revision = report.PhaseConverged, 7
	for i := range 3000 {
		st.Resources = append(st.Resources, report.Resource{Kind: "VM", Name: fmt.Sprintf("guest-%05d", i), Node: "pve1",
			VMID: 1000 + i, State: report.StateConverged})
	}
	st.Counters.Objects = len(st.Resources)
	const maxValue = 16 << 10
	head, parts, err := wire.SplitClusterStatus(st, maxValue)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := proto.Marshal(head)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) < 2 || len(raw) > 1024 {
		t.Fatalf("%d parts, a head of %d bytes", len(parts), len(raw))
	}
	for i, p := range parts {
		if len(p) > maxValue {
			t.Fatalf("part %d: %d bytes", i, len(p))
		}
	}
	read := func(n int) ([]byte, error) { return parts[n], nil }
	got, n, err := wire.JoinClusterStatus(raw, read)
	if err != nil || n != len(parts) || !reflect.DeepEqual(got, st) {
		t.Fatalf("joined: %d parts, %v; equal %v", n, err, reflect.DeepEqual(got, st))
	}
	summary, _, err := wire.JoinClusterStatus(raw, func(int) ([]byte, error) { return nil, errors.New("unreachable") })
	if err == nil || summary.Phase != "" {
		t.Fatalf("a part that cannot be read: %v", err)
	}
	torn := append([]byte(nil), parts[1]...)
	torn[0] ^= 0xff
	if _, _, err := wire.JoinClusterStatus(raw, func(n int) ([]byte, error) {
		if n == 1 {
			return torn, nil
		}
		return parts[n], nil
	}); !errors.Is(err, wire.ErrStatusPartsMismatch) {
		t.Fatalf("a changed part: %v", err)
	}

	small := report.New("lab")
	head, parts, err = wire.SplitClusterStatus(small, maxValue)
	if err != nil || parts != nil {
		t.Fatalf("a small report: %d parts, %v", len(parts), err)
	}
	raw, _ = proto.Marshal(head)
	if got, n, err := wire.JoinClusterStatus(raw, read); err != nil || n != 0 || !reflect.DeepEqual(got, small) {
		t.Fatalf("a small report joined: %d parts, %v", n, err)
	}
	if _, _, err := wire.JoinClusterStatus([]byte{0xff, 0xff}, read); !errors.Is(err, wire.ErrStatusUnreadable) {
		t.Fatalf("garbage: %v", err)
	}
}
