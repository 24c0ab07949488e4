package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The contract's packages register their types for NewMessage.
	_ "github.com/proxops/proxops/internal/gen/proxops/adopt/v1"
	_ "github.com/proxops/proxops/internal/gen/proxops/inventory/v1"
	_ "github.com/proxops/proxops/internal/gen/proxops/plan/v1"
	_ "github.com/proxops/proxops/internal/gen/proxops/repo/v1"
	_ "github.com/proxops/proxops/internal/gen/proxops/status/v1"
)

// NewMessage returns an empty message of the contract type a Proxops-Type header names (e.g.
// proxops.plan.v1.Plan), for tools that decode whatever a subject carries.
func NewMessage(typeName string) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typeName))
	if err != nil {
		return nil, fmt.Errorf("message type %q: %w", typeName, err)
	}
	return mt.New().Interface(), nil
}

// MessageJSON renders a message as compact JSON with the contract's field names (snake_case), enums by name
// and unset fields left out. The same message gives the same bytes.
func MessageJSON(m proto.Message) ([]byte, error) {
	data, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("json of %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	// protojson varies its whitespace on purpose; compacting makes the bytes stable.
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		return nil, fmt.Errorf("json of %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return out.Bytes(), nil
}
