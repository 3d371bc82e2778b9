package gpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/gpu/devcg"
	"github.com/slurmscope/slurmscope/agent/slurm"
)

// Which GPUs a job holds comes from Slurm, never from the job: the device
// program slurmstepd attaches to the job's cgroup (cgroup v2 with
// ConstrainDevices=yes), or slurmctld's record of the job's GRES mapped to
// device files through the node's GRES configuration. Both name device
// numbers; the node's device files say which GPU or MIG instance each is.

// DevNum is a character device's number.
type DevNum struct{ Major, Minor uint32 }

// Grants says which devices Slurm gave a job on this node.
type Grants interface {
	// Grant returns which of the node's GPU devices (candidates) Slurm
	// gave the job, and which source said so; ok is false when no source
	// knows, and the job then holds nothing.
	Grant(ctx context.Context, j *attribution.Job, candidates []DevNum) (granted map[DevNum]bool, source string, ok bool, err error)
}

// Grant sources, as Grants name them.
const (
	SourceDeviceCgroup = "device_cgroup"
	SourceSlurmctld    = "slurmctld"
)

// NodeGRES reads the node's GRES configuration (slurm.Commands does, with
// slurmd -G).
type NodeGRES interface {
	NodeGRES(ctx context.Context, node string) ([]slurm.GRESRecord, error)
}

// SlurmGrants reads grants from the job's device cgroup, and failing that
// from slurmctld's record (attribution.Job.GRES, present with
// --slurmctld).
type SlurmGrants struct {
	// CgroupV2 is the v2 hierarchy's mount; "" reads no device programs.
	CgroupV2 string
	// Config is the node's GRES configuration; nil leaves slurmctld's
	// record unused.
	Config NodeGRES
	// Node is the NodeName slurmd -G is asked about ("": slurmd's own).
	Node string
	// ConfigTTL is how long a GRES configuration is kept; default 10 min.
	ConfigTTL time.Duration

	mu    sync.Mutex
	progs map[ebpf.ProgramID]*devcg.Program
	// used is when each cached program was last read, so that the cache
	// keeps only the programs of the jobs that still run.
	used     map[ebpf.ProgramID]time.Time
	pruned   time.Time
	recs     [][]string // device files per GRES index
	recsErr  error
	recsAt   time.Time
	fileDevs map[string]DevNum
}

var _ Grants = (*SlurmGrants)(nil)

// Grant implements Grants.
func (g *SlurmGrants) Grant(ctx context.Context, j *attribution.Job, candidates []DevNum) (map[DevNum]bool, string, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	if g.CgroupV2 != "" && j.Cgroup != "" {
		if g.progs == nil {
			g.progs, g.used = map[ebpf.ProgramID]*devcg.Program{}, map[ebpf.ProgramID]time.Time{}
		}
		p, id, err := devcg.Read(filepath.Join(g.CgroupV2, j.Cgroup), g.progs)
		if now := time.Now(); err == nil {
			g.used[id] = now
			if now.Sub(g.pruned) >= progPrune {
				pruneProgs(g.progs, g.used, now.Add(-progTTL))
				g.pruned = now
			}
		}
		if err == nil {
			out := map[DevNum]bool{}
			for _, d := range candidates {
				if p.Allows(d.Major, d.Minor) {
					out[d] = true
				}
			}
			return out, SourceDeviceCgroup, true, nil
		}
		if !errors.Is(err, devcg.ErrNone) && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("job %s: device cgroup: %w", j.ID, err))
		}
	}
	if g.Config != nil && j.GRES != nil {
		idx, err := g.indexed(ctx)
		if err != nil {
			return nil, "", false, errors.Join(append(errs, fmt.Errorf("job %s: node GRES configuration: %w", j.ID, err))...)
		}
		out := map[DevNum]bool{}
		for _, gr := range j.GRES {
			if !gr.GPU {
				continue
			}
			for _, i := range gr.Index {
				if i >= len(idx) {
					errs = append(errs, fmt.Errorf("job %s: GRES index %d, the node configures %d GPUs", j.ID, i, len(idx)))
					continue
				}
				for _, f := range idx[i] {
					d, err := g.fileDev(f)
					if err != nil {
						errs = append(errs, fmt.Errorf("job %s: %w", j.ID, err))
						continue
					}
					out[d] = true
				}
			}
		}
		return out, SourceSlurmctld, true, errors.Join(errs...)
	}
	return nil, "", false, errors.Join(errs...)
}

// A cached device program is dropped once no job has used it for
// progTTL: each job's slurmstepd attaches its own, and a node runs
// thousands of jobs a day. The cache is looked over every progPrune.
const (
	progTTL   = 10 * time.Minute
	progPrune = time.Minute
)

