package pve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
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
		`{"Data":1}`, `{"DATA":null,"data":2}`, `{"data":2,"Data":3}`,
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

// An answer decoded in one pass gives the callers exactly what decoding its undecoded data gave: the same
// objects, text and errors, whatever the shape of the data.
func TestADecodedAnswerReadsAsItsUndecodedData(t *testing.T) {
	for _, body := range []string{
		`{"data":null}`, `{"data":"UPID:pve1:0000A1B2:00C3D4E5:6553F0A1:qmcreate:100:root@pam:"}`, `{"data":100}`,
		`{"data":{"status":"stopped","exitstatus":"OK","pid":12}}`, `{"data":[{"key":"cores","value":2},{"key":"digest","value":"ab"}],"total":2}`,
		`{"data":[]}`, `{"data":[1,{"a":1}]}`, `{"data":[{"a":1},null]}`, `{"data":true}`, `{"data":[["a"]]}`, `{"a":1}`, `{}`,
		`{"data":{"n":1.50e3,"s":"a\"b"}} `, `{"data":1} x`, `{"data":1}{}`, `null`, `[1]`, `{"data":`, `{"data":"é\u00e9"}`,
		`{"Data":{"a":1}}`, `{"data":[{"a":1}],"DATA":null}`, `{"data":"<&>"}`,
	} {
		var a answer
		a.body.WriteString(body)
		decoded, derr := a.decoded()
		raw, rerr := a.data()
		if (derr == nil) != (rerr == nil) || derr != nil && derr.Error() != rerr.Error() {
			t.Errorf("%q: error %v, undecoded %v", body, derr, rerr)
			continue
		}
		if derr != nil {
			continue
		}
		same := func(what string, got, want any, gotErr, wantErr error) {
			t.Helper()
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Errorf("%q %s: %#v (%v), undecoded %#v (%v)", body, what, got, gotErr, want, wantErr)
			}
		}
		objs, err := decoded.objects()
		wantObjs, wantErr := decodeObjects(raw)
		same("objects", objs, wantObjs, err, wantErr)
		obj, err := decoded.object()
		wantObj, wantErr := decodeObject(raw)
		same("object", obj, wantObj, err, wantErr)
		text, err := decoded.text()
		wantText, wantErr := decodeString(raw)
		same("text", text, wantText, err, wantErr)
	}
}
