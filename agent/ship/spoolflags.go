package ship

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/slurmscope/slurmscope/agent/spool"
	"github.com/slurmscope/slurmscope/internal/units"
)

// SpoolFlags are a backend's spool as its flags set it: the directory and
// the bound. Every spooled backend takes them, under its own prefix.
type SpoolFlags struct {
	Dir      string
	MaxBytes int64
	dirFlag  string
}

// Register adds --<prefix>spool-dir and --<prefix>spool-max-bytes with
// defaults dir and maxBytes; what says what waits there ("pushes waiting
// for Pyroscope").
func (s *SpoolFlags) Register(fs *flag.FlagSet, prefix, dir string, maxBytes int64, what string) {
	s.dirFlag = prefix + "spool-dir"
	fs.StringVar(&s.Dir, s.dirFlag, dir, "on-disk queue of "+what)
	fs.Var(units.NewBytes(&s.MaxBytes, maxBytes), prefix+"spool-max-bytes",
		"bound of --"+s.dirFlag+"; the oldest entries are dropped (and counted) past it")
}

// Check refuses a bound no spool can keep (spool.Open's own floor: one
// entry's header), before anything starts.
func (s *SpoolFlags) Check() error {
	if s.MaxBytes <= spool.MinBytes {
		return fmt.Errorf("--%s %d: must be more than %d bytes (e.g. 256MiB)", strings.TrimSuffix(s.dirFlag, "dir")+"max-bytes", s.MaxBytes, spool.MinBytes)
	}
	return nil
}

// Open opens the spool, to be the one reader of its directory: another
// agent, or another backend's flag naming the same directory, is refused.
func (s *SpoolFlags) Open(log *slog.Logger) (*spool.Spool, error) {
	var opts []spool.Option
	if log != nil {
		opts = append(opts, spool.WithLogger(log))
	}
	sp, err := spool.Open(s.Dir, s.MaxBytes, opts...)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", s.dirFlag, err)
	}
	return sp, nil
}
