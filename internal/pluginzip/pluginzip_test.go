package pluginzip

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const pluginJSON = `{"type":"datasource","id":"slurmscope-slurm-datasource","backend":true,"executable":"gpx_slurmscope","info":{"version":"1.2.3"}}`

// fakeDist is a built plugin folder: plugin.json, the front end, a
// nested folder, a signature manifest and two backend executables.
func fakeDist(t *testing.T, pj string) string {
	t.Helper()
	dist := filepath.Join(t.TempDir(), "dist")
	files := map[string]struct {
		body string
		mode os.FileMode
	}{
		"plugin.json":                {pj, 0o644},
		"module.js":                  {"define([], function () {});", 0o644},
		"img/logo.svg":               {"<svg/>", 0o644},
		"docs/index.md":              {"# slurmscope", 0o644},
		"MANIFEST.txt":               {"signed", 0o644},
		"gpx_slurmscope_linux_amd64": {"\x7fELF amd64", 0o755},
		"gpx_slurmscope_linux_arm64": {"\x7fELF arm64", 0o755},
	}
	for name, f := range files {
		p := filepath.Join(dist, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	return dist
}

// TestPackLayout: one top-level folder named for the plugin id holding
// dist/ as it is, files' bytes and modes kept (the backends executable),
// the archive named <id>-<version>.zip, its checksums beside it.
func TestPackLayout(t *testing.T) {
	dist := fakeDist(t, pluginJSON)
	out := filepath.Join(t.TempDir(), "release")
	path, err := Pack(dist, out)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "slurmscope-slurm-datasource-1.2.3.zip" || filepath.Dir(path) != out {
		t.Fatalf("archive %s", path)
	}
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !strings.HasPrefix(f.Name, "slurmscope-slurm-datasource/") {
			t.Errorf("%s is outside the plugin id's folder", f.Name)
		}
		if strings.HasSuffix(f.Name, "/") {
			if !f.Mode().IsDir() {
				t.Errorf("%s: mode %v, want a folder", f.Name, f.Mode())
			}
			continue
		}
		rel := strings.TrimPrefix(f.Name, "slurmscope-slurm-datasource/")
		want, err := os.ReadFile(filepath.Join(dist, filepath.FromSlash(rel)))
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != string(want) {
			t.Errorf("%s: %q, want %q", f.Name, got, want)
		}
		wantMode := os.FileMode(0o644)
		if strings.HasPrefix(rel, "gpx_slurmscope_") {
			wantMode = 0o755
		}
		if f.Mode().Perm() != wantMode || !f.Mode().IsRegular() {
			t.Errorf("%s: mode %v, want %v", f.Name, f.Mode(), wantMode)
		}
	}
	for _, want := range []string{"slurmscope-slurm-datasource/", "slurmscope-slurm-datasource/img/",
		"slurmscope-slurm-datasource/plugin.json", "slurmscope-slurm-datasource/MANIFEST.txt",
		"slurmscope-slurm-datasource/docs/index.md", "slurmscope-slurm-datasource/gpx_slurmscope_linux_arm64"} {
		if !slices.Contains(names, want) {
			t.Errorf("the archive lacks %s: %v", want, names)
		}
	}
	if len(names) != 10 { // 3 folders, 7 files
		t.Errorf("%d entries, want 10: %v", len(names), names)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	line, err := os.ReadFile(path + ".sha256")
	if err != nil || string(line) != hex.EncodeToString(sum[:])+"  slurmscope-slurm-datasource-1.2.3.zip\n" {
		t.Errorf("%s.sha256: %q (%v)", path, line, err)
	}
	if line, err := os.ReadFile(path + ".sha1"); err != nil || len(strings.Fields(string(line))[0]) != 40 {
		t.Errorf("%s.sha1: %q (%v)", path, line, err)
	}
}

// TestPackRefuses what Grafana would not load or a build left unfinished.
func TestPackRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		pj    string
		setup func(dist string) error
		out   func(dist string) string
		want  string
	}{
		"unbuilt plugin.json": {pj: strings.Replace(pluginJSON, "1.2.3", "%VERSION%", 1), want: "not a version"},
		"backend not executable": {pj: pluginJSON, want: "not executable",
			setup: func(dist string) error { return os.Chmod(filepath.Join(dist, "gpx_slurmscope_linux_arm64"), 0o644) }},
		"no backend": {pj: pluginJSON, want: "no backend executable",
			setup: func(dist string) error {
				for _, a := range []string{"amd64", "arm64"} {
					if err := os.Remove(filepath.Join(dist, "gpx_slurmscope_linux_"+a)); err != nil {
						return err
					}
				}
				return nil
			}},
		"a link": {pj: pluginJSON, want: "not a regular file",
			setup: func(dist string) error { return os.Symlink("/etc/passwd", filepath.Join(dist, "img", "passwd")) }},
		"archive inside dist": {pj: pluginJSON, want: "inside the plugin folder",
			out: func(dist string) string { return filepath.Join(dist, "release") }},
	} {
		dist := fakeDist(t, tc.pj)
		if tc.setup != nil {
			if err := tc.setup(dist); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(t.TempDir(), "release")
		if tc.out != nil {
			out = tc.out(dist)
		}
		_, err := Pack(dist, out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
		if m, _ := filepath.Glob(filepath.Join(out, "*.zip")); len(m) > 0 {
			t.Errorf("%s: left %v", name, m)
		}
	}
}
