package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proxops/proxops/internal/render"
	"github.com/proxops/proxops/internal/repo"
	"github.com/proxops/proxops/internal/repofs"
)

func init() { register(newValidateCommand) }

type validateOptions struct {
	repo     string
	clusters []string
	strict   bool
	output   string
	// process is laid over the repository's proxops.yaml: the --config file and the explicit global flags.
	process *repo.Config
}

// validateSource says which work tree validate reads and what is laid over its proxops.yaml. --repo (or
// --git-path) is read exactly as given; without it, the repository the other commands would use
// (--config or PROXOPS_CONFIG and its git source, else PROXOPS_GIT_PATH, else the repository containing the
// current directory). A --config file and the global flags given explicitly are laid over the tree's
// proxops.yaml as diff and apply lay them, so validate checks the configuration they would run with.
func validateSource(g globalOptions, repoFlag string, lookup func(string) (string, bool)) (string, *repo.Config, error) {
	if repoFlag != "" {
		flagCfg, err := g.flagConfig()
		if err != nil {
			return "", nil, err
		}
		cfgEnv, _ := lookup(envConfig)
		if !g.changed("config") && cfgEnv == "" && len(flagCfg.Positions) == 0 {
			return repoFlag, nil, nil
		}
	}
	src, err := resolveSource(g, repoFlag, lookup)
	if err != nil {
		return "", nil, err
	}
	if src.URL != "" {
		return "", nil, fmt.Errorf("validate reads a local repository, and the configuration follows %s: give --repo DIR (a clone of it)", src.URL)
	}
	if repoFlag != "" {
		return repoFlag, src.Process, nil
	}
	return src.Root, src.Process, nil
}

