package wire_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/event"
	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	"github.com/proxops/proxops/internal/plan"
	"github.com/proxops/proxops/internal/wire"
)

func TestOwnedGuestRoundTripsAndRefusesAnEmptyFingerprint(t *testing.T) {
	in := wire.OwnedGuest{Cluster: "lab", Owned: plan.Owned{VMID: 101, Ref: "VM/web-01", Node: "pve1", Fingerprint: "uuid=abc"},
		RunID: "r1", RecordedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	m, err := wire.OwnedGuestToProto(in)
	if err != nil {
		t.Fatal(err)
	}
	var back planv1.OwnedGuest
	roundTrip(t, m, &back)
	out, err := wire.OwnedGuestFromProto(&back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("owned guest round trip (-in +out):\n%s", diff)
	}
	// As the proxops_owned bucket stores it.
	stored, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := wire.UnmarshalOwnedGuest(stored); err != nil || !cmp.Equal(in, out) {
		t.Fatalf("stored record read back as %+v, %v", out, err)
	}
	if _, err := wire.UnmarshalOwnedGuest([]byte{0xff, 0xff}); err == nil {
		t.Fatal("a corrupt stored record was read")
	}
	in.Fingerprint = ""
	if _, err := wire.OwnedGuestToProto(in); err == nil {
		t.Fatal("a record without a fingerprint was accepted")
	}
}

func TestClusterControlRoundTrips(t *testing.T) {
	for _, in := range []wire.ClusterControl{
		{Cluster: "lab"},
		{Cluster: "lab", WantSeq: 12, DoneSeq: 9, RunID: "r9", RunWantSeq: 9, RunPlansSeq: 40, RunResultsSeq: 77,
			Want: event.RepoChanged{Repo: "/srv/ops", Branch: "main", Commit: "c0ffee", Tree: "7ree", Trigger: event.TriggerWebhook,
				EventID: "/srv/ops@c0ffee", Clusters: []string{"lab"}},
			Suspended: true, SuspendedBy: "cli:alice", SuspendedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Cluster: "lab", WantSeq: 14, DoneSeq: 9, SeenSeq: 15, RunID: "r10", RunWantSeq: 13, RunTree: "7ree", RunCommit: "c0ffee",
			RunPublished: true, RunRequests: []string{"cli-1", "cli-2"}, WantRequests: []string{"cli-3"},
			Want:    event.RepoChanged{Repo: "/srv/ops", Commit: "beef", Tree: "7ree2", Trigger: event.TriggerManual, EventID: "m1", RequestID: "cli-4"},
			RetryAt: time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), RetryAttempt: 3, RetryReason: "observe_failed: node pve1: connection refused"},
		{Cluster: "lab", WantSeq: 15, DoneSeq: 15, SeenSeq: 18,
			Want: event.RepoChanged{Repo: "/srv/ops", Commit: "beef", Tree: "7ree2", Trigger: event.TriggerPoll, EventID: "p1"},
			Blocked: wire.Blocked{Tree: "7ree2", Commit: "beef", Inputs: "sha256:1234", Reason: "observe_failed: node pve1: 401",
				At: time.Date(2026, 1, 2, 3, 4, 7, 0, time.UTC), Nodes: []string{"pve1"}, InventorySeq: 41}},
		{Cluster: "lab", SuspendedGuests: []plan.SuspendedGuest{
			{VMID: 100, Ref: "VM/web", Snapshot: "proxops-0123456789ab", By: "alice", At: time.Date(2026, 1, 2, 3, 4, 8, 0, time.UTC),
				RunID: "r11", Manifest: "vm/lab/web.yaml:1:00ff"},
			{VMID: 101, Ref: "LXC/cache", Snapshot: "proxops-ba9876543210", By: "local"}}},
	} {
		m, err := wire.ClusterControlToProto(in)
		if err != nil {
			t.Fatal(err)
		}
		var back planv1.ClusterControl
		roundTrip(t, m, &back)
		out, err := wire.ClusterControlFromProto(&back)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(in, out, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("cluster control round trip (-in +out):\n%s", diff)
		}
		if in.Pending() != (in.WantSeq > in.DoneSeq) {
			t.Fatal("pending")
		}
	}
}
