package main

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query"
	"github.com/slurmscope/slurmscope/grafana-plugin/pkg/query/backends"
)

// failedBackend names the one backend that every failure in err came
// from, or "" when both failed or anything else did (the call budget, a
// cancelled query): a report from the other backend alone would then hide
// a problem the user can fix.
func failedBackend(err error) string {
	names := map[string]bool{}
	if err == nil || !backendErrors(err, names) || len(names) != 1 {
		return ""
	}
	for n := range names {
		return n
	}
	return ""
}

// backendErrors adds the backends of err's failures to names, and says
// whether every one was a backend's.
func backendErrors(err error, names map[string]bool) bool {
	if be, ok := err.(*backends.Error); ok {
		names[be.Backend] = true
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if !backendErrors(e, names) {
				return false
			}
		}
		return true
	case interface{ Unwrap() error }:
		if e := u.Unwrap(); e != nil {
			return backendErrors(e, names)
		}
	}
	return false
}

// partialJob is the report of the backend that did not fail, with a note
// saying what is missing and why, where only one backend failed (see
// failedBackend). Its engine warns that the failed backend has no URL;
// the note replaces that warning, which would mislead.
func partialJob(ctx context.Context, eng *query.Engine, jobID string, r query.Range, err error, msg string) (*query.JobReport, error) {
	failed := failedBackend(err)
	rest := *eng
	var note, noURL string
	switch failed {
	case "pyroscope":
		rest.Profiles = nil
		note, noURL = "pyroscope failed, so this report has only Prometheus' part (no CPU functions, off-CPU waits or GPU kernels): ", "no Pyroscope URL"
	case "prometheus":
		rest.Metrics = nil
		note, noURL = "prometheus failed, so this report has only Pyroscope's part (no findings, host or GPU use): ", "no Prometheus URL"
	}
	if failed == "" || rest.Profiles == nil && rest.Metrics == nil {
		return nil, err
	}
	rep, err2 := rest.Job(ctx, jobID, r)
	if err2 != nil {
		return nil, errors.Join(err, err2)
	}
	rep.Warnings = slices.DeleteFunc(rep.Warnings, func(w string) bool { return strings.HasPrefix(w, noURL) })
	rep.Warnings = append([]string{note + strings.ReplaceAll(msg, "\n", "; ")}, rep.Warnings...)
	return rep, nil
}

// errorText is err's message for the user: the engine's advice in the
// CLI's terms, each line once (the report's parts fail alike).
func (o *jobOptions) errorText(err error) string {
	if err == nil {
		return ""
	}
	var lines []string
	for _, line := range strings.Split(o.explain(err.Error()), "\n") {
		if !slices.Contains(lines, line) {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}
