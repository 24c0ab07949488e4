package pve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// PVE's Perl serialiser returns numbers as strings or numbers, booleans as 1/0 or absent, and adds keys
// between releases. Everything PVE returns is decoded here: into generic values with UseNumber, then read
// field by field, tolerating either spelling and ignoring unknown keys.

// object is one decoded JSON object.
type object map[string]any

func decodeJSON(raw []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("decode pve answer: %w", err)
	}
	return nil
}

// reply is the data of a successful PVE answer: undecoded (raw) or, when decoded, as generic values (v).
type reply struct {
	raw     json.RawMessage
	v       any
	decoded bool
}

// again is the decoded data written back as JSON: the undecoded way's input, for the rare answer whose
// shape its caller does not expect, so its error is the one that way gives.
func (r reply) again() []byte {
	if !r.decoded {
		return r.raw
	}
	b, err := json.Marshal(r.v)
	if err != nil {
		return nil
	}
	return b
}

// objects is decodeObjects of the answer's data.
func (r reply) objects() ([]object, error) {
	if r.decoded {
		items, ok := r.v.([]any)
		if r.v == nil {
			return nil, nil
		}
		out := make([]object, 0, len(items))
		for _, it := range items {
			m, isMap := it.(map[string]any)
			if !isMap {
				ok = false
				break
			}
			out = append(out, object(m))
		}
		if ok {
			return out, nil
		}
	}
	return decodeObjects(r.again())
}

// object is decodeObject of the answer's data.
func (r reply) object() (object, error) {
	if r.decoded {
		switch v := r.v.(type) {
		case nil:
			return object{}, nil
		case map[string]any:
			return object(v), nil
		}
	}
	return decodeObject(r.again())
}

// text is decodeString of the answer's data.
func (r reply) text() (string, error) {
	if r.decoded {
		if s, ok := scalarString(r.v); ok {
			return s, nil
		}
	}
	return decodeString(r.again())
}

// decodeObjects decodes a JSON array of objects; null is an empty list.
func decodeObjects(raw []byte) ([]object, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []any
	if err := decodeJSON(raw, &items); err != nil {
		return nil, err
	}
	out := make([]object, 0, len(items))
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("decode pve answer: item %d is %T, not an object", i, it)
		}
		out = append(out, object(m))
	}
	return out, nil
}

// decodeObject decodes a JSON object; null is an empty object.
func decodeObject(raw []byte) (object, error) {
	if isNull(raw) {
		return object{}, nil
	}
	var m map[string]any
	if err := decodeJSON(raw, &m); err != nil {
		return nil, err
	}
	return object(m), nil
}

// decodeString decodes a JSON string (or number) answer; null is "".
func decodeString(raw []byte) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var v any
	if err := decodeJSON(raw, &v); err != nil {
		return "", err
	}
	s, ok := scalarString(v)
	if !ok {
		return "", fmt.Errorf("decode pve answer: want a string, got %T", v)
	}
	return s, nil
}

func isNull(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// scalarString renders a scalar as PVE's text form: numbers as written, booleans as 1/0.
func scalarString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		if x {
			return "1", true
		}
		return "0", true
	case nil:
		return "", true
	}
	return "", false
}

// str returns a field as text; arrays are joined with "," and objects rendered as JSON.
func (o object) str(key string) string {
	v, ok := o[key]
	if !ok {
		return ""
	}
	if s, ok := scalarString(v); ok {
		return s
	}
	if arr, ok := v.([]any); ok {
		parts := make([]string, 0, len(arr))
		for _, e := range arr {
			s, _ := scalarString(e)
			parts = append(parts, s)
		}
		return strings.Join(parts, ",")
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (o object) has(key string) bool { _, ok := o[key]; return ok }

// int returns a numeric field (number or numeric string); ok is false when absent or not a number.
func (o object) int(key string) (int64, bool) {
	s := strings.TrimSpace(o.str(key))
	if s == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, true
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f >= -9.2e18 && f <= 9.2e18 {
		return int64(f), true
	}
	return 0, false
}

// flag reads a PVE boolean: 1, "1", true; anything else (absent, 0, "0") is false.
func (o object) flag(key string) bool {
	switch strings.ToLower(strings.TrimSpace(o.str(key))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
