package httpclient

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/slurmscope/slurmscope/agent/logx"
)

// Bounds of what an error response puts in an error: a proxy's HTML page,
// or a backend's stack trace, must not become the agent's log line.
const (
	// MaxExcerpt bounds the server's own words in an error.
	MaxExcerpt  = 200
	maxBodyRead = 64 << 10 // bytes of the body read, to measure it and reuse the connection
)

// StatusError is a response with an error status, in one short line: the
// method and URL (without credentials or query), the status, and what the
// body says where it is text meant for people (plain text, or JSON's error
// message), or its kind and size where it is not (an HTML page).
type StatusError struct {
	Method string
	URL    string
	Status int
	Detail string // one line, bounded; "" when the body says nothing useful
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s %q: %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// ResponseError turns a response into its error: nil for a 2xx, a
// *StatusError otherwise. It reads (a bounded part of) the body; the
// caller still closes it.
func ResponseError(resp *http.Response) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	e := &StatusError{Status: resp.StatusCode}
	if r := resp.Request; r != nil {
		e.Method = methodName(r.Method)
		if r.URL != nil {
			e.URL = RedactURL(r.URL)
		}
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyRead+1))
	e.Detail = excerpt(resp.Header.Get("Content-Type"), body)
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 && loc != "" {
		if u, err := resp.Location(); err == nil {
			loc = RedactURL(u)
		}
		e.Detail = "redirected to " + logx.Line(loc, MaxExcerpt) + "; set the URL to the final address"
	}
	return e
}

// methodName spells a method as net/http's errors do: Post, Get.
func methodName(m string) string {
	if m == "" {
		return "Get"
	}
	return m[:1] + strings.ToLower(m[1:])
}

// RedactURL is u without its user, password, query and fragment: what a
// log line may show of where a request went.
func RedactURL(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}

// excerpt says in one line what an error response's body holds: the
// first line of plain text, JSON's "error" or "message" (or the JSON in
// one line), each at most MaxExcerpt bytes; of an HTML page or any other
// body, only its kind and size. A body read to maxBodyRead is "over" it.
func excerpt(contentType string, body []byte) string {
	if len(strings.TrimSpace(string(body))) == 0 {
		return ""
	}
	size := fmt.Sprintf("%d bytes", len(body))
	if len(body) > maxBodyRead {
		size = fmt.Sprintf("over %d KiB", maxBodyRead>>10)
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "" || mt == "text/plain" {
		// A server that did not say: sniff, as browsers do, so that an
		// HTML page served without its type is not pasted in either.
		mt, _, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return "an HTML page of " + size
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		// Prometheus's {"status":"error","error":"..."}, and most others.
		var v struct{ Error, Message string }
		if json.Unmarshal(body, &v) == nil {
			if msg := strings.Trim(v.Error+": "+v.Message, ": "); msg != "" {
				return logx.Line(msg, MaxExcerpt)
			}
		}
		return logx.Line(string(body), MaxExcerpt)
	case strings.HasPrefix(mt, "text/"):
		text := strings.TrimSpace(string(body))
		first, _, _ := strings.Cut(text, "\n")
		if first != text {
			first = strings.TrimSpace(first) + " …"
		}
		return logx.Line(first, MaxExcerpt)
	default:
		return "a body of type " + logx.Line(mt, 64) + ", " + size
	}
}
