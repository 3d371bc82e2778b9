package sink

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Retention bounds what --output-dir keeps: files older than MaxAge and,
// oldest first, those past MaxBytes in all are removed. Zero: no bound.
type Retention struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// pruneEvery is how often the output directory is pruned.
const pruneEvery = time.Minute

// prune removes profiles under root past r at now; it reports how many
// files and bytes it removed. Only the agent's own layout is touched:
// regular *.pb.gz files one directory down (links are not followed), and
// job directories left empty.
func prune(root string, r Retention, now time.Time) (files int, bytes int64, err error) {
	if r.MaxAge <= 0 && r.MaxBytes <= 0 {
		return 0, 0, nil
	}
	type entry struct {
		path string
		mod  time.Time
		size int64
	}
	var all []entry
	var total int64
	dirs, err := os.ReadDir(root)
	if err != nil {
		return 0, 0, err
	}
	var errs []error
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		sub := filepath.Join(root, d.Name())
		ents, err := os.ReadDir(sub)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".pb.gz") {
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue // removed meanwhile
			}
			all = append(all, entry{filepath.Join(sub, e.Name()), info.ModTime(), info.Size()})
			total += info.Size()
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return a.mod.Compare(b.mod) })
	touched := map[string]bool{}
	for _, e := range all {
		old := r.MaxAge > 0 && now.Sub(e.mod) > r.MaxAge
		over := r.MaxBytes > 0 && total > r.MaxBytes
		if !old && !over {
			break // sorted oldest first: the rest are newer and fit
		}
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		files++
		bytes += e.size
		total -= e.size
		touched[filepath.Dir(e.path)] = true
	}
	for dir := range touched {
		os.Remove(dir) // only if empty; a job's next profile makes it again
	}
	return files, bytes, errors.Join(errs...)
}
