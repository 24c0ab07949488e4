package wire_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/adopt"
	adoptv1 "github.com/proxops/proxops/internal/gen/proxops/adopt/v1"
	"github.com/proxops/proxops/internal/inventory"
	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/wire"
)

func TestAdoptionRoundTripsWithTheFilesAsWritten(t *testing.T) {
	req := wire.AdoptRequest{Cluster: "lab", RequestID: "adopt-1", Nodes: []string{"pve1", "pve2"}, Tree: "t1"}
	var preq adoptv1.AdoptRequest
	roundTrip(t, wire.AdoptRequestToProto(req), &preq)
	gotReq, err := wire.AdoptRequestFromProto(&preq)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(req, gotReq); d != "" {
		t.Errorf("request (-want +got):\n%s", d)
	}
	res := adopt.Result{Cluster: "lab", Nodes: []string{"pve1"},
		Manifests: []adopt.Manifest{
			{Path: "vm/lab/web.yaml", Kind: manifest.KindVM, Name: "web", Node: "pve1", VMID: 100, Content: []byte("# Adopted by proxops from lab vmid 100 on pve1.\n")},
			{Path: "iso/lab/x-iso.yaml", Kind: manifest.KindISO, Name: "x-iso", Node: "pve1", Volid: "local:iso/x.iso", Incomplete: []string{"why"}, Content: []byte("x")},
		},
		Skipped:         []adopt.Skipped{{Kind: manifest.KindVM, Node: "pve1", VMID: 101, Refused: true, Reason: "PVE refuses this config: no"}},
		Gaps:            []inventory.Gap{{Setting: inventory.Setting{Kind: "VM", Name: "web", Node: "pve1", VMID: 100, Key: "args", Value: "-x"}, Note: "n"}},
		Warnings:        []string{"w"},
		Census:          adopt.Census{SSHKeyGuests: 3, SSHKeySets: 2, SSHKeyRefs: 1, SSHKeysPVE: 2, Passwords: 1},
		ClusterFirewall: []byte("firewall:\n  manage-cluster: true\n"),
	}
	var pres adoptv1.AdoptResult
	roundTrip(t, wire.AdoptResultToProto("adopt-1", res), &pres)
	id, got, err := wire.AdoptResultFromProto(&pres)
	if err != nil || id != "adopt-1" {
		t.Fatalf("from proto: %q, %v", id, err)
	}
	if d := cmp.Diff(res, got); d != "" {
		t.Errorf("result (-want +got):\n%s", d)
	}
	pres.Manifests[0].Kind = "Spaceship"
	if _, _, err := wire.AdoptResultFromProto(&pres); err == nil {
		t.Error("an unknown kind was accepted")
	}
}
