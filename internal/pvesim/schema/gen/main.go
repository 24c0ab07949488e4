// Command gen trims the official PVE API schema (the api-viewer's apidata) down to the paths and methods the
// simulator serves, keeping each method's full parameter schema, and writes it as the simulator's embedded
// schema file.
//
//	go run ./internal/pvesim/schema/gen -in /path/to/apidoc-9.1.json -out internal/pvesim/schema/apidoc-trim.json
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
)

// served lists every path and method the simulator implements; keep it in step with the router.
var served = map[string][]string{
	"/version":                                               {"GET"},
	"/access/ticket":                                         {"POST"},
	"/nodes":                                                 {"GET"},
	"/cluster/resources":                                     {"GET"},
	"/cluster/nextid":                                        {"GET"},
	"/cluster/options":                                       {"GET"},
	"/nodes/{node}/qemu":                                     {"GET", "POST"},
	"/nodes/{node}/qemu/{vmid}":                              {"GET", "DELETE"},
	"/nodes/{node}/qemu/{vmid}/config":                       {"GET", "POST", "PUT"},
	"/nodes/{node}/qemu/{vmid}/pending":                      {"GET"},
	"/nodes/{node}/qemu/{vmid}/cloudinit":                    {"GET", "PUT"},
	"/nodes/{node}/qemu/{vmid}/status":                       {"GET"},
	"/nodes/{node}/qemu/{vmid}/status/current":               {"GET"},
	"/nodes/{node}/qemu/{vmid}/status/start":                 {"POST"},
	"/nodes/{node}/qemu/{vmid}/status/stop":                  {"POST"},
	"/nodes/{node}/qemu/{vmid}/status/shutdown":              {"POST"},
	"/nodes/{node}/lxc":                                      {"GET", "POST"},
	"/nodes/{node}/lxc/{vmid}":                               {"GET", "DELETE"},
	"/nodes/{node}/lxc/{vmid}/config":                        {"GET", "PUT"},
	"/nodes/{node}/lxc/{vmid}/pending":                       {"GET"},
	"/nodes/{node}/lxc/{vmid}/status":                        {"GET"},
	"/nodes/{node}/lxc/{vmid}/status/current":                {"GET"},
	"/nodes/{node}/lxc/{vmid}/status/start":                  {"POST"},
	"/nodes/{node}/lxc/{vmid}/status/stop":                   {"POST"},
	"/nodes/{node}/lxc/{vmid}/status/shutdown":               {"POST"},
	"/nodes/{node}/storage":                                  {"GET"},
	"/nodes/{node}/storage/{storage}/content":                {"GET"},
	"/nodes/{node}/tasks":                                    {"GET"},
	"/nodes/{node}/tasks/{upid}":                             {"DELETE"},
	"/nodes/{node}/tasks/{upid}/status":                      {"GET"},
	"/nodes/{node}/tasks/{upid}/log":                         {"GET"},
	"/nodes/{node}/qemu/{vmid}/clone":                        {"POST"},
	"/nodes/{node}/qemu/{vmid}/template":                     {"POST"},
	"/nodes/{node}/qemu/{vmid}/resize":                       {"PUT"},
	"/nodes/{node}/qemu/{vmid}/status/suspend":               {"POST"},
	"/nodes/{node}/qemu/{vmid}/status/resume":                {"POST"},
	"/nodes/{node}/qemu/{vmid}/snapshot":                     {"GET", "POST"},
	"/nodes/{node}/lxc/{vmid}/clone":                         {"POST"},
	"/nodes/{node}/lxc/{vmid}/template":                      {"POST"},
	"/nodes/{node}/lxc/{vmid}/resize":                        {"PUT"},
	"/nodes/{node}/lxc/{vmid}/snapshot":                      {"GET", "POST"},
	"/nodes/{node}/storage/{storage}/download-url":           {"POST"},
	"/nodes/{node}/storage/{storage}/upload":                 {"POST"},
	"/pools":                                                 {"GET", "POST", "PUT", "DELETE"},
	"/pools/{poolid}":                                        {"GET", "PUT", "DELETE"},
	"/nodes/{node}/qemu/{vmid}/firewall/options":             {"GET", "PUT"},
	"/nodes/{node}/qemu/{vmid}/firewall/rules":               {"GET", "POST"},
	"/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}":         {"GET", "PUT", "DELETE"},
	"/nodes/{node}/qemu/{vmid}/firewall/ipset":               {"GET", "POST"},
	"/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}":        {"GET", "POST", "DELETE"},
	"/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}/{cidr}": {"GET", "PUT", "DELETE"},
	"/nodes/{node}/qemu/{vmid}/firewall/aliases":             {"GET", "POST"},
	"/nodes/{node}/qemu/{vmid}/firewall/aliases/{name}":      {"GET", "PUT", "DELETE"},
	"/nodes/{node}/lxc/{vmid}/firewall/options":              {"GET", "PUT"},
	"/nodes/{node}/lxc/{vmid}/firewall/rules":                {"GET", "POST"},
	"/nodes/{node}/lxc/{vmid}/firewall/rules/{pos}":          {"GET", "PUT", "DELETE"},
	"/nodes/{node}/lxc/{vmid}/firewall/ipset":                {"GET", "POST"},
	"/nodes/{node}/lxc/{vmid}/firewall/ipset/{name}":         {"GET", "POST", "DELETE"},
	"/nodes/{node}/lxc/{vmid}/firewall/ipset/{name}/{cidr}":  {"GET", "PUT", "DELETE"},
	"/nodes/{node}/lxc/{vmid}/firewall/aliases":              {"GET", "POST"},
	"/nodes/{node}/lxc/{vmid}/firewall/aliases/{name}":       {"GET", "PUT", "DELETE"},
	"/cluster/firewall/options":                              {"GET", "PUT"},
	"/cluster/firewall/rules":                                {"GET", "POST"},
	"/cluster/firewall/rules/{pos}":                          {"GET", "PUT", "DELETE"},
	"/cluster/firewall/groups":                               {"GET", "POST"},
	"/cluster/firewall/groups/{group}":                       {"GET", "POST", "DELETE"},
	"/cluster/firewall/groups/{group}/{pos}":                 {"GET", "PUT", "DELETE"},
	"/cluster/firewall/ipset":                                {"GET", "POST"},
	"/cluster/firewall/ipset/{name}":                         {"GET", "POST", "DELETE"},
	"/cluster/firewall/ipset/{name}/{cidr}":                  {"GET", "PUT", "DELETE"},
	"/cluster/firewall/aliases":                              {"GET", "POST"},
	"/cluster/firewall/aliases/{name}":                       {"GET", "PUT", "DELETE"},
	"/cluster/backup":                                        {"GET", "POST"},
	"/cluster/backup/{id}":                                   {"GET", "PUT", "DELETE"},
	"/cluster/backup-info/not-backed-up":                     {"GET"},
	"/cluster/ha/resources":                                  {"GET", "POST"},
	"/cluster/ha/resources/{sid}":                            {"GET", "PUT", "DELETE"},
	"/cluster/ha/resources/{sid}/migrate":                    {"POST"},
	"/cluster/ha/resources/{sid}/relocate":                   {"POST"},
	"/cluster/ha/rules":                                      {"GET", "POST"},
	"/cluster/ha/rules/{rule}":                               {"GET", "PUT", "DELETE"},
	"/cluster/ha/groups":                                     {"GET", "POST"},
	"/cluster/ha/groups/{group}":                             {"GET", "PUT", "DELETE"},
	"/cluster/ha/status/current":                             {"GET"},
	"/cluster/ha/status/manager_status":                      {"GET"},
	"/nodes/{node}/qemu/{vmid}/migrate":                      {"GET", "POST"},
	"/nodes/{node}/lxc/{vmid}/migrate":                       {"GET", "POST"},
	"/nodes/{node}/qemu/{vmid}/snapshot/{snapname}":          {"GET", "DELETE"},
	"/nodes/{node}/lxc/{vmid}/snapshot/{snapname}":           {"GET", "DELETE"},
	// Snapshots beyond list, create and delete.
	"/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config":   {"GET", "PUT"},
	"/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback": {"POST"},
	"/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/config":    {"GET", "PUT"},
	"/nodes/{node}/lxc/{vmid}/snapshot/{snapname}/rollback":  {"POST"},
}

