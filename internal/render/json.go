package render

import (
	"time"

	"bytes"
	"cmp"
	"encoding/json"
	"slices"

	"github.com/proxops/proxops/internal/diag"
	"github.com/proxops/proxops/internal/plan"
)

// The JSON form. Field order is the struct order; docs/plan-format.md documents every field.

// Report is the JSON document `proxops diff --json` prints.
type Report struct {
	Clusters   []PlanJSON      `json:"clusters"`
	Rejections []RejectionJSON `json:"rejections"`
}

// PlanJSON is one cluster's plan.
type PlanJSON struct {
	Cluster    string        `json:"cluster"`
	PlanID     string        `json:"plan_id"`
	NoDrift    bool          `json:"no_drift"`
	Held       bool          `json:"held"`
	HeldReason string        `json:"held_reason,omitempty"`
	HeldPrunes []string      `json:"held_prunes,omitempty"`
	Operations []OpJSON      `json:"operations"`
	Findings   []FindingJSON `json:"findings"`
	Record     []RecordJSON  `json:"record"`
	// ObjectRecords are the cluster objects (pools, ...) to store in the ownership inventory.
	ObjectRecords []ObjectRecordJSON `json:"object_records,omitempty"`
	Resources     []string           `json:"resources"`
	// Gaps are the live settings of the declared guests the manifests do not carry (as status reports
	// them); not part of the plan id.
	Gaps []GapDocument `json:"gaps,omitempty"`
}

// OpJSON is one operation.
type OpJSON struct {
	ID           string           `json:"id"`
	Action       string           `json:"action"`
	Ref          string           `json:"ref"`
	Node         string           `json:"node"`
	VMID         int              `json:"vmid,omitempty"`
	GuestType    string           `json:"guest_type,omitempty"`
	Reason       string           `json:"reason"`
	DependsOn    []string         `json:"depends_on,omitempty"`
	Values       []KVJSON         `json:"values,omitempty"`
	Delete       []string         `json:"delete,omitempty"`
	Params       []KVJSON         `json:"params,omitempty"`
	SourceVMID   int              `json:"source_vmid,omitempty"`
	Storage      string           `json:"storage,omitempty"`
	Precondition PreconditionJSON `json:"precondition"`
	Changes      []ChangeJSON     `json:"changes,omitempty"`
}

// KVJSON is one PVE parameter; a secret is only named (secret_refs), never carried.
type KVJSON struct {
	Key        string   `json:"key"`
	Value      string   `json:"value"`
	SecretRefs []string `json:"secret_refs,omitempty"`
}

// PreconditionJSON is what must hold before an operation is applied.
type PreconditionJSON struct {
	ExpectAbsent bool     `json:"expect_absent,omitempty"`
	Digest       string   `json:"digest,omitempty"`
	Expect       []KVJSON `json:"expect,omitempty"`
	Fingerprint  string   `json:"fingerprint,omitempty"`
	ExpectTag    bool     `json:"expect_tag,omitempty"`
	Name         string   `json:"name,omitempty"`
}

// ChangeJSON is a field-level before → after.
type ChangeJSON struct {
	Field  string `json:"field"`
	Before string `json:"before"`
	After  string `json:"after"`
}

