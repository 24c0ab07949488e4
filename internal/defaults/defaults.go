// Package defaults fills the values a configuration leaves unset: every configuration of the project takes a
// number that is zero or negative, and a nil logger, as "not given".
package defaults

import "log/slog"

// Positive sets *v to d unless *v is positive.
func Positive[T ~int | ~int32 | ~int64 | ~float64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Logger sets *l to a logger that discards every record when it is nil.
func Logger(l **slog.Logger) {
	if *l == nil {
		*l = slog.New(slog.DiscardHandler)
	}
}
