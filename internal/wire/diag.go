package wire

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/proxops/proxops/internal/diag"
	planv1 "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
)

var severityEnum = enumMap[diag.Severity, planv1.Severity]{field: "severity", pairs: []enumPair[diag.Severity, planv1.Severity]{
	{diag.Error, planv1.Severity_SEVERITY_ERROR},
	{diag.Warning, planv1.Severity_SEVERITY_WARNING},
}}

func diagnosticToProto(d diag.Diagnostic) (*planv1.Diagnostic, error) {
	sev, err := severityEnum.toProto(d.Severity)
	if err != nil {
		return nil, err
	}
	line, err := int32Of("line", d.Line)
	if err != nil {
		return nil, err
	}
	col, err := int32Of("column", d.Column)
	if err != nil {
		return nil, err
	}
	return &planv1.Diagnostic{Severity: sev, File: d.File, Line: line, Column: col, Ref: d.Ref, Field: d.Field, Message: d.Message}, nil
}

func diagnosticFromProto(p *planv1.Diagnostic) (diag.Diagnostic, error) {
	sev, err := severityEnum.fromProto(p.GetSeverity())
	if err != nil {
		return diag.Diagnostic{}, err
	}
	return diag.Diagnostic{Severity: sev, File: p.GetFile(), Line: int(p.GetLine()), Column: int(p.GetColumn()),
		Ref: p.GetRef(), Field: p.GetField(), Message: p.GetMessage()}, nil
}

func diagnosticsToProto(l diag.List) ([]*planv1.Diagnostic, error) {
	var out []*planv1.Diagnostic
	for i, d := range l {
		p, err := diagnosticToProto(d)
		if err != nil {
			return nil, fmt.Errorf("diagnostics[%d]: %w", i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func diagnosticsFromProto(ps []*planv1.Diagnostic) (diag.List, error) {
	var out diag.List
	for i, p := range ps {
		d, err := diagnosticFromProto(p)
		if err != nil {
			return nil, fmt.Errorf("diagnostics[%d]: %w", i, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// DiagnosticToProto converts a diagnostic.
func DiagnosticToProto(d diag.Diagnostic) (proto.Message, error) {
	p, err := diagnosticToProto(d)
	if err != nil {
		return nil, fmt.Errorf("diagnostic: %w", err)
	}
	return p, nil
}

// DiagnosticFromProto converts a proxops.plan.v1.Diagnostic.
func DiagnosticFromProto(m proto.Message) (diag.Diagnostic, error) {
	p, err := as[*planv1.Diagnostic](m)
	if err != nil {
		return diag.Diagnostic{}, fmt.Errorf("diagnostic: %w", err)
	}
	d, err := diagnosticFromProto(p)
	if err != nil {
		return diag.Diagnostic{}, fmt.Errorf("diagnostic: %w", err)
	}
	return d, nil
}

// DiagnosticsToProto converts a diagnostics list into the repeated field's elements, as proto.Messages.
func DiagnosticsToProto(l diag.List) ([]proto.Message, error) {
	ps, err := diagnosticsToProto(l)
	if err != nil {
		return nil, err
	}
	out := make([]proto.Message, len(ps))
	for i, p := range ps {
		out[i] = p
	}
	return out, nil
}

// DiagnosticsFromProto converts proxops.plan.v1.Diagnostic messages into a list.
func DiagnosticsFromProto(ms []proto.Message) (diag.List, error) {
	ps := make([]*planv1.Diagnostic, len(ms))
	for i, m := range ms {
		p, err := as[*planv1.Diagnostic](m)
		if err != nil {
			return nil, fmt.Errorf("diagnostics[%d]: %w", i, err)
		}
		ps[i] = p
	}
	return diagnosticsFromProto(ps)
}

// DecodeDiagnostic decodes a proxops.plan.v1.Diagnostic message.
func DecodeDiagnostic(ctx context.Context, decode DecodeFunc) (diag.Diagnostic, error) {
	return decodeAs(ctx, decode, &planv1.Diagnostic{}, func(p *planv1.Diagnostic) (diag.Diagnostic, error) { return DiagnosticFromProto(p) })
}
