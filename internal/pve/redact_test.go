package pve

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestConfigNeverPrintsItsCredentials(t *testing.T) {
	const token, password = "7d1c2a4e-token-secret", "hunter2-password"
	cfg := Config{BaseURL: "https://pve.example:8006", TokenID: "root@pam!proxops", TokenSecret: token,
		User: "root@pam", Password: password, CAFile: "/etc/proxops/ca.pem"}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("connect", "cfg", cfg)
	var text bytes.Buffer
	slog.New(slog.NewTextHandler(&text, nil)).Info("connect", slog.Any("cfg", cfg), slog.Any("ptr", &cfg))
	forms := map[string]string{
		"%v": fmt.Sprintf("%v", cfg), "%+v": fmt.Sprintf("%+v", cfg), "%#v": fmt.Sprintf("%#v", cfg),
		"%s": fmt.Sprintf("%s", cfg), "%q": fmt.Sprintf("%q", cfg), "%x": fmt.Sprintf("%x", cfg),
		"pointer %+v": fmt.Sprintf("%+v", &cfg), "String": cfg.String(), "GoString": cfg.GoString(),
		"nested %+v": fmt.Sprintf("%+v", struct{ C Config }{cfg}), "nested %#v": fmt.Sprintf("%#v", struct{ C Config }{cfg}),
		"slog json": logged.String(), "slog text": text.String(),
	}
	for name, out := range forms {
		if strings.Contains(out, token) || strings.Contains(out, password) {
			t.Errorf("%s leaks a credential: %s", name, out)
		}
		if !strings.Contains(out, redacted) {
			t.Errorf("%s does not show the redaction: %s", name, out)
		}
		if !strings.Contains(out, "root@pam") {
			t.Errorf("%s hides the principal too: %s", name, out)
		}
	}
	if got := forms["%#v"]; !strings.HasPrefix(got, "pve.Config{") {
		t.Errorf("%%#v = %s, want the type named", got)
	}
	// The configuration itself is unchanged.
	if cfg.TokenSecret != token || cfg.Password != password {
		t.Fatal("printing changed the configuration")
	}
}
