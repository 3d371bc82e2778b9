package attribution

import (
	"context"
	"errors"
	"log/slog"

	"github.com/slurmscope/slurmscope/agent/cgroup"
	"github.com/slurmscope/slurmscope/agent/logx"
)

// maxPathLog bounds a cgroup path in a log line: a look-alike's is the
// user's to choose.
const maxPathLog = 256

// logNew says at debug level why a process new to the cache (or placed
// anew) is in a job, or why its Slurm-looking cgroup put it in none: what
// an admin asks when a job's process has no profile. Processes outside
// anything Slurm-like say nothing: they are most of a node.
func (r *Resolver) logNew(pid int, comm string, loc cgroup.Location, perr error, foreign bool, j *jobEntry) {
	ctx := context.Background()
	if !r.o.Log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.Int("pid", pid), slog.String("comm", comm)}
	var ref *cgroup.Refused
	switch {
	case loc.InJob:
		job := loc.JobID
		if j != nil {
			if s := j.snap.Load(); s != nil {
				job = s.ID
			}
		}
		if job == "" {
			job = "s" + loc.SLUID
		}
		attrs = append(attrs, slog.String("job", job), slog.String("step", loc.Step), slog.String("task", loc.Task),
			slog.String("why", "cgroup"), slog.String("cgroup", logx.Line(loc.Path, maxPathLog)))
		msg := "process in a job"
		if foreign {
			msg = "process in another node's job; not profiled here"
			attrs = append(attrs, slog.String("node", loc.Node))
		}
		r.o.Log.LogAttrs(ctx, slog.LevelDebug, msg, attrs...)
	case errors.As(perr, &ref):
		attrs = append(attrs, slog.String("reason", ref.Reason), slog.String("cgroup", logx.Line(ref.Path, maxPathLog)),
			slog.String("detail", logx.Line(ref.Detail, maxPathLog)))
		r.o.Log.LogAttrs(ctx, slog.LevelDebug, "process refused: its cgroup looks like Slurm's but is not; in no job", attrs...)
	case perr != nil:
		attrs = append(attrs, slog.String("err", logx.Err(perr)))
		r.o.Log.LogAttrs(ctx, slog.LevelDebug, "process refused: its Slurm cgroup path cannot be read; in no job", attrs...)
	}
}
