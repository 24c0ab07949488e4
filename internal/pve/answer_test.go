package pve

import (
	"bytes"
	"encoding/json"
	"testing"
)

// libraryData is how the client library decodes an answer into a json.RawMessage (its handleResponse): the
// envelope into a map, then its data member, or the whole answer when there is none.
func libraryData(body []byte) (json.RawMessage, error) {
	var raw json.RawMessage
	var v any = &raw
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, err
	}
	if d, ok := env["data"]; ok {
		return raw, json.Unmarshal(d, &v)
	}
	return raw, json.Unmarshal(body, &v)
}

// The answer's data, decoded in one pass, is what the library's two-pass decoding gave, for each shape of
// answer PVE sends and a few it does not.
func TestAnAnswersDataIsWhatTheLibraryDecoded(t *testing.T) {
	for _, body := range []string{
		`{"data":null}`, `{"data":"UPID:pve1:0000A1B2:00C3D4E5:6553F0A1:qmcreate:100:root@pam:"}`,
		`{"data":{"digest":"abc","cores":"2","net0":"virtio,bridge=vmbr0"}}`, `{"data":[{"t":"TASK OK","n":1}],"total":1}`,
		`{"total":3,"data":[1,2,3]}`, `{"a":1}`, `{}`, `null`, ` {"data" : 12.5 } `, `{"data":true,"success":1}`,
		`{"data":null,"data":5}`, `{"data":"a\"b\\u00e9"}`, `[1,2]`, `"text"`, `{"data":`, `not json`, ``,
	} {
		want, wantErr := libraryData([]byte(body))
		var a answer
		a.body.WriteString(body)
		got, err := a.data()
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Errorf("%q: error %v, the library's %v", body, err, wantErr)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%q: data %q, the library's %q", body, got, want)
		}
	}
}
