// Package sink delivers the agent's profiles: to files on disk (the default
// with no server, readable by go tool pprof, and summarised by ReadDir) or
// to Pyroscope through the bounded spool.
package sink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	pushv1 "github.com/grafana/pyroscope/api/gen/proto/go/push/v1"

	"github.com/slurmscope/slurmscope/agent/daemon"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
	"github.com/slurmscope/slurmscope/schema"
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

// Push spools one push request per profile: a request the server rejects
// then costs one job's interval, not everyone's.
type Push struct{ Shipper *pyroscope.Shipper }

var _ daemon.Sink = (*Push)(nil)

// Write implements daemon.Sink.
func (p *Push) Write(_ context.Context, outs []daemon.Output) error {
	var errs []error
	for _, o := range outs {
		req, err := PushRequest(o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.Shipper.Enqueue(req); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// PushRequest is the push request of one profile: its series labels,
// service_name as the series' own.
func PushRequest(o daemon.Output) (*pushv1.PushRequest, error) {
	labels := map[string]string{}
	for _, l := range o.Labels {
		if l.Name != schema.ServiceName {
			labels[l.Name] = l.Value
		}
	}
	return pyroscope.NewPushRequest(pyroscope.Series{Name: o.Type.Name, ServiceName: o.ServiceName, Labels: labels, Profiles: [][]byte{o.Data}})
}
