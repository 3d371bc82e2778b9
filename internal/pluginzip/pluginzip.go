// Package pluginzip packs a built Grafana plugin folder (dist/: the front
// end, the backend executables, plugin.json, and MANIFEST.txt when signed)
// into the archive Grafana installs and its catalog takes:
// <id>-<version>.zip, whose one top-level folder is named for the plugin id
// (https://grafana.com/developers/plugin-tools/publish-a-plugin/package-a-plugin),
// with its SHA-1 and SHA-256 beside it. `mage release:plugin` builds dist/
// and calls it; it needs no Node.js itself, so that it is tested on its own.
package pluginzip

import (
	"archive/zip"
	"crypto/sha1" // #nosec G505 -- a checksum Grafana's catalog asks for, beside SHA-256; not a signature
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Plugin is what the archive is named and checked by, from plugin.json.
type Plugin struct {
	ID         string `json:"id"`
	Backend    bool   `json:"backend"`
	Executable string `json:"executable"`
	Info       struct {
		Version string `json:"version"`
	} `json:"info"`
}

var (
	idRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*[a-z0-9]$`)
	versionRE = regexp.MustCompile(`^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$`)
)

// Read reads dist/plugin.json: the built one, whose version the front end's
// build filled in.
func Read(dist string) (Plugin, error) {
	var p Plugin
	b, err := os.ReadFile(filepath.Join(dist, "plugin.json"))
	if err != nil {
		return p, fmt.Errorf("%w (build the plugin first)", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Join(dist, "plugin.json"), err)
	}
	if !idRE.MatchString(p.ID) {
		return p, fmt.Errorf("plugin.json: id %q is not a plugin id", p.ID)
	}
	if !versionRE.MatchString(p.Info.Version) {
		return p, fmt.Errorf("plugin.json: info.version %q is not a version (is this the built plugin.json?)", p.Info.Version)
	}
	if p.Backend && p.Executable == "" {
		return p, errors.New("plugin.json: a backend plugin without an executable")
	}
	return p, nil
}

// Name is the archive's file name, <id>-<version>.zip.
func (p Plugin) Name() string { return p.ID + "-" + p.Info.Version + ".zip" }

// Pack writes outDir/<id>-<version>.zip from the folder dist, every file
// and folder in it under one folder named for the plugin id, with its
// mode (the backend executables keep their 0755), and beside it
// <zip>.sha1 and <zip>.sha256 in sha1sum's format. A backend plugin must
// have at least one executable <executable>_<os>_<arch>, and every such
// file must be executable. It returns the archive's path.
func Pack(dist, outDir string) (string, error) {
	p, err := Read(dist)
	if err != nil {
		return "", err
	}
	absDist, err1 := filepath.Abs(dist)
	absOut, err2 := filepath.Abs(outDir)
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(absDist, absOut); err == nil && !strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("the archive's folder %s is inside the plugin folder %s", outDir, dist)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil { // #nosec G301 -- a release folder, read by whoever publishes it
		return "", err
	}
	zipPath := filepath.Join(outDir, p.Name())
	tmp, err := os.CreateTemp(outDir, ".pluginzip-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	err = write(tmp, dist, p)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { // #nosec G302 -- a release archive, for publishing
		return "", err
	}
	if err := os.Rename(tmp.Name(), zipPath); err != nil {
		return "", err
	}
	for ext, h := range map[string]func() hash.Hash{".sha1": sha1.New, ".sha256": sha256.New} {
		sum, err := fileSum(zipPath, h())
		if err != nil {
			return "", err
		}
		line := sum + "  " + filepath.Base(zipPath) + "\n"
		if err := os.WriteFile(zipPath+ext, []byte(line), 0o644); err != nil { // #nosec G306 -- published beside the archive
			return "", err
		}
	}
	return zipPath, nil
}

// write writes the archive of dist to w.
func write(w io.Writer, dist string, p Plugin) error {
	zw := zip.NewWriter(w)
	executables := 0
	err := filepath.WalkDir(dist, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dist, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !d.IsDir() && !info.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file or folder (%s): the archive holds only those", path, info.Mode().Type())
		}
		name := p.ID + "/"
		if rel != "." {
			name += filepath.ToSlash(rel)
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name = name
		if d.IsDir() {
			if rel != "." {
				h.Name += "/"
			}
			h.Method = zip.Store
			_, err := zw.CreateHeader(h)
			return err
		}
		if p.Backend && strings.HasPrefix(d.Name(), p.Executable+"_") && filepath.Dir(rel) == "." {
			if info.Mode().Perm()&0o111 == 0 {
				return fmt.Errorf("%s: the backend executable is not executable (mode %v)", path, info.Mode().Perm())
			}
			executables++
		}
		h.Method = zip.Deflate
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		f, err := os.Open(path) // #nosec G304 -- a file of the plugin folder being packed
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(fw, f)
		return err
	})
	if err != nil {
		return err
	}
	if p.Backend && executables == 0 {
		return fmt.Errorf("%s: no backend executable %s_<os>_<arch> (build the backend first)", dist, p.Executable)
	}
	return zw.Close()
}

func fileSum(path string, h hash.Hash) (string, error) {
	f, err := os.Open(path) // #nosec G304 -- the archive just written
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
