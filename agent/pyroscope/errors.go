package pyroscope

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	"connectrpc.com/connect"
)

// PushError is a failed push, classified for the shipper.
type PushError struct {
	// Retryable says the same request may succeed later (the server is down,
	// overloaded or timed out, or the credentials are wrong and may be
	// fixed). Otherwise the request itself is at fault and must be dropped.
	Retryable bool
	// Reason is a short, stable label for counting: "unavailable",
	// "timeout", "rate_limited", "auth", "rejected", ...
	Reason string
	// HTTPStatus is the response's status code, 0 if there was no response.
	HTTPStatus int
	Err        error
}

func (e *PushError) Error() string {
	kind := "permanent"
	if e.Retryable {
		kind = "retryable"
	}
	if e.HTTPStatus != 0 {
		return fmt.Sprintf("pyroscope push failed (%s, %s, HTTP %d): %v", kind, e.Reason, e.HTTPStatus, e.Err)
	}
	return fmt.Sprintf("pyroscope push failed (%s, %s): %v", kind, e.Reason, e.Err)
}

func (e *PushError) Unwrap() error { return e.Err }

// IsRetryable reports whether err is worth retrying. Errors that are not
// classified are treated as retryable: keeping data is the safe default.
func IsRetryable(err error) bool {
	var pe *PushError
	if errors.As(err, &pe) {
		return pe.Retryable
	}
	return err != nil
}

// classify turns what a push returned into a *PushError. status is the HTTP
// status seen by the transport (0 when no response came back); it decides
// first, because connect maps a plain HTTP 400 from a proxy to Internal,
// which would otherwise look like a server bug.
func classify(err error, status int) *PushError {
	pe := &PushError{Err: err, HTTPStatus: status}
	switch {
	case status == http.StatusTooManyRequests:
		pe.Retryable, pe.Reason = true, "rate_limited"
		return pe
	case status == http.StatusRequestTimeout:
		pe.Retryable, pe.Reason = true, "timeout"
		return pe
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// The request is fine, the credentials are not; they are re-read
		// from their files, so an operator's fix lets the backlog through.
		pe.Retryable, pe.Reason = true, "auth"
		return pe
	case status >= 500:
		pe.Retryable, pe.Reason = true, "unavailable"
		return pe
	case status >= 400:
		pe.Retryable, pe.Reason = false, "rejected"
		return pe
	}
	if errors.Is(err, context.DeadlineExceeded) {
		pe.Retryable, pe.Reason = true, "timeout"
		return pe
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		pe.Retryable, pe.Reason = true, "timeout"
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
		pe.Retryable, pe.Reason = false, "rejected"
	}
	return pe
}
