package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/budget"
	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/interp"
	"github.com/slurmscope/slurmscope/agent/nvtx"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/source"
	"github.com/slurmscope/slurmscope/agent/stackwalk"
	"github.com/slurmscope/slurmscope/agent/symbolize"
	"github.com/slurmscope/slurmscope/agent/unwind"
	"github.com/slurmscope/slurmscope/internal/units"
)

// stackFlags are the flags of the stack capture every source's probe
// shares.
type stackFlags struct {
	unwind       string
	interps      interpFlags
	labelSetup   bool
	unwindBudget int64
	nvtx         bool
}

func (f *stackFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.unwind, "unwind", "auto", "user stacks: auto (from the .eh_frame unwind tables of each mapped file, frame pointers where a file has none; x86-64) or fp (frame pointers only)")
	f.interps = interpFlags{}
	f.interps.register(fs)
	fs.BoolVar(&f.labelSetup, "label-stack-setup", false, "label each sample with what of the stack capture was set up for its process (stack_setup): a diagnostic for checking unwinding, which splits series")
	fs.BoolVar(&f.nvtx, "nvtx-ranges", true, "show the NVTX ranges open on a thread (kept by libslurmscope_inject.so, which the job loads through NVTX_INJECTION64_PATH) as \"[nvtx] name\" frames at the root of its CPU samples and of the GPU kernels it launches")
	fs.Var(units.NewBytes(&f.unwindBudget, unwind.DefaultMaxTableBytes), "unwind-table-bytes", "bound of the unwind tables in kernel memory; the least recently used are evicted past it (their frames fall back to frame pointers)")
}

func (f *stackFlags) check() error {
	if f.unwind != "auto" && f.unwind != "fp" {
		return fmt.Errorf("--unwind %q: want auto or fp", f.unwind)
	}
	if f.unwindBudget <= 0 {
		return errors.New("--unwind-table-bytes must be positive")
	}
	return nil
}

// stacks is the one stack capture for every source's probe: the unwind
// tables and the interpreter state of the processes the agent profiles.
type stacks struct {
	walker     *stackwalk.Walker
	nvtx       *nvtx.Tracker // nil: --nvtx-ranges=false
	names      *nvtx.Names
	labelSetup bool
}

// newStacks starts the stack capture. A process the probes meet before a
// rescan is admitted at once, as a rescan would (d holds the daemon once
// the sources exist).
func newStacks(f runFlags, proc procfs.FS, sym *symbolize.Symbolizer, res *attribution.Resolver, d *atomic.Pointer[daemon.Daemon], bud *budget.Budget, work *budget.Work, owner func(procfs.ID) string, log *slog.Logger) (*stacks, error) {
	// NVTX ranges are no interpreter: an annotation of every process's
	// threads, named from what each process announced (agent/nvtx).
	var names *nvtx.Names
	var annotators []interp.Annotator
	if f.nvtx {
		names = nvtx.NewNames(nvtx.NamesOptions{Budget: bud, Owner: owner})
		annotators = append(annotators, names)
	}
	walker, err := stackwalk.New(stackwalk.Options{Proc: proc, Tables: f.unwind == "auto", Interpreters: f.interps.enabled(), Annotators: annotators,
		Remapped: sym.Refresh, Work: work, Owner: owner,
		MaxTableBytes: f.unwindBudget, ExitGrace: 2*f.interval + time.Minute, Log: log,
		Profiled: func(id procfs.ID) bool {
			if dm := d.Load(); dm != nil {
				return dm.Admit(id)
			}
			// Before the daemon starts: its first scan admits the process.
			p, ok := res.Cached(id)
			if !ok {
				var err error
				if p, err = res.Resolve(id.PID); err != nil {
					return false
				}
			}
			return p.ID == id && !p.Foreign && (p.InJob() || f.allProcesses)
		}})
	if err != nil {
		return nil, fmt.Errorf("starting the stack unwinder (needs root, BTF and Linux 5.8 or later; slurmscope-agent check says what this node lacks): %w", err)
	}
	s := &stacks{walker: walker, names: names, labelSetup: f.labelSetup}
	if names != nil {
		if s.nvtx, err = nvtx.New(nvtx.Options{Proc: proc, Stacks: walker, Names: names, ExcludePID: os.Getpid(), Log: log}); err != nil {
			walker.Close()
			return nil, fmt.Errorf("starting the NVTX range probes (--nvtx-ranges=false turns them off): %w", err)
		}
	}
	return s, nil
}

func (s *stacks) Close() error {
	var err error
	if s.nvtx != nil {
		err = s.nvtx.Close()
	}
	return errors.Join(err, s.walker.Close())
}

// forSources gives the sources' probes the stack capture.
func (s *stacks) forSources(env *source.Env) { env.Stacks = s.walker }

// started exports the capture's metrics and logs how it unwinds, once a
// source uses it.
func (s *stacks) started(reg prometheus.Registerer, log *slog.Logger) {
	reg.MustRegister(s.walker.Collectors()...)
	if s.nvtx != nil {
		reg.MustRegister(nvtx.Collectors(s.names, s.nvtx)...)
	}
	log.Info("capturing user stacks", "unwind", map[bool]string{true: "tables", false: "frame pointers"}[s.walker.Tables()],
		"frame_pointers_because", s.walker.FramePointerReason(), "interpreters", s.walker.Interpreters(), "nvtx_ranges", s.nvtx != nil)
}

// forDaemon has the daemon tell the capture of every process it profiles.
func (s *stacks) forDaemon(cfg *daemon.Config) {
	cfg.Watchers = append(cfg.Watchers, source.ProcessAttacher(s.walker))
	if s.nvtx != nil {
		cfg.Watchers = append(cfg.Watchers, s.nvtx)
	}
	cfg.LabelStackSetup = s.labelSetup
}
