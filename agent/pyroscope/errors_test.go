package pyroscope_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/httpclient"
	"github.com/slurmscope/slurmscope/agent/pyroscope"
)

// TestProxyErrorPageIsOneLine: a reverse proxy's HTML error page in front
// of Pyroscope makes a short, one-line, retryable error that names the
// push's URL without the credentials in it, not the page.
func TestProxyErrorPageIsOneLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway</h1></center>\n</body>\n</html>\n"))
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://agent:s3cret@", 1) + "/prefix"
	err := newClient(t, pyroscope.Config{Config: httpclient.Config{URL: u}}).Push(context.Background(), request(t, 1))
	var pe *pyroscope.PushError
	if !errors.As(err, &pe) || !pe.Retryable || pe.HTTPStatus != 502 {
		t.Fatalf("%#v, want a retryable PushError of 502", err)
	}
	want := `pyroscope push failed (retryable, unavailable, HTTP 502): Post "` + srv.URL + `/prefix/push.v1.PusherService/Push": unavailable: 502 Bad Gateway`
	if got := err.Error(); got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}