// pruneProgs drops the programs last used before cutoff.
func pruneProgs(progs map[ebpf.ProgramID]*devcg.Program, used map[ebpf.ProgramID]time.Time, cutoff time.Time) {
	for id := range progs {
		if at, ok := used[id]; !ok || at.Before(cutoff) {
			delete(progs, id)
			delete(used, id)
		}
	}
}

// indexed is the node's GPU device files per GRES index, from slurmd -G,
// kept for ConfigTTL.
func (g *SlurmGrants) indexed(ctx context.Context) ([][]string, error) {
	ttl := g.ConfigTTL
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	if !g.recsAt.IsZero() && time.Since(g.recsAt) < ttl {
		return g.recs, g.recsErr
	}
	g.recsAt = time.Now()
	g.fileDevs = map[string]DevNum{}
	recs, err := g.Config.NodeGRES(ctx, g.Node)
	if err == nil {
		g.recs, err = slurm.IndexedGPUs(recs)
	}
	g.recsErr = err
	return g.recs, err
}

// fileDev is the device number of a device file gres.conf names.
func (g *SlurmGrants) fileDev(path string) (DevNum, error) {
	if d, ok := g.fileDevs[path]; ok {
		return d, nil
	}
	d, err := charDevice(path)
	if err == nil {
		g.fileDevs[path] = d
	}
	return d, err
}

// charDevice is the number of the character device at path, not following
// a link.
func charDevice(path string) (DevNum, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return DevNum{}, &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return DevNum{}, fmt.Errorf("%s is not a character device", path)
	}
	return DevNum{unix.Major(st.Rdev), unix.Minor(st.Rdev)}, nil
}

// Devices names the node's GPU device files.
type Devices struct {
	// Root is the directory of the device files: /dev (nvidia<minor>,
	// nvidia-caps/nvidia-cap<minor>).
	Root string
	// MIGMinors is the driver's table of MIG capability minors,
	// /proc/driver/nvidia-caps/mig-minors.
	MIGMinors string
	// Lookup returns the number of the character device at a path; nil
	// reads the file (lstat). Unit tests, which cannot make device nodes,
	// number stand-in paths.
	Lookup func(path string) (DevNum, error)
}

// migAccess is a GPU instance's access capability: gpu<gpu>/gi<gi>/access.
type migAccess struct{ gpu, gi int }

// maxMIGMinorsBytes bounds the driver's table: a line per capability, a
// few thousand at most.
const maxMIGMinorsBytes = 1 << 20

// readMIGMinors parses the driver's mig-minors table: "gpu<N>/gi<G>/access
// <minor>" for each GPU instance, beside compute-instance, config and
// monitor lines that grants do not need.
func readMIGMinors(path string) (map[migAccess]uint32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[migAccess]uint32{}
	sc := bufio.NewScanner(io.LimitReader(f, maxMIGMinorsBytes))
	for sc.Scan() {
		var a migAccess
		var minor uint32
		var rest string
		// Compute-instance lines (gpu0/gi1/ci0/access) do not scan.
		n, _ := fmt.Sscanf(sc.Text(), "gpu%d/gi%d/access %d%s", &a.gpu, &a.gi, &minor, &rest)
		if n != 3 || a.gpu < 0 || a.gi < 0 || minor >= 1<<20 {
			continue
		}
		out[a] = minor
	}
	return out, sc.Err()
}

// nodeDevices is which device stands for which unit, this poll.
type nodeDevices struct {
	whole map[DevNum]unitKey // /dev/nvidia<minor>: the GPU
	mig   map[DevNum]unitKey // a GPU instance's access capability
}

func (n *nodeDevices) candidates() []DevNum {
	out := make([]DevNum, 0, len(n.whole)+len(n.mig))
	for d := range n.whole {
		out = append(out, d)
	}
	for d := range n.mig {
		out = append(out, d)
	}
	return out
}

// units turns granted devices into units. A GPU in MIG mode is held by
// instance: its own device is granted with every instance of it, so it
// stands for the whole GPU only when no instance of it is granted.
func (n *nodeDevices) units(granted map[DevNum]bool, migOn map[string]bool) map[unitKey]bool {
	out := map[unitKey]bool{}
	held := map[string]bool{}
	for d := range granted {
		if u, ok := n.mig[d]; ok {
			out[u] = true
			held[u.uuid] = true
		}
	}
	for d := range granted {
		if u, ok := n.whole[d]; ok && !(migOn[u.uuid] && held[u.uuid]) {
			out[u] = true
		}
	}
	return out
}
