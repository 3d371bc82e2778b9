package pyroscope

import (
	"connectrpc.com/connect"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/ship"
)

// PushError is a failed push, classified for the shipper: Retryable, a
// Reason ("unavailable", "timeout", "rate_limited", "auth", "rejected"), the
// HTTP status and the server's Retry-After.
type PushError = ship.Error

// IsRetryable reports whether err is worth retrying. Errors that are not
// classified are treated as retryable: keeping data is the safe default.
func IsRetryable(err error) bool { return ship.IsRetryable(err) }

// classify turns what a push returned into a *PushError. The HTTP status
// seen by the transport (0 when no response came back) decides first,
// because connect maps a plain HTTP 400 from a proxy to Internal, which
// would otherwise look like a server bug.
func classify(err error, resp httpclient.Response) *PushError {
	pe := &PushError{Op: "pyroscope push", Err: err, HTTPStatus: resp.Status, RetryAfter: resp.RetryAfter}
	if resp.Status >= 400 {
		pe.Retryable, pe.Reason = httpclient.ClassifyStatus(resp.Status)
		return pe
	}
	if reason := httpclient.ClassifyError(err); reason != "unavailable" {
		pe.Retryable, pe.Reason = true, reason
		return pe
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeAborted, connect.CodeUnknown, connect.CodeInternal, connect.CodeCanceled:
		pe.Retryable, pe.Reason = true, "unavailable"
	case connect.CodeDeadlineExceeded:
		pe.Retryable, pe.Reason = true, "timeout"
	case connect.CodeResourceExhausted:
		pe.Retryable, pe.Reason = true, "rate_limited"
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		pe.Retryable, pe.Reason = true, "auth"
	default: // InvalidArgument, FailedPrecondition, OutOfRange, NotFound, Unimplemented, ...
		pe.Retryable, pe.Reason = false, ship.DropRejected
	}
	return pe
}
