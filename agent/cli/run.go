package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/slurmscope/slurmscope/agent/attribution"
	"github.com/slurmscope/slurmscope/agent/procfs"
	"github.com/slurmscope/slurmscope/agent/service"
)

func init() {
	extraCommands["run"] = runCmd
	summaries["run"] = "profile this node: CPU stacks (eBPF), GPU metrics (NVML), GPU kernels, jobs' cgroups; push or write per-job profiles"
}

func runCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	// A bad value is said once, in one line, not followed by every flag's
	// help; --help prints the help.
	fs.SetOutput(io.Discard)
	var f runFlags
	f.register(fs)
	fs.Usage = func() { printRunHelp(fs.Output(), fs) }
	if rc, done := parseArgs(fs, args, stderr); done {
		return rc
	}
	if err := f.check(); err != nil {
		// One line, whatever the error wraps (a YAML error's lines).
		fmt.Fprintf(stderr, "run: %s\n", strings.Join(strings.Fields(err.Error()), " "))
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "run: --log-level: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, log); err != nil {
		log.Error("agent stopped", "err", err)
		// Say which privileges are missing, as check would.
		if r := checkPrivileges(&checkEnv{f: &f, fs: fs, arch: runtime.GOARCH}); r.Status == statusFail {
			log.Error("the agent lacks privileges", "found", r.Found, "hint", r.Hint)
		}
		return 1
	}
	return 0
}

// resolver is run's attribution: an exited process outlives its last
// drain, and with --rank-labels each job process's rank is read.
func (f *runFlags) resolver(log *slog.Logger) (*attribution.Resolver, error) {
	f.attr.exitGrace = 2*f.interval + time.Minute
	f.attr.log = log
	f.attr.ranks = f.rankLabels
	return f.attr.resolver()
}

// run opens the services, then the profiler, and runs them until ctx is
// done. The profiler stops first: its last interval is written before
// metrics stop being served and pushed.
func run(ctx context.Context, f runFlags, log *slog.Logger) (err error) {
	res, err := f.resolver(log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	beat := newHeartbeat(res.HostName(), time.Now)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		attribution.NewCollector(res), beat)
	env := service.Env{Jobs: res, HostName: res.HostName(), Proc: procfs.New(f.attr.procRoot), Reg: reg, Gatherer: reg, Log: log}
	svcs, err := service.Open(f.services, env)
	if err != nil {
		return err
	}
	defer func() {
		if serr := svcs.Stop(); err == nil {
			err = serr
		}
	}()
	prof, err := newProfiler(f, env)
	if err != nil {
		return err
	}
	if prof == nil {
		beat.serveOnly()
	} else {
		beat.follow(prof.d)
	}
	// Everything registered its metrics: /metrics may be served.
	svcs.Start()
	if prof == nil {
		f.ready.Store(true)
		log.Info("CPU profiling off and no other profile source on; serving metrics only", "node", res.HostName())
		<-ctx.Done()
		return nil
	}
	defer prof.close()
	return prof.run(ctx, log)
}
