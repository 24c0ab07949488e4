package pvewire

import (
	"fmt"

	"github.com/proxops/proxops/internal/manifest"
	"github.com/proxops/proxops/internal/pveformat"
)

// CreateSize is the size part of a create form, <storage>:<size>: the byte count in GiB, shortest exact
// decimal (8, 0.5, 0.00390625). PVE reads the number as GiB, never as bytes.
func CreateSize(b int64) string { return manifest.GiBString(b) }

// ParseCreateSize reads the GiB number of a create form back into bytes (rounded down).
func ParseCreateSize(s string) (int64, error) {
	b, err := pveformat.ParseSize(s + "G")
	if err != nil {
		return 0, fmt.Errorf("invalid create size %q", s)
	}
	return b, nil
}