func newValidateCommand() *cobra.Command {
	var opts validateOptions
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check a repository's manifests and configuration, without contacting PVE",
		Long: `validate reads the repository's work tree (proxops.yaml, clusters/<name>/config.yaml and
resources.yaml, and every manifest a composition lists), checks every rule, and reports every problem at
once as path:line:col: Kind/name: field: message. It exits 1 when there is an error (or, with --strict, a
warning) and 0 otherwise. Without --repo (or the predecessor's --git-path) it uses the repository the
other commands would use: the git source of --config (or PROXOPS_CONFIG), else PROXOPS_GIT_PATH, else the
repository that contains the current directory. A --config file and the global flags given explicitly are
laid over the repository's proxops.yaml, as diff and apply do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			g := globalsOf(cmd)
			// The predecessor's --git-path names the repository here as --repo does.
			if opts.repo == "" && g.changed("git-path") {
				opts.repo = g.gitPath
			}
			root, process, err := validateSource(g, opts.repo, os.LookupEnv)
			if err != nil {
				return err
			}
			opts.repo, opts.process = root, process
			return runValidate(cmd.OutOrStdout(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.repo, "repo", "", "repository root (default: the repository containing the current directory)")
	f.StringArrayVar(&opts.clusters, "cluster", nil, "check only this cluster (repeatable); repository-wide problems are always reported")
	f.BoolVar(&opts.strict, "strict", false, "treat warnings (such as unknown fields) as errors")
	f.StringVarP(&opts.output, "output", "o", "text", "output format: text or json")
	return cmd
}

func runValidate(w io.Writer, opts validateOptions) error {
	if opts.output != "text" && opts.output != "json" {
		return fmt.Errorf("--output %q: want text or json", opts.output)
	}
	root := opts.repo
	if root == "" {
		cwd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("validate: %w", err)
		}
		if root, err = repo.Discover(cwd); err != nil {
			return err
		}
	} else if info, err := os.Stat(root); err != nil {
		return fmt.Errorf("--repo: %w", err)
	} else if !info.IsDir() {
		return fmt.Errorf("--repo %s is not a directory", root)
	}
	// The work tree is read through repofs: a symbolic link that leaves the repository is reported by its
	// path and never followed.
	tree, err := repofs.Open(root)
	if err != nil {
		return err
	}
	defer func() { _ = tree.Close() }()
	defer boundValidateMemory(tree)()
	r := repo.LoadWith(tree, repo.LoadOptions{Process: opts.process})
	report, err := newValidateReport(r, opts)
	if err != nil {
		return err
	}
	if opts.output == "json" {
		err = writeValidateJSON(w, report)
	} else {
		err = writeValidateText(w, report)
	}
	if err != nil {
		return err
	}
	if !report.Valid {
		return &exitError{code: 1}
	}
	return nil
}

// validateReport is the result of validate; its JSON form is documented in docs/cli.md and its field order
// is stable.
type validateReport struct {
	Valid       bool                    `json:"valid"`
	Strict      bool                    `json:"strict"`
	Summary     validateSummary         `json:"summary"`
	Clusters    []validateCluster       `json:"clusters"`
	Diagnostics []render.DiagnosticJSON `json:"diagnostics"`
}

type validateSummary struct {
	Clusters  int `json:"clusters"`
	Resources int `json:"resources"`
	Errors    int `json:"errors"`
	Warnings  int `json:"warnings"`
}

type validateCluster struct {
	Name      string `json:"name"`
	Valid     bool   `json:"valid"`
	Resources int    `json:"resources"`
	Errors    int    `json:"errors"`
	Warnings  int    `json:"warnings"`
}

func newValidateReport(r *repo.Repository, opts validateOptions) (*validateReport, error) {
	names := r.ClusterNames()
	selected := names
	if len(opts.clusters) > 0 {
		selected = nil
		for _, c := range opts.clusters {
			if r.Cluster(c) == nil {
				return nil, fmt.Errorf("--cluster %q is not a cluster of this repository (known: [%s])", c, strings.Join(names, " "))
			}
			if !slices.Contains(selected, c) {
				selected = append(selected, c)
			}
		}
		slices.Sort(selected)
	}
	all := slices.Clone(r.Diagnostics)
	rep := &validateReport{Strict: opts.strict, Clusters: []validateCluster{}, Diagnostics: []render.DiagnosticJSON{}}
	for _, name := range selected {
		c := r.Cluster(name)
		all = append(all, c.Diagnostics...)
		e, w := r.ClusterDiagnostics(name).Count()
		rep.Clusters = append(rep.Clusters, validateCluster{Name: name, Valid: e == 0 && (!opts.strict || w == 0),
			Resources: len(c.Resources), Errors: e, Warnings: w})
		rep.Summary.Resources += len(c.Resources)
	}
	all = all.Sorted()
	for _, d := range all {
		rep.Diagnostics = append(rep.Diagnostics, render.DiagnosticToJSON(d))
	}
	rep.Summary.Clusters = len(selected)
	rep.Summary.Errors, rep.Summary.Warnings = all.Count()
	rep.Valid = rep.Summary.Errors == 0 && (!opts.strict || rep.Summary.Warnings == 0)
	return rep, nil
}

func writeValidateText(w io.Writer, rep *validateReport) error {
	var b strings.Builder
	for _, d := range rep.Diagnostics {
		b.WriteString(d.Text)
		b.WriteByte('\n')
	}
	s := rep.Summary
	fmt.Fprintf(&b, "%s, %s, %s, %s\n", plural(s.Clusters, "cluster"), plural(s.Resources, "resource"),
		plural(s.Errors, "error"), plural(s.Warnings, "warning"))
	_, err := io.WriteString(w, b.String())
	return err
}

func writeValidateJSON(w io.Writer, rep *validateReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(rep)
}

// validateMemoryPerByte is how much memory validate lets itself grow by for each byte of YAML it reads: a
// parsed repository holds about three times its bytes (TestParsedRepositoryHoldsAFewTimesItsBytes), and
// parsing leaves garbage behind at a hundred times their rate, which the collector is left room for.
const validateMemoryPerByte = 6

// minValidateMemory is the least room validate gives itself above what it started with.
const minValidateMemory = 8 << 20

// boundValidateMemory sets the Go runtime's soft memory limit to what the program uses now plus
// validateMemoryPerByte times the size of the tree's YAML files (at least minValidateMemory), and returns
// what puts the previous limit back. Without it the collector lets the heap reach twice what is live and
// returns freed memory to the system slowly, so validate peaked at over twelve times the repository's
// bytes above its baseline. The limit is soft: a repository that needs more gets it, at the cost of more
// frequent collection. An explicit GOMEMLIMIT is left alone.
func boundValidateMemory(tree fs.FS) (restore func()) {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return func() {}
	}
	var size int64
	_ = fs.WalkDir(tree, ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && d.Name() == ".git":
			return fs.SkipDir
		case d.Type().IsRegular() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")):
			if info, err := d.Info(); err == nil {
				size += info.Size()
			}
		}
		return nil
	})
	sample := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(sample)
	inUse := int64(sample[0].Value.Uint64() - sample[1].Value.Uint64())
	previous := debug.SetMemoryLimit(inUse + max(validateMemoryPerByte*size, minValidateMemory))
	return func() { debug.SetMemoryLimit(previous) }
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