type node struct {
	Path     string                     `json:"path"`
	Info     map[string]json.RawMessage `json:"info"`
	Children []node                     `json:"children"`
}

// Method is one entry of the trimmed schema.
type Method struct {
	Path       string          `json:"path"`
	Method     string          `json:"method"`
	Name       string          `json:"name,omitempty"`
	AllowToken *int            `json:"allowtoken,omitempty"`
	Protected  int             `json:"protected,omitempty"`
	ProxyTo    string          `json:"proxyto,omitempty"`
	Parameters json.RawMessage `json:"parameters"`
}

func main() {
	in := flag.String("in", "", "the full apidoc JSON (required)")
	out := flag.String("out", "internal/pvesim/schema/apidoc-trim.json", "trimmed output")
	flag.Parse()
	if *in == "" {
		fmt.Fprintln(os.Stderr, "gen: -in is required")
		os.Exit(2)
	}
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	raw, err := os.ReadFile(in)
	if err != nil {
		return fmt.Errorf("read schema: %w", err)
	}
	var roots []node
	if err := json.Unmarshal(raw, &roots); err != nil {
		return fmt.Errorf("parse schema %s: %w", in, err)
	}
	found := map[string]json.RawMessage{}
	var walk func(n node)
	walk = func(n node) {
		for m, info := range n.Info {
			found[n.Path+" "+m] = info
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	var methods []Method
	for path, ms := range served {
		for _, m := range ms {
			info, ok := found[path+" "+m]
			if !ok {
				return fmt.Errorf("schema has no %s %s", m, path)
			}
			var full struct {
				Name       string          `json:"name"`
				AllowToken *int            `json:"allowtoken"`
				Protected  int             `json:"protected"`
				ProxyTo    string          `json:"proxyto"`
				Parameters json.RawMessage `json:"parameters"`
			}
			if err := json.Unmarshal(info, &full); err != nil {
				return fmt.Errorf("parse %s %s: %w", m, path, err)
			}
			methods = append(methods, Method{Path: path, Method: m, Name: full.Name, AllowToken: full.AllowToken,
				Protected: full.Protected, ProxyTo: full.ProxyTo, Parameters: full.Parameters})
		}
	}
	sort.Slice(methods, func(i, j int) bool {
		if methods[i].Path != methods[j].Path {
			return methods[i].Path < methods[j].Path
		}
		return methods[i].Method < methods[j].Method
	})
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(methods); err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}
