package slurm

import (
	"fmt"
	"strconv"
	"strings"
)

// GRES is a generic resource a job holds on one node, as slurmctld records
// it ("gpu:h100:2(IDX:0-1)"): which of the node's GRES of that name, by
// index, the job was given. The index is the record's position in the
// node's GRES configuration (NodeGRES), not a device number.
type GRES struct {
	Name  string // "gpu", "shard", ...
	Type  string // "h100", "3g.40gb"; "" when untyped
	Count int
	Index []int
	GPU   bool // the gpu GRES
}

// Limits on what one job's record may say; real nodes have a few dozen
// GRES at most.
const (
	maxGRESIndex = 4096
	maxGRESItems = 256
)

// ParseGRESDetail parses one node's GRES of a job, as squeue's gres_detail
// and scontrol show job -d print them: comma-separated
// name[:type]:count(IDX:list) items, where the list is itself
// comma-separated ranges. Items without an index (a count-only GRES) are
// kept with a nil Index. No GRES is an empty, non-nil list: the record
// says the job holds none.
func ParseGRESDetail(s string) ([]GRES, error) {
	out := []GRES{}
	for _, item := range splitOutside(s, ',') {
		item = strings.TrimSpace(item)
		if item == "" || item == "(null)" {
			continue
		}
		if len(out) >= maxGRESItems {
			return nil, fmt.Errorf("GRES %q: more than %d items", clip(s), maxGRESItems)
		}
		g, err := parseGRESItem(item)
		if err != nil {
			return nil, fmt.Errorf("GRES %q: %w", clip(s), err)
		}
		out = append(out, g)
	}
	return out, nil
}

func parseGRESItem(item string) (GRES, error) {
	spec, idx, hasIdx := strings.Cut(item, "(")
	parts := strings.Split(spec, ":")
	var g GRES
	switch len(parts) {
	case 2:
		g.Name = parts[0]
	case 3:
		g.Name, g.Type = parts[0], parts[1]
	default:
		return GRES{}, fmt.Errorf("item %q: want name[:type]:count", item)
	}
	n, err := strconv.Atoi(parts[len(parts)-1])
	if err != nil || n < 0 || n > maxGRESIndex || g.Name == "" {
		return GRES{}, fmt.Errorf("item %q: bad count", item)
	}
	g.Count, g.GPU = n, strings.HasPrefix(item, "gpu:")
	if !hasIdx {
		return g, nil
	}
	list, ok := strings.CutPrefix(idx, "IDX:")
	if !ok {
		// "(S:0-1)" and other annotations name sockets, not devices.
		return g, nil
	}
	list, ok = strings.CutSuffix(list, ")")
	if !ok {
		return GRES{}, fmt.Errorf("item %q: unclosed index list", item)
	}
	if g.Index, err = parseIndexList(list); err != nil {
		return GRES{}, fmt.Errorf("item %q: %w", item, err)
	}
	return g, nil
}

// parseIndexList parses "0-1,3" into its indexes.
func parseIndexList(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := index(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = index(hi); err != nil || b < a {
				return nil, fmt.Errorf("bad range %q", part)
			}
		}
		if len(out)+b-a+1 > maxGRESIndex {
			return nil, fmt.Errorf("more than %d indexes", maxGRESIndex)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

func index(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= maxGRESIndex || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("bad index %q", s)
	}
	return n, nil
}

// splitOutside splits s at sep where it is not inside parentheses.
func splitOutside(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// maxHosts bounds a hostlist's expansion.
const maxHosts = 65536

// ExpandHostlist expands a Slurm hostlist ("gpu[01-03,7],login1",
// "rack[1-2]-n[1-2]") into host names.
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	for _, part := range splitOutside2(s) {
		if part == "" {
			continue
		}
		hosts, err := expandOne(part)
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", clip(s), err)
		}
		if len(out)+len(hosts) > maxHosts {
			return nil, fmt.Errorf("hostlist %q: more than %d hosts", clip(s), maxHosts)
		}
		out = append(out, hosts...)
	}
	return out, nil
}

// splitOutside2 splits a hostlist at commas outside brackets.
func splitOutside2(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// expandOne expands one host expression with any number of bracket groups.
func expandOne(s string) ([]string, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		if strings.ContainsAny(s, "]") {
			return nil, fmt.Errorf("unbalanced brackets")
		}
		return []string{s}, nil
	}
	end := strings.IndexByte(s[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("unbalanced brackets")
	}
	end += open
	prefix, body, rest := s[:open], s[open+1:end], s[end+1:]
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for r := range strings.SplitSeq(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a < 0 || b < a {
			return nil, fmt.Errorf("bad range %q", r)
		}
		if (b-a+1)*len(tails)+len(out) > maxHosts {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		for i := a; i <= b; i++ {
			num := strconv.Itoa(i)
			for len(num) < len(lo) { // zero padding, as in gpu[01-03]
				num = "0" + num
			}
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
