// Package wire converts ProxOps' domain types to and from the protobuf contract in proto/proxops. It is the
// only package that imports the generated code (internal/gen); everything else holds domain values and
// hands the bus a proto.Message.
//
// Conversions are strict: an enum value the contract does not define, or an unspecified one where the
// domain needs a value, is an error naming the field, never a silent zero.
package wire

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DecodeFunc decodes a received message into a protobuf target, refusing another type. The bus's
// Delivery.Decode, Message.Decode and Request.Decode are DecodeFuncs.
type DecodeFunc func(ctx context.Context, into proto.Message) error

// decodeAs decodes into a fresh P and converts it to the domain.
func decodeAs[P proto.Message, D any](ctx context.Context, decode DecodeFunc, target P, conv func(P) (D, error)) (D, error) {
	var zero D
	if err := decode(ctx, target); err != nil {
		return zero, err
	}
	return conv(target)
}

// as checks that a proto.Message is the generated type a conversion expects.
func as[P proto.Message](m proto.Message) (P, error) {
	p, ok := m.(P)
	if !ok || m == nil {
		var want P
		return want, fmt.Errorf("want %T, got %T", want, m)
	}
	return p, nil
}

// enumMap is a total two-way mapping between domain values and enum numbers.
type enumMap[D comparable, P ~int32] struct {
	field string
	pairs []enumPair[D, P]
}

type enumPair[D comparable, P ~int32] struct {
	d D
	p P
}

func (m enumMap[D, P]) toProto(d D) (P, error) {
	for _, pr := range m.pairs {
		if pr.d == d {
			return pr.p, nil
		}
	}
	return 0, fmt.Errorf("%s: unknown value %v", m.field, d)
}

func (m enumMap[D, P]) fromProto(p P) (D, error) {
	for _, pr := range m.pairs {
		if pr.p == p {
			return pr.d, nil
		}
	}
	var zero D
	if p == 0 {
		return zero, fmt.Errorf("%s: unspecified", m.field)
	}
	return zero, fmt.Errorf("%s: unknown value %d", m.field, int32(p))
}

func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromProto(ts *timestamppb.Timestamp) (time.Time, error) {
	if ts == nil {
		return time.Time{}, nil
	}
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, err
	}
	return ts.AsTime(), nil
}

func int32Of(field string, v int) (int32, error) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, fmt.Errorf("%s: %d out of range", field, v)
	}
	return int32(v), nil
}
