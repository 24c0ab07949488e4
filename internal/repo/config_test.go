package repo_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxops/proxops/internal/repo"
)

func TestDefaultsApplyToKeysThatAreNotSet(t *testing.T) {
	cfg, diags := repo.ParseConfigFile("proxops.yaml", []byte("reconcile:\n  prune-budget: 0\n  lock-wait: 30m\nexecutor: {concurrency: 8}\n"))
	if len(diags) != 0 {
		t.Fatalf("diagnostics:\n%s", diags.Error())
	}
	want := repo.DefaultConfig()
	want.Reconcile.PruneBudget = 0
	want.Reconcile.LockWait = 30 * time.Minute
	want.Executor.Concurrency = 8
	if diff := cmp.Diff(want, cfg, cmp.FilterPath(func(p cmp.Path) bool {
		return p.Last().String() == ".Positions" || p.Last().String() == ".File"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if _, set := cfg.Positions["reconcile.prune-budget"]; !set {
		t.Error("an explicitly set key has no position")
	}
	if _, set := cfg.Positions["reconcile.poll-interval"]; set {
		t.Error("a defaulted key has a position")
	}
	if cfg.PruneBudget(nil) != 0 || cfg.PruneBudget(&repo.ClusterConfig{PruneBudget: new(int)}) != 0 {
		t.Error("PruneBudget is wrong")
	}
}

func TestStandaloneConfigWithInlineClustersIsCheckedKeyByKey(t *testing.T) {
	src := `pve:
  auth: token
  password: hunter2
  clusters:
    prod:
      base-url: https://pve.prod.invalid:8006/api2/json
      nodes: [pve1, pve1, "bad node"]
      secrets: {pve: {token: t}}
      prune-budgt: 2
    lab:
      base-url: https://pve.lab.invalid:8006
      insecure: true
      ca-file: /etc/ssl/lab.pem
webhook: {listen: ":9595"}
`
	cfg, diags := repo.ParseConfigFile("config/proxops.yaml", []byte(src))
	want := strings.Join([]string{
		`config/proxops.yaml:3:13: pve.password: must be empty with pve.auth: token (a password is for ticket authentication)`,
		`config/proxops.yaml:6:17: pve.clusters.prod.base-url: must be just http(s)://host[:port], without a path, query or credentials`,
		`config/proxops.yaml:7:21: pve.clusters.prod.nodes[1]: node pve1 is listed twice`,
		`config/proxops.yaml:7:27: pve.clusters.prod.nodes[2]: invalid node name "bad node"`,
		`config/proxops.yaml:8:7: pve.clusters.prod.secrets: names SOPS keys but secrets-file is not set`,
		`config/proxops.yaml:9:7: warning: pve.clusters.prod.prune-budgt: unknown field; did you mean "prune-budget"?`,
		`config/proxops.yaml:13:16: warning: pve.clusters.lab.ca-file: is not used: insecure: true skips certificate verification`,
		`config/proxops.yaml:14:1: webhook.secret-env: required when webhook.listen is set: unsigned webhooks are refused`,
	}, "\n")
	if got := diags.Error(); got != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want)
	}
	if diff := cmp.Diff([]string{"lab", "prod"}, cfg.ClusterNames()); diff != "" {
		t.Errorf("ClusterNames (-want +got):\n%s", diff)
	}
	if c := cfg.PVE.Clusters["lab"]; c.Name != "lab" || c.File != "config/proxops.yaml" || c.Pos.Line != 10 {
		t.Errorf("lab = %+v", c)
	}
}

func TestClusterFileMustDeclareItsOwnName(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"", "clusters/lab/config.yaml:1:1: clusters/lab/config.yaml declares no pve.clusters entry; it must declare pve.clusters.lab"},
		{"pve:\n  clusters: {}\n", "clusters/lab/config.yaml:2:3: clusters/lab/config.yaml declares no pve.clusters entry; it must declare pve.clusters.lab"},
		{"pve:\n  clusters:\n    lab: {base-url: https://a.invalid}\n    other: {base-url: https://b.invalid}\n",
			`clusters/lab/config.yaml:4:5: clusters/lab/config.yaml declares pve.clusters."other", which does not match its directory name lab`},
	} {
		_, diags := repo.ParseClusterFile("clusters/lab/config.yaml", "lab", []byte(c.src))
		if got := diags.Error(); got != c.want {
			t.Errorf("ParseClusterFile(%q):\n%s\nwant:\n%s", c.src, got, c.want)
		}
	}
	cl, diags := repo.ParseClusterFile("clusters/lab/config.yaml", "lab", []byte("pve:\n  clusters:\n    lab:\n      base-url: https://a.invalid\n      secrets-file: ../shared/s.sops.yaml\n"))
	if len(diags) != 0 || cl.SecretsPath() != "clusters/shared/s.sops.yaml" {
		t.Errorf("cluster = %+v, %v", cl, diags)
	}
}

