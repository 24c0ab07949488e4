package wire

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/adopt"
	adoptv1 "github.com/proxops/proxops/internal/gen/proxops/adopt/v1"
	"github.com/proxops/proxops/internal/manifest"
)

// AdoptRequest asks the adopters to adopt one cluster.
type AdoptRequest struct {
	Cluster   string
	RequestID string
	// Nodes to observe; empty means the cluster's allowlist.
	Nodes []string
	// Tree is the proxops_trees snapshot of the repository the manifests are for.
	Tree string
}

// AdoptRequestToProto converts an adoption request into a proxops.adopt.v1.AdoptRequest.
func AdoptRequestToProto(r AdoptRequest) proto.Message {
	return &adoptv1.AdoptRequest{Cluster: r.Cluster, RequestId: r.RequestID, Nodes: r.Nodes, Tree: r.Tree}
}

// AdoptRequestFromProto converts a proxops.adopt.v1.AdoptRequest.
func AdoptRequestFromProto(m proto.Message) (AdoptRequest, error) {
	p, err := as[*adoptv1.AdoptRequest](m)
	if err != nil {
		return AdoptRequest{}, fmt.Errorf("adopt request: %w", err)
	}
	return AdoptRequest{Cluster: p.GetCluster(), RequestID: p.GetRequestId(), Nodes: p.GetNodes(), Tree: p.GetTree()}, nil
}

// DecodeAdoptRequest decodes a received proxops.adopt.v1.AdoptRequest.
func DecodeAdoptRequest(ctx context.Context, decode DecodeFunc) (AdoptRequest, error) {
	return decodeAs(ctx, decode, &adoptv1.AdoptRequest{}, func(p *adoptv1.AdoptRequest) (AdoptRequest, error) { return AdoptRequestFromProto(p) })
}

// AdoptResultToProto converts an adoption into a proxops.adopt.v1.AdoptResult; each manifest travels as its
// rendered file.
func AdoptResultToProto(requestID string, r adopt.Result) proto.Message {
	c := r.Census
	p := &adoptv1.AdoptResult{Cluster: r.Cluster, RequestId: requestID, Nodes: r.Nodes, Gaps: gapsToProto(r.Gaps),
		Warnings: r.Warnings, Census: &adoptv1.CloudInitCensus{SshKeyGuests: int64(c.SSHKeyGuests), SshKeySets: int64(c.SSHKeySets),
			SshKeyRefs: int64(c.SSHKeyRefs), SshKeysLeftToPve: int64(c.SSHKeysPVE), PasswordGuests: int64(c.Passwords)},
		ClusterFirewall: r.ClusterFirewall}
	for _, m := range r.Manifests {
		p.Manifests = append(p.Manifests, &adoptv1.AdoptedManifest{Path: m.Path, Kind: string(m.Kind), Name: m.Name, Node: m.Node,
			Vmid: int64(m.VMID), Volid: m.Volid, Incomplete: m.Incomplete, Content: m.Content})
	}
	for _, s := range r.Skipped {
		p.Skipped = append(p.Skipped, &adoptv1.SkippedObject{Kind: string(s.Kind), Node: s.Node, Vmid: int64(s.VMID), Volid: s.Volid,
			Refused: s.Refused, Reason: s.Reason})
	}
	return p
}

// AdoptResultFromProto converts a proxops.adopt.v1.AdoptResult; a manifest's Resource is left nil (its
// Content is the file). An unknown kind is an error.
func AdoptResultFromProto(m proto.Message) (string, adopt.Result, error) {
	p, err := as[*adoptv1.AdoptResult](m)
	if err != nil {
		return "", adopt.Result{}, fmt.Errorf("adopt result: %w", err)
	}
	kind := func(s string) (manifest.Kind, error) {
		k, ok := manifest.ParseKind(s)
		if !ok || string(k) != s {
			return "", fmt.Errorf("adopt result: unknown kind %q", s)
		}
		return k, nil
	}
	c := p.GetCensus()
	r := adopt.Result{Cluster: p.GetCluster(), Nodes: p.GetNodes(), Gaps: gapsFromProto(p.GetGaps()), Warnings: p.GetWarnings(),
		Census: adopt.Census{SSHKeyGuests: int(c.GetSshKeyGuests()), SSHKeySets: int(c.GetSshKeySets()), SSHKeyRefs: int(c.GetSshKeyRefs()),
			SSHKeysPVE: int(c.GetSshKeysLeftToPve()), Passwords: int(c.GetPasswordGuests())},
		ClusterFirewall: p.GetClusterFirewall()}
	for _, pm := range p.GetManifests() {
		k, err := kind(pm.GetKind())
		if err != nil {
			return "", adopt.Result{}, err
		}
		r.Manifests = append(r.Manifests, adopt.Manifest{Path: pm.GetPath(), Kind: k, Name: pm.GetName(), Node: pm.GetNode(),
			VMID: int(pm.GetVmid()), Volid: pm.GetVolid(), Incomplete: pm.GetIncomplete(), Content: pm.GetContent()})
	}
	for _, ps := range p.GetSkipped() {
		k, err := kind(ps.GetKind())
		if err != nil {
			return "", adopt.Result{}, err
		}
		r.Skipped = append(r.Skipped, adopt.Skipped{Kind: k, Node: ps.GetNode(), VMID: int(ps.GetVmid()), Volid: ps.GetVolid(),
			Refused: ps.GetRefused(), Reason: ps.GetReason()})
	}
	return p.GetRequestId(), r, nil
}

// DecodeAdoptResult decodes a received proxops.adopt.v1.AdoptResult.
func DecodeAdoptResult(ctx context.Context, decode DecodeFunc) (string, adopt.Result, error) {
	type out struct {
		id  string
		res adopt.Result
	}
	o, err := decodeAs(ctx, decode, &adoptv1.AdoptResult{}, func(p *adoptv1.AdoptResult) (out, error) {
		id, r, err := AdoptResultFromProto(p)
		return out{id, r}, err
	})
	return o.id, o.res, err
}
