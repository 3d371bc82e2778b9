package schema

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestTableIsConsistent(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range All {
		if a.Label != LabelFor(a.Name) {
			t.Errorf("%s: wire label %q, want %q", a.Name, a.Label, LabelFor(a.Name))
		}
		if !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(a.Label) {
			t.Errorf("%s: wire label %q is not a plain Prometheus label name", a.Name, a.Label)
		}
		if seen[a.Name] || seen[a.Label] {
			t.Errorf("%s listed twice", a.Name)
		}
		seen[a.Name], seen[a.Label] = true, true
		if a.Description == "" || a.Source == "" {
			t.Errorf("%s: missing description or source", a.Name)
		}
		if got, ok := ByName(a.Name); !ok || got != a {
			t.Errorf("ByName(%q) = %v, %v", a.Name, got, ok)
		}
		if got, ok := ByLabel(a.Label); !ok || got != a {
			t.Errorf("ByLabel(%q) = %v, %v", a.Label, got, ok)
		}
	}
	if _, ok := ByName("slurm.job.uid"); ok {
		t.Error("ByName accepted an attribute that is not in the table")
	}
}

// TestNoOtherPackageSpellsAWireLabel holds the rest of the tree to this
// table: Go code outside this package must use schema.X.Label, never a
// literal. Test data and fixtures are exempt: they record what is on the wire.
func TestNoOtherPackageSpellsAWireLabel(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, a := range All {
		labels = append(labels, regexp.QuoteMeta(a.Label))
	}
	lit := regexp.MustCompile("[\"`](" + strings.Join(labels, "|") + ")[\"`]")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == "testdata" || name == "node_modules" || name == "schema" || strings.HasPrefix(name, ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := lit.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d spells wire label %s; use the schema package", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
