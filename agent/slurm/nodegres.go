package slurm

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// GRESRecord is one record of a node's GRES configuration as slurmd loads
// it (gres.conf, autodetected devices): what `slurmd -G` prints. A node's
// records of one name, in this order, are what slurmctld's IDX numbers:
// each record takes Count indexes.
type GRESRecord struct {
	Name  string
	GPU   bool   // the gpu GRES
	Type  string // "" when untyped
	Count int
	// Files are the device files. A record of Count n with n files gives
	// each index one file; a record of Count 1 with several files (a MIG
	// instance: the GPU's file and its capability files) gives its one
	// index all of them.
	Files []string
}

// ParseSlurmdG parses what `slurmd -G` prints, one "Gres Name=... Type=...
// Count=... File=..." line per record (with a "slurmd: " prefix on some
// versions; other lines are ignored).
func ParseSlurmdG(out []byte) ([]GRESRecord, error) {
	var recs []GRESRecord
	for line := range strings.SplitSeq(string(out), "\n") {
		line = strings.TrimSpace(line)
		line = strings.TrimPrefix(line, "slurmd: ")
		rest, ok := strings.CutPrefix(line, "Gres ")
		if !ok {
			continue
		}
		if len(recs) >= maxGRESItems {
			return nil, fmt.Errorf("slurmd -G: more than %d GRES records", maxGRESItems)
		}
		var r GRESRecord
		var files string
		for f := range strings.FieldsSeq(rest) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "Name":
				r.Name, r.GPU = v, f == "Name=gpu"
			case "Type":
				if v != "(null)" {
					r.Type = v
				}
			case "Count":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > maxGRESIndex {
					return nil, fmt.Errorf("slurmd -G: bad count in %q", clip(line))
				}
				r.Count = n
			case "File":
				files = v
			}
		}
		if r.Name == "" {
			return nil, fmt.Errorf("slurmd -G: no name in %q", clip(line))
		}
		if files != "" && files != "(null)" {
			fs, err := ExpandHostlist(files)
			if err != nil {
				return nil, fmt.Errorf("slurmd -G: files of %q: %w", clip(line), err)
			}
			r.Files = fs
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// IndexedGPUs returns, for each index slurmctld gives the node's GPUs,
// the device files that index stands for.
func IndexedGPUs(recs []GRESRecord) ([][]string, error) {
	var out [][]string
	for _, r := range recs {
		if !r.GPU {
			continue
		}
		switch {
		case r.Count == 1 && len(r.Files) > 0:
			out = append(out, r.Files)
		case r.Count == len(r.Files):
			for _, f := range r.Files {
				out = append(out, []string{f})
			}
		default:
			// Which file an index has is unknown from here on.
			return nil, fmt.Errorf("GRES %s:%s has %d units and %d files", r.Name, r.Type, r.Count, len(r.Files))
		}
	}
	return out, nil
}

// NodeGRES runs `slurmd -G` (for node, with -N, when it is set): the
// node's GRES configuration as slurmd itself loads it.
func (c *Commands) NodeGRES(ctx context.Context, node string) ([]GRESRecord, error) {
	slurmd := c.Slurmd
	if slurmd == "" {
		slurmd = "slurmd"
	}
	args := []string{"-G"}
	if node != "" {
		if !validNode(node) {
			return nil, fmt.Errorf("invalid node name %q", node)
		}
		args = append(args, "-N", node)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.execTo(ctx, true, slurmd, args...)
	if err != nil {
		return nil, err
	}
	return ParseSlurmdG(out)
}

func validNode(s string) bool {
	if s == "" || len(s) > 128 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
