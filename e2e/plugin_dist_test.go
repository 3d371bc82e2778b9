package e2e

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// TestPluginDist checks what `npm run build` and `mage buildAll` leave in
// dist/: the folder Grafana loads as the plugin, and what the catalog's
// archive holds. CI builds it before the Go tests run; a developer runs both
// commands first.
func TestPluginDist(t *testing.T) {
	lane(t, &simLane)
	dist := filepath.Join("..", "dist")
	testenv.Require(t, testenv.Func("the built plugin (npm run build, mage buildAll)", func() error {
		_, err := os.Stat(filepath.Join(dist, "module.js"))
		return err
	}))

	b, err := os.ReadFile(filepath.Join(dist, "plugin.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pj struct {
		Type       string `json:"type"`
		ID         string `json:"id"`
		Backend    bool   `json:"backend"`
		Executable string `json:"executable"`
		DocsPath   string `json:"docsPath"`
		Info       struct {
			Version string `json:"version"`
			Updated string `json:"updated"`
			Logos   struct {
				Small string `json:"small"`
			} `json:"logos"`
			Screenshots []struct {
				Name string `json:"name"`
				Path string `json:"path"`
			} `json:"screenshots"`
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
	// The catalog shows the screenshots: PNGs in the archive.
	if len(pj.Info.Screenshots) == 0 {
		t.Error("plugin.json: no info.screenshots")
	}
	for _, s := range pj.Info.Screenshots {
		b, err := os.ReadFile(filepath.Join(dist, s.Path))
		if err != nil || s.Name == "" || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("screenshot %q at %q: not a PNG in dist/ (%v)", s.Name, s.Path, err)
		}
	}
	// docsPath names the documentation folder from the repository root
	// (where src/plugin.json is), which must have its landing page, and the
	// archive carries the same pages there.
	if _, err := os.Stat(filepath.Join("..", pj.DocsPath, "index.md")); pj.DocsPath == "" || err != nil {
		t.Errorf("plugin.json: docsPath %q has no index.md (%v)", pj.DocsPath, err)
	}
	pages, _ := filepath.Glob(filepath.Join("..", pj.DocsPath, "*.md"))
	for _, p := range pages {
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(dist, pj.DocsPath, filepath.Base(p)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("dist/%s/%s: not the page in %s (%v)", pj.DocsPath, filepath.Base(p), pj.DocsPath, err)
		}
	}
	// The archive carries the README, the licence and a Keep a Changelog
	// changelog beside plugin.json.
	for _, name := range []string{"README.md", "LICENSE", "CHANGELOG.md"} {
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			t.Errorf("dist/%s: missing or empty (%v)", name, err)
			continue
		}
		if name == "CHANGELOG.md" && (!bytes.HasPrefix(b, []byte("# Changelog\n")) || !regexp.MustCompile(`(?m)^## (Unreleased|\[?\d+\.\d+\.\d+)`).Match(b)) {
			t.Errorf("dist/CHANGELOG.md: want a Keep a Changelog file (# Changelog, then ## <version> sections)")
		}
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

	// The source map resolves against src/ at the repository root, as
	// Grafana's plugin validator resolves it: every source of ours it names
	// is a file there with the same text.
	checkSourceMap(t, filepath.Join(dist, "module.js.map"), pj.ID, filepath.Join("..", "src"))

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

// checkSourceMap compares each source a webpack source map names with the
// file under srcDir: webpack://<id>/./x.ts is srcDir/x.ts. Webpack's runtime,
// externals, node_modules and styles are not ours and are skipped, as the
// validator skips them.
func checkSourceMap(t *testing.T, mapPath, pluginID, srcDir string) {
	t.Helper()
	b, err := os.ReadFile(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	var sm struct {
		Sources        []string `json:"sources"`
		SourcesContent []string `json:"sourcesContent"`
	}
	if err := json.Unmarshal(b, &sm); err != nil {
		t.Fatalf("%s: %v", mapPath, err)
	}
	if len(sm.Sources) == 0 || len(sm.Sources) != len(sm.SourcesContent) {
		t.Fatalf("%s: %d sources, %d contents", mapPath, len(sm.Sources), len(sm.SourcesContent))
	}
	prefix := regexp.MustCompile("^webpack://" + regexp.QuoteMeta(pluginID) + "/*|^webpack:/*")
	ours := 0
	for i, src := range sm.Sources {
		name := prefix.ReplaceAllString(src, "")
		if j := strings.IndexByte(name, '?'); j >= 0 {
			name = name[:j]
		}
		if strings.HasPrefix(name, "external ") || strings.HasPrefix(name, "webpack/") || strings.Contains(name, "node_modules/") ||
			regexp.MustCompile(`\.(css|scss|sass|less|svg|json)$`).MatchString(name) {
			continue
		}
		ours++
		have, err := os.ReadFile(filepath.Join(srcDir, name))
		if err != nil {
			t.Errorf("source map names %s: not in %s (%v)", src, srcDir, err)
			continue
		}
		if strings.ReplaceAll(string(have), "\r\n", "\n") != strings.ReplaceAll(sm.SourcesContent[i], "\r\n", "\n") {
			t.Errorf("source map's %s differs from %s: rebuild", src, filepath.Join(srcDir, name))
		}
	}
	if ours == 0 {
		t.Errorf("%s names none of the plugin's own sources", mapPath)
	}
}
