// Package sink writes the agent's profiles to files on disk, readable by go
// tool pprof and summarised by ReadDir: the delivery backend of
// --output-dir, and the one profiles go to when no other is set.
package sink

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/logx"
	"github.com/slurmscope/slurmscope/agent/service"
	"github.com/slurmscope/slurmscope/internal/units"
)

// NoJobDir holds profiles of processes in no job.
const NoJobDir = "_nojob"

// Dir writes DIR/<job id>/<profile>-<unix seconds>.pb.gz.
type Dir struct{ Root string }

var _ daemon.Sink = (*Dir)(nil)

// Write implements daemon.Sink. Each file is written to a temporary name
// and renamed, so a reader never sees half a profile.
func (d *Dir) Write(_ context.Context, outs []daemon.Output) error {
	_, err := d.write(outs)
	return err
}

// write writes outs and says how many bytes of profiles it wrote.
func (d *Dir) write(outs []daemon.Output) (written uint64, _ error) {
	var errs []error
	for _, o := range outs {
		dir := NoJobDir
		suffix := ""
		if o.JobID != "" {
			dir = safeName(o.JobID)
		} else {
			// Several executables per interval outside jobs: one file each.
			suffix = "." + safeName(o.ServiceName)
		}
		full := filepath.Join(d.Root, dir)
		if err := os.MkdirAll(full, 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		base := fmt.Sprintf("%s-%d%s", o.Type.Name, o.End.Unix(), suffix)
		if err := writeNew(full, base, ".pb.gz", o.Data); err != nil {
			errs = append(errs, err)
		} else {
			written += uint64(len(o.Data)) // #nosec G115 -- a length, never negative
		}
	}
	// One line however many profiles failed alike (a full disk).
	return written, logx.Join(errs...)
}

// writeNew writes data under base+ext, or base-1+ext, ... if an earlier
// interval ended in the same second (a flush right after a tick).
func writeNew(dir, base, ext string, data []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if errors.Is(err, fs.ErrNotExist) {
		// The retention's prune removed the job's emptied directory
		// between Write's MkdirAll and here: made again, not lost.
		if err = os.MkdirAll(dir, 0o755); err == nil {
			tmp, err = os.CreateTemp(dir, ".tmp-*")
		}
	}
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	for i := 0; i < 1000; i++ {
		name := base + ext
		if i > 0 {
			name = fmt.Sprintf("%s-%d%s", base, i, ext)
		}
		// Link fails if the name exists, so nothing is overwritten.
		err := os.Link(tmp.Name(), filepath.Join(dir, name))
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	return fmt.Errorf("%s: no free file name", filepath.Join(dir, base))
}

// safeName keeps a path component to [A-Za-z0-9._-]: job ids are digits
// (or s<SLUID>), but a directory name must never be able to climb out.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 64 {
			break
		}
	}
	if b.Len() == 0 {
		return "unknown"
	}
	return b.String()
}

// Multi writes to every sink and reports every failure.
type Multi []daemon.Sink

var (
	_ daemon.Sink     = Multi(nil)
	_ daemon.Reporter = Multi(nil)
)

// Write implements daemon.Sink.
func (m Multi) Write(ctx context.Context, outs []daemon.Output) error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Write(ctx, outs))
	}
	return logx.Join(errs...)
}

// Delivery implements daemon.Reporter: the sum of what its sinks report.
func (m Multi) Delivery() daemon.Delivery {
	var sum daemon.Delivery
	for _, s := range m {
		if d, ok := daemon.DeliveryOf(s); ok {
			sum = sum.Add(d)
		}
	}
	return sum
}

// DefaultDir is where profiles go when no delivery backend is set.
const DefaultDir = "/var/lib/slurmscope/profiles"

// Kind writes profiles to --output-dir; where no other delivery backend is
// set, to DefaultDir.
type Kind struct {
	root string
	keep Retention
}

var _ service.Fallback = (*Kind)(nil)

// Flags registers --output-dir.
func (k *Kind) Flags(fs *flag.FlagSet) {
	fs.StringVar(&k.root, "output-dir", "", "write profiles as DIR/<job id>/<type>-<unix>.pb.gz (default "+DefaultDir+" when no --pyroscope-url)")
	fs.Var(units.NewDuration(&k.keep.MaxAge, 0), "output-retention", "remove profiles in the output directory older than this (e.g. 7d, 36h; 0: keep them)")
	fs.Var(units.NewBytes(&k.keep.MaxBytes, 0), "output-max-bytes", "remove the oldest profiles while the output directory holds more than this (e.g. 10GiB; 0: no bound)")
}

// Check rejects a negative bound (a duration may be negative; the size
// flag refuses one, and a Kind made in code is checked too), and an
// --output-dir the agent cannot write: a configuration error before
// anything loads, not a warning later and no profiles ever.
func (k *Kind) Check() error {
	if k.keep.MaxAge < 0 || k.keep.MaxBytes < 0 {
		return errors.New("--output-retention and --output-max-bytes cannot be negative")
	}
	if k.root == "" {
		return nil
	}
	return writable(k.root)
}

// writable makes dir and proves a file can be created in it.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--output-dir: %w", err)
	}
	probe, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("--output-dir %s is not writable: %w", dir, err)
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// Open writes to --output-dir when it is set.
func (k *Kind) Open(env service.Env) (service.Service, error) {
	if k.root == "" {
		return nil, nil
	}
	return openDir(k.root, k.keep, env)
}

// OpenFallback writes to --output-dir, or to DefaultDir.
func (k *Kind) OpenFallback(env service.Env) (service.Service, error) {
	if k.root == "" {
		return openDir(DefaultDir, k.keep, env)
	}
	return openDir(k.root, k.keep, env)
}

// openDir makes root (the fallback's is checked here) and proves it
// writable.
func openDir(root string, keep Retention, env service.Env) (*dirService, error) {
	if err := writable(root); err != nil {
		return nil, err
	}
	return &dirService{Dir: Dir{Root: root}, keep: keep, log: env.Log}, nil
}

// dirService is Dir as a service: it writes as the daemon calls it, and
// prunes the directory to its retention.
type dirService struct {
	Dir
	keep    Retention
	log     *slog.Logger
	written atomic.Uint64 // bytes of profiles written
}

var (
	_ daemon.Sink     = (*dirService)(nil)
	_ daemon.Reporter = (*dirService)(nil)
	_ service.Service = (*dirService)(nil)
)

// Write implements daemon.Sink, counting what it wrote.
func (d *dirService) Write(_ context.Context, outs []daemon.Output) error {
	n, err := d.write(outs)
	d.written.Add(n)
	return err
}

// Delivery implements daemon.Reporter: bytes written; no spool, no drops.
func (d *dirService) Delivery() daemon.Delivery { return daemon.Delivery{Bytes: d.written.Load()} }

func (d *dirService) Run(ctx context.Context) error {
	if d.keep == (Retention{}) {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(pruneEvery)
	defer t.Stop()
	for {
		if n, b, err := prune(d.Root, d.keep, time.Now()); err != nil && d.log != nil {
			d.log.Warn("pruning the output directory", "dir", d.Root, "removed_files", n, "removed_bytes", b, "err", err)
		} else if n > 0 && d.log != nil {
			d.log.Debug("pruned the output directory", "dir", d.Root, "removed_files", n, "removed_bytes", b)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (d *dirService) String() string { return "output-dir " + d.Root }
