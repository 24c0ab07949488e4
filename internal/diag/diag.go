// Package diag holds the diagnostics ProxOps reports about a repository: every problem with the file, line,
// column, resource and field it concerns, totally ordered so reports are byte-identical across runs.
package diag

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Severity of a diagnostic.
type Severity int

const (
	// Error makes a cluster's plan fail closed.
	Error Severity = iota + 1
	// Warning is reported and does not block (except under validate --strict).
	Warning
)

func (s Severity) String() string {
	switch s {
	case Error:
		return "error"
	case Warning:
		return "warning"
	default:
		return fmt.Sprintf("severity(%d)", int(s))
	}
}

// Diagnostic is one problem, with its position. File is slash-separated and relative to the repository root;
// Line and Column are 1-based, 0 when unknown.
type Diagnostic struct {
	Severity Severity
	File     string
	Line     int
	Column   int
	// Ref is the resource's Kind/name, when known.
	Ref string
	// Field is a dotted field path such as spec.disks[0].size, when known.
	Field   string
	Message string
}

// String renders the diagnostic as path:line:col: Kind/name: field: message, leaving out the parts that are
// unknown. Warnings carry a "warning: " prefix before the message.
func (d Diagnostic) String() string {
	severity := ""
	if d.Severity == Warning {
		severity = "warning"
	}
	return Text(d.File, d.Line, d.Column, []string{severity, d.Ref, d.Field}, d.Message)
}

// Text renders a problem as path:line:col: label: label: message, leaving out the unknown parts of the
// position (line and column are 1-based, 0 when unknown) and the empty labels.
func Text(file string, line, column int, labels []string, message string) string {
	var b strings.Builder
	if file != "" {
		b.WriteString(file)
		if line > 0 {
			fmt.Fprintf(&b, ":%d", line)
			if column > 0 {
				fmt.Fprintf(&b, ":%d", column)
			}
		}
		b.WriteString(": ")
	}
	for _, l := range labels {
		if l != "" {
			b.WriteString(l)
			b.WriteString(": ")
		}
	}
	b.WriteString(message)
	return b.String()
}

// Compare orders diagnostics by file, line, column, severity, ref, field and message.
func Compare(a, b Diagnostic) int {
	return cmp.Or(
		cmp.Compare(a.File, b.File),
		cmp.Compare(a.Line, b.Line),
		cmp.Compare(a.Column, b.Column),
		cmp.Compare(a.Severity, b.Severity),
		cmp.Compare(a.Ref, b.Ref),
		cmp.Compare(a.Field, b.Field),
		cmp.Compare(a.Message, b.Message),
	)
}

// List is a set of diagnostics.
type List []Diagnostic

// Sorted returns the diagnostics in total order with exact duplicates removed.
func (l List) Sorted() List {
	out := slices.Clone(l)
	slices.SortFunc(out, Compare)
	return slices.Compact(out)
}

// HasErrors reports whether any diagnostic is an error.
func (l List) HasErrors() bool {
	return slices.ContainsFunc(l, func(d Diagnostic) bool { return d.Severity == Error })
}

// Count returns the number of errors and warnings.
func (l List) Count() (errors, warnings int) {
	for _, d := range l {
		switch d.Severity {
		case Error:
			errors++
		case Warning:
			warnings++
		}
	}
	return errors, warnings
}

// Errors returns only the errors.
func (l List) Errors() List {
	return slices.DeleteFunc(slices.Clone(l), func(d Diagnostic) bool { return d.Severity != Error })
}

// Error makes a List usable as an error: one diagnostic per line, sorted.
func (l List) Error() string {
	lines := make([]string, 0, len(l))
	for _, d := range l.Sorted() {
		lines = append(lines, d.String())
	}
	return strings.Join(lines, "\n")
}
