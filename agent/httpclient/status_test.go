package httpclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/agent/httpclient"
)

// nginx502 is what a reverse proxy answers when the backend behind it is down.
const nginx502 = `<!DOCTYPE html>
<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx/1.24.0 (Ubuntu)</center>
</body>
</html>
`

// responseError sends one request to a server that answers status with
// body as contentType, and returns ResponseError of the answer.
func responseError(t *testing.T, status int, contentType, body string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		} else {
			w.Header()["Content-Type"] = nil // no sniffing by the server
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://agent:s3cret@", 1) + "/api/v1/write?token=s3cret"
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return httpclient.ResponseError(resp)
}

// TestResponseErrorIsOneShortLine: whatever the body, the error is one
// line that names the URL without its credentials, the status, and the
// server's own words only where they are text.
func TestResponseErrorIsOneShortLine(t *testing.T) {
	long := strings.Repeat("sample out of order; ", 100)
	htmlSize := strconv.Itoa(len(nginx502)) + " bytes"
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		want                    string // the error after the URL
	}{
		{"html page", "text/html", nginx502, 502, "502 Bad Gateway: an HTML page of " + htmlSize},
		{"html page without its type", "", nginx502, 502, "502 Bad Gateway: an HTML page of " + htmlSize},
		{"html page called text", "text/plain", nginx502, 503, "503 Service Unavailable: an HTML page of " + htmlSize},
		{"multi-line text", "text/plain; charset=utf-8", "out of order sample\n  at series {job=\"1\"}\n", 400, `400 Bad Request: out of order sample …`},
		{"control characters", "text/plain", "bad \x1b[31mlabel\x1b[0m\r\n", 400, "400 Bad Request: bad \uFFFD[31mlabel\uFFFD[0m"},
		{"long text", "text/plain", long, 400, `400 Bad Request: ` + strings.TrimSpace(long[:197]) + `…`},
		{"prometheus json", "application/json", `{"status":"error","errorType":"bad_data","error":"out of order sample"}`, 400, `400 Bad Request: out of order sample`},
		{"other json", "application/json", "{\n  \"code\": 13\n}\n", 500, `500 Internal Server Error: { "code": 13 }`},
		{"binary", "application/x-protobuf", "\x00\x01\x02", 500, `500 Internal Server Error: a body of type application/x-protobuf, 3 bytes`},
		{"empty", "text/plain", "", 429, `429 Too Many Requests`},
	} {
		err := responseError(t, tc.status, tc.contentType, tc.body)
		var se *httpclient.StatusError
		if !errors.As(err, &se) || se.Status != tc.status {
			t.Errorf("%s: %#v, want a *StatusError of %d", tc.name, err, tc.status)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, `Post "http://127.0.0.1:`) || !strings.Contains(msg, `/api/v1/write": `) {
			t.Errorf("%s: %q does not name the request", tc.name, msg)
		}
		if _, after, _ := strings.Cut(msg, `/api/v1/write": `); after != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, after, tc.want)
		}
		if strings.ContainsAny(msg, "\n\r<>") || strings.Contains(msg, "s3cret") || len(se.Detail) > 200 {
			t.Errorf("%s: %q has a line break, markup, a secret, or a detail over 200 bytes", tc.name, msg)
		}
	}
}

func TestResponseErrorOfSuccessIsNil(t *testing.T) {
	if err := responseError(t, 204, "", ""); err != nil {
		t.Errorf("204: %v", err)
	}
}

// TestResponseErrorOfRedirect says where to, as an absolute URL without
// credentials: redirects of POSTs are not followed.
func TestResponseErrorOfRedirect(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/elsewhere?token=s3cret")
		w.WriteHeader(http.StatusPermanentRedirect)
	}))
	defer srv.Close()
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Post(srv.URL+"/write", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg := httpclient.ResponseError(resp).Error()
	if want := `308 Permanent Redirect: redirected to ` + srv.URL + `/elsewhere; set the URL to the final address`; !strings.HasSuffix(msg, want) {
		t.Errorf("%q, want it to end in %q", msg, want)
	}
}
