// Package sink writes the agent's profiles to files on disk, readable by go
// tool pprof and summarised by ReadDir: the delivery backend of
// --output-dir, and the one profiles go to when no other is set.
package sink

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/service"
)

// NoJobDir holds profiles of processes in no job.
const NoJobDir = "_nojob"

// Dir writes DIR/<job id>/<profile>-<unix seconds>.pb.gz.
type Dir struct{ Root string }

var _ daemon.Sink = (*Dir)(nil)

// Write implements daemon.Sink. Each file is written to a temporary name
// and renamed, so a reader never sees half a profile.
func (d *Dir) Write(_ context.Context, outs []daemon.Output) error {
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
		}
	}
	return errors.Join(errs...)
}

// writeNew writes data under base+ext, or base-1+ext, ... if an earlier
// interval ended in the same second (a flush right after a tick).
func writeNew(dir, base, ext string, data []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-*")
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

var _ daemon.Sink = Multi(nil)

// Write implements daemon.Sink.
func (m Multi) Write(ctx context.Context, outs []daemon.Output) error {
	var errs []error
	for _, s := range m {
		errs = append(errs, s.Write(ctx, outs))
	}
	return errors.Join(errs...)
}

// DefaultDir is where profiles go when no delivery backend is set.
const DefaultDir = "/var/lib/slurmscope/profiles"

// Kind writes profiles to --output-dir; where no other delivery backend is
// set, to DefaultDir.
type Kind struct{ root string }

var _ service.Fallback = (*Kind)(nil)

// Flags registers --output-dir.
func (k *Kind) Flags(fs *flag.FlagSet) {
	fs.StringVar(&k.root, "output-dir", "", "write profiles as DIR/<job id>/<type>-<unix>.pb.gz (default "+DefaultDir+" when no --pyroscope-url)")
}

// Check has nothing to check before the directory is made.
func (k *Kind) Check() error { return nil }

// Open writes to --output-dir when it is set.
func (k *Kind) Open(service.Env) (service.Service, error) {
	if k.root == "" {
		return nil, nil
	}
	return openDir(k.root)
}

// OpenFallback writes to --output-dir, or to DefaultDir.
func (k *Kind) OpenFallback(service.Env) (service.Service, error) {
	if k.root == "" {
		return openDir(DefaultDir)
	}
	return openDir(k.root)
}

func openDir(root string) (*dirService, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("--output-dir: %w", err)
	}
	return &dirService{Dir{Root: root}}, nil
}

// dirService is Dir as a service: it writes as the daemon calls it, and
// has nothing to run.
type dirService struct{ Dir }

var (
	_ daemon.Sink     = (*dirService)(nil)
	_ service.Service = (*dirService)(nil)
)

func (*dirService) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (d *dirService) String() string { return "output-dir " + d.Root }
