package e2e

import (
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPluginDist checks what `npm run build` and `mage buildAll` leave in
// dist/: the folder Grafana loads as the plugin, and what the catalog's
// archive holds. CI builds it before the Go tests run; a developer runs both
// commands first.
func TestPluginDist(t *testing.T) {
	dist := filepath.Join("..", "dist")
	if _, err := os.Stat(filepath.Join(dist, "module.js")); err != nil {
		if os.Getenv("SLURMSCOPE_INTEGRATION") == "1" {
			t.Fatalf("no built plugin (%v): run `npm run build` and `mage buildAll` first", err)
		}
		t.Skip("integration test: build the plugin (npm run build, mage buildAll) and set SLURMSCOPE_INTEGRATION=1")
	}

	b, err := os.ReadFile(filepath.Join(dist, "plugin.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pj struct {
		Type       string `json:"type"`
		ID         string `json:"id"`
		Backend    bool   `json:"backend"`
		Executable string `json:"executable"`
		Info       struct {
			Version string `json:"version"`
			Updated string `json:"updated"`
			Logos   struct {
				Small string `json:"small"`
			} `json:"logos"`
		} `json:"info"`
	}
	if err := json.Unmarshal(b, &pj); err != nil {
		t.Fatalf("plugin.json: %v", err)
	}
	if pj.Type != "datasource" || !pj.Backend || pj.Executable == "" {
		t.Errorf("plugin.json: type %q backend %v executable %q", pj.Type, pj.Backend, pj.Executable)
	}
	// The build fills the placeholders of src/plugin.json.
	if !regexp.MustCompile(`^\d+\.\d+\.\d+`).MatchString(pj.Info.Version) || !regexp.MustCompile(`^\d{4}-\d\d-\d\d$`).MatchString(pj.Info.Updated) {
		t.Errorf("plugin.json: version %q updated %q: placeholders not filled", pj.Info.Version, pj.Info.Updated)
	}
	if _, err := os.Stat(filepath.Join(dist, pj.Info.Logos.Small)); err != nil {
		t.Errorf("logo: %v", err)
	}

	// module.js is the AMD module Grafana's loader expects, with React and
	// the Grafana packages left to Grafana.
	mod, err := os.ReadFile(filepath.Join(dist, "module.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`define(`, `"@grafana/data"`, `"@grafana/ui"`, `"@grafana/runtime"`, `"react"`} {
		if !strings.Contains(string(mod), want) {
			t.Errorf("module.js lacks %s", want)
		}
	}
	if strings.Contains(string(mod), "__SECRET_INTERNALS") || strings.Contains(string(mod), "react-dom.production") {
		t.Error("module.js bundles its own React")
	}

	// One backend executable per Linux architecture Grafana runs on.
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		p := filepath.Join(dist, pj.Executable+"_linux_"+arch)
		f, err := elf.Open(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if f.Machine != machine {
			t.Errorf("%s: machine %v, want %v", p, f.Machine, machine)
		}
		f.Close()
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable", p)
		}
	}
}