func TestConfigFileThatIsNotAMappingIsNotQuoted(t *testing.T) {
	_, diags := repo.ParseClusterFile("clusters/lab/config.yaml", "lab", []byte("PVE_TOKEN=deadbeef-0000-4000-8000-000000000000\n"))
	got := diags.Error()
	if !strings.Contains(got, "clusters/lab/config.yaml:1:1: expected a mapping of configuration keys, got a scalar value") {
		t.Errorf("diagnostics = %q", got)
	}
	if strings.Contains(got, "deadbeef") {
		t.Errorf("diagnostics quote the file: %q", got)
	}
}

func TestCompositionThatIsNotYAMLListIsNotQuoted(t *testing.T) {
	_, diags := repo.ParseComposition("clusters/lab/resources.yaml", []byte("GIT_TOKEN=ghp_0123456789abcdef\n"))
	got := diags.Error()
	if !strings.Contains(got, "expected a list of manifest paths, got a scalar value") || strings.Contains(got, "ghp_") {
		t.Errorf("diagnostics = %q", got)
	}
}

func clusterDiagnostics(t *testing.T, entry string) string {
	t.Helper()
	_, diags := repo.ParseClusterFile("clusters/lab/config.yaml", "lab", []byte("pve:\n  clusters:\n    lab:\n"+entry))
	return diags.Error()
}

func TestPlainHTTPBaseURLIsAnErrorUnlessLoopback(t *testing.T) {
	got := clusterDiagnostics(t, "      base-url: http://pve.example.com:8006\n")
	want := "clusters/lab/config.yaml:4:17: pve.clusters.lab.base-url: http:// sends the API token in clear text: use https://, or set insecure-http: true to accept that"
	if got != want {
		t.Errorf("http:// to a remote host:\n%s\nwant:\n%s", got, want)
	}
	for _, u := range []string{"http://127.0.0.1:8006", "http://127.9.8.7", "http://[::1]:8006", "http://localhost:8006", "http://LocalHost", "https://pve.example.com:8006"} {
		if got := clusterDiagnostics(t, "      base-url: "+u+"\n"); got != "" {
			t.Errorf("%s: %s, want no diagnostic", u, got)
		}
	}
	for _, u := range []string{"http://128.0.0.1:8006", "http://[::2]:8006", "http://localhost.example.com", "http://10.0.0.1"} {
		if got := clusterDiagnostics(t, "      base-url: "+u+"\n"); !strings.Contains(got, "clear text") {
			t.Errorf("%s: %q, want the clear-text error", u, got)
		}
	}
}

func TestInsecureHTTPTurnsTheClearTextErrorIntoAWarning(t *testing.T) {
	cl, diags := repo.ParseClusterFile("clusters/lab/config.yaml", "lab",
		[]byte("pve:\n  clusters:\n    lab:\n      base-url: http://pve.example.com:8006\n      insecure-http: true\n"))
	want := "clusters/lab/config.yaml:4:17: warning: pve.clusters.lab.base-url: " + repo.ClearTextWarning
	if diags.HasErrors() || diags.Error() != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", diags.Error(), want)
	}
	if !cl.ClearText() {
		t.Error("ClearText() = false for http:// to a remote host")
	}
	got := clusterDiagnostics(t, "      base-url: https://pve.example.com:8006\n      insecure-http: true\n")
	if got != "clusters/lab/config.yaml:5:22: warning: pve.clusters.lab.insecure-http: is not used: base-url is https://" {
		t.Errorf("insecure-http with https: %q", got)
	}
	loopback, _ := repo.ParseClusterFile("clusters/lab/config.yaml", "lab", []byte("pve:\n  clusters:\n    lab:\n      base-url: http://127.0.0.1:8006\n"))
	if loopback.ClearText() {
		t.Error("ClearText() = true for a loopback address")
	}
}

func TestBaseURLPortMustBeFrom1To65535(t *testing.T) {
	for _, port := range []string{"99999", "0", "65536", "08006"} {
		got := clusterDiagnostics(t, "      base-url: https://pve.example.com:"+port+"\n")
		if !strings.Contains(got, `pve.clusters.lab.base-url: invalid port "`+port+`" (want 1 to 65535)`) {
			t.Errorf("port %s: %q, want an invalid-port error", port, got)
		}
	}
	for _, port := range []string{":1", ":8006", ":65535", ""} {
		if got := clusterDiagnostics(t, "      base-url: https://pve.example.com"+port+"\n"); got != "" {
			t.Errorf("port %q: %s, want no diagnostic", port, got)
		}
	}
}
