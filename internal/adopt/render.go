package adopt

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/proxops/proxops/internal/manifest"
)

// HeaderPrefix starts the first line of every file adoption writes. proxops adopt overwrites a file that
// starts with it and never one that does not: deleting the line makes the file the operator's.
const HeaderPrefix = "# Adopted by proxops from "

// IsAdopted reports whether a manifest file's content was written by adoption (its first line is the
// header).
func IsAdopted(content []byte) bool { return bytes.HasPrefix(content, []byte(HeaderPrefix)) }

// Render writes a resource as a manifest: the header comment lines (each prefixed with "# "), then the
// resource in YAML with a fixed key order (the field order of the manifest types, map keys sorted), a
// 2-space indent and nothing that changes from run to run.
func Render(r *manifest.Resource, header []string) ([]byte, error) {
	var b bytes.Buffer
	for _, h := range header {
		for line := range strings.SplitSeq(h, "\n") {
			b.WriteString(strings.TrimRight("# "+line, " "))
			b.WriteByte('\n')
		}
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Ref(), err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Ref(), err)
	}
	return b.Bytes(), nil
}