// FindingJSON is a reported, not acted upon, item.
type FindingJSON struct {
	Kind    string `json:"kind"`
	Ref     string `json:"ref"`
	Node    string `json:"node,omitempty"`
	VMID    int    `json:"vmid,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// RecordJSON is a guest to store in the ownership inventory.
type RecordJSON struct {
	VMID        int    `json:"vmid"`
	Ref         string `json:"ref"`
	Node        string `json:"node"`
	Fingerprint string `json:"fingerprint,omitempty"`
	After       string `json:"after,omitempty"`
}

// ObjectRecordJSON is a cluster object to store in the ownership inventory, by kind and id.
type ObjectRecordJSON struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Ref  string `json:"ref"`
}

// RejectionJSON is a cluster that could not be planned.
type RejectionJSON struct {
	Cluster     string           `json:"cluster"`
	Reason      string           `json:"reason"`
	Diagnostics []DiagnosticJSON `json:"diagnostics"`
	// Transient: the cause may pass (PVE unreachable, 5xx, lock timeouts, no executor answering);
	// RetryAt (RFC 3339) is when proxops up plans the cluster again.
	Transient bool   `json:"transient,omitempty"`
	RetryAt   string `json:"retry_at,omitempty"`
}

// DiagnosticJSON is one problem, with its position and its rendered text.
type DiagnosticJSON struct {
	Severity string `json:"severity"`
	File     string `json:"file,omitempty"`
	Line     int    `json:"line,omitempty"`
	Column   int    `json:"column,omitempty"`
	Ref      string `json:"ref,omitempty"`
	Field    string `json:"field,omitempty"`
	Message  string `json:"message"`
	Text     string `json:"text"`
}

func kvsJSON(kvs []plan.KV) []KVJSON {
	var out []KVJSON
	for _, kv := range kvs {
		out = append(out, KVJSON{Key: kv.Key, Value: kv.Value, SecretRefs: kv.SecretRefs})
	}
	return out
}

// ToJSON converts a plan into its JSON form.
func ToJSON(p plan.Plan) PlanJSON {
	out := PlanJSON{Cluster: p.Cluster, PlanID: p.ID, NoDrift: Clean(p), Held: p.Held, HeldReason: p.HeldReason,
		HeldPrunes: p.HeldPrunes, Operations: []OpJSON{}, Findings: []FindingJSON{}, Record: []RecordJSON{},
		Resources: append([]string{}, p.Resources...)}
	for _, o := range p.Operations {
		j := OpJSON{ID: o.ID, Action: string(o.Action), Ref: o.Ref, Node: o.Node, VMID: o.VMID, GuestType: string(o.GuestType),
			Reason: o.Reason, DependsOn: o.DependsOn, Values: kvsJSON(o.Values), Delete: o.Delete, Params: kvsJSON(o.Params),
			SourceVMID: o.SourceVMID, Storage: o.Storage,
			Precondition: PreconditionJSON{ExpectAbsent: o.Precondition.ExpectAbsent, Digest: o.Precondition.Digest,
				Expect: kvsJSON(o.Precondition.Expect), Fingerprint: o.Precondition.Fingerprint, ExpectTag: o.Precondition.ExpectTag,
				Name: o.Precondition.Name}}
		for _, c := range o.Changes {
			j.Changes = append(j.Changes, ChangeJSON(c))
		}
		out.Operations = append(out.Operations, j)
	}
	for _, f := range p.Findings {
		out.Findings = append(out.Findings, FindingJSON{Kind: string(f.Kind), Ref: f.Ref, Node: f.Node, VMID: f.VMID, Field: f.Field, Message: f.Message})
	}
	for _, r := range p.Record {
		out.Record = append(out.Record, RecordJSON{VMID: r.Owned.VMID, Ref: r.Owned.Ref, Node: r.Owned.Node, Fingerprint: r.Owned.Fingerprint, After: r.After})
	}
	for _, r := range p.ObjectRecords {
		out.ObjectRecords = append(out.ObjectRecords, ObjectRecordJSON{Kind: r.Kind, ID: r.ID, Ref: r.Ref})
	}
	for _, g := range p.Gaps {
		out.Gaps = append(out.Gaps, gapDocument(g))
	}
	return out
}

// RejectionToJSON converts a rejection into its JSON form.
func RejectionToJSON(r plan.Rejection) RejectionJSON {
	out := RejectionJSON{Cluster: r.Cluster, Reason: r.Reason, Diagnostics: []DiagnosticJSON{}, Transient: r.Transient}
	if !r.RetryAt.IsZero() {
		out.RetryAt = r.RetryAt.UTC().Format(time.RFC3339)
	}
	for _, d := range r.Diagnostics.Sorted() {
		out.Diagnostics = append(out.Diagnostics, DiagnosticToJSON(d))
	}
	return out
}

// DiagnosticToJSON converts a diagnostic into its JSON form.
func DiagnosticToJSON(d diag.Diagnostic) DiagnosticJSON {
	return DiagnosticJSON{Severity: d.Severity.String(), File: d.File, Line: d.Line, Column: d.Column, Ref: d.Ref,
		Field: d.Field, Message: d.Message, Text: d.String()}
}

// JSON renders every cluster's plan (sorted by cluster) and the rejections as one indented document ending
// in a newline.
func JSON(plans []plan.Plan, rejections []plan.Rejection) ([]byte, error) {
	rep := Report{Clusters: []PlanJSON{}, Rejections: []RejectionJSON{}}
	ps := slices.Clone(plans)
	slices.SortStableFunc(ps, func(a, b plan.Plan) int { return cmp.Compare(a.Cluster, b.Cluster) })
	for _, p := range ps {
		rep.Clusters = append(rep.Clusters, ToJSON(p))
	}
	rs := slices.Clone(rejections)
	slices.SortStableFunc(rs, func(a, b plan.Rejection) int { return cmp.Compare(a.Cluster, b.Cluster) })
	for _, r := range rs {
		rep.Rejections = append(rep.Rejections, RejectionToJSON(r))
	}
	return marshal(rep)
}

// PlanJSONBytes renders one plan as an indented JSON document ending in a newline.
func PlanJSONBytes(p plan.Plan) ([]byte, error) { return marshal(ToJSON(p)) }

func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
