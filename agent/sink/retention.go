package sink

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// sizeFlag is a byte count with an optional unit: 512MiB, 2GiB, 10G, 0.
type sizeFlag struct{ n *int64 }

func (s sizeFlag) String() string {
	if s.n == nil {
		return "0"
	}
	return strconv.FormatInt(*s.n, 10)
}

func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s.n = n
	return nil
}

// parseSize reads a byte count: digits, then optionally KiB, MiB, GiB,
// TiB (powers of 1024) or kB, MB, GB, TB (of 1000), as node_exporter's
// and Prometheus' flags do.
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q: want a size such as 512MiB or 2GiB", v)
	}
	n, err := strconv.ParseInt(v[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", v, err)
	}
	mult := map[string]int64{"": 1, "B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[v[i:]]
	if mult == 0 {
		return 0, fmt.Errorf("%q: unknown unit %q (KiB, MiB, GiB, TiB, kB, MB, GB, TB)", v, v[i:])
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: too large", v)
	}
	return n * mult, nil
}

// ageFlag is a duration that also takes days: 7d, 36h, 90m, 0.
type ageFlag struct{ d *time.Duration }

func (a ageFlag) String() string {
	if a.d == nil {
		return "0s"
	}
	return a.d.String()
}

func (a ageFlag) Set(v string) error {
	d, err := parseAge(v)
	if err != nil {
		return err
	}
	*a.d = d
	return nil
}

func parseAge(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%q: want a duration such as 7d or 36h", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration such as 7d or 36h", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q: a duration cannot be negative", v)
	}
	return d, nil
}
