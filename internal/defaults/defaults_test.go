package defaults_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/proxops/proxops/internal/defaults"
)

func TestPositiveReplacesZeroAndNegativeButKeepsAGivenValue(t *testing.T) {
	for _, tc := range []struct{ given, want time.Duration }{{0, time.Minute}, {-time.Second, time.Minute}, {time.Second, time.Second}} {
		v := tc.given
		defaults.Positive(&v, time.Minute)
		if v != tc.want {
			t.Errorf("Positive(%v, 1m) = %v, want %v", tc.given, v, tc.want)
		}
	}
	n := 0
	defaults.Positive(&n, 4)
	if n != 4 {
		t.Errorf("Positive(0, 4) = %d", n)
	}
}

func TestLoggerKeepsAGivenLoggerAndDiscardsWithoutOne(t *testing.T) {
	var buf bytes.Buffer
	given := slog.New(slog.NewTextHandler(&buf, nil))
	l := given
	defaults.Logger(&l)
	if l != given {
		t.Error("a given logger was replaced")
	}
	var none *slog.Logger
	defaults.Logger(&none)
	if none == nil {
		t.Fatal("a nil logger was left nil")
	}
	none.Error("dropped")
	if none.Enabled(t.Context(), slog.LevelError) {
		t.Error("the default logger is enabled; want it to discard every record")
	}
}
