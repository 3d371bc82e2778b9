package backends

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func server(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func TestPyroscopeErrorsAreWorded(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		want string
	}{
		{"gateway 503", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "service unavailable", 503) },
			"pyroscope: HTTP 503 Service Unavailable (the server or a gateway in front of it is failing): ProfileTypes: service unavailable"},
		{"connect 400", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(400)
			w.Write([]byte(`{"code":"invalid_argument","message":"parse error"}`))
		}, "pyroscope: HTTP 400 Bad Request: ProfileTypes: parse error"},
		{"auth", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(401) }, "check the credentials"},
		{"not pyroscope", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("<html>")) }, "is the URL a Pyroscope server?"},
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			// Read the body, so that the server notices the client leave.
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, "no answer within 50ms (timed out)"},
	} {
		p, err := NewPyroscope(Config{URL: server(t, tc.h), Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Both backends send the tenant, the credentials and the user agent the
// same way: one client construction.
func TestCredentialsAndTenant(t *testing.T) {
	var got http.Header
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		if strings.HasPrefix(r.URL.Path, "/api/v1/") {
			w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":[]}}`))
		} // an empty body is an empty protobuf answer
	})
	pingers := map[string]func(Config) (interface{ Ping(context.Context) error }, error){
		"prometheus": func(c Config) (interface{ Ping(context.Context) error }, error) { return NewPrometheus(c) },
		"pyroscope":  func(c Config) (interface{ Ping(context.Context) error }, error) { return NewPyroscope(c) },
	}
	for name, open := range pingers {
		for _, tc := range []struct {
			cfg  Config
			want string
		}{
			{Config{BasicUser: "u", BasicPassword: "p"}, "Basic dTpw"},
			{Config{BearerToken: "tok"}, "Bearer tok"},
		} {
			tc.cfg.URL, tc.cfg.TenantID = url, "team-a"
			p, err := open(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Ping(context.Background()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got.Get("Authorization") != tc.want || got.Get(TenantHeader) != "team-a" || got.Get("User-Agent") != UserAgent {
				t.Errorf("%s: headers %v", name, got)
			}
		}
	}
}

func TestPrometheusAnswers(t *testing.T) {
	url := server(t, func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		switch {
		case strings.Contains(r.Form.Get("query"), "bad"):
			w.WriteHeader(400)
			w.Write([]byte(`{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`))
		case r.URL.Path == "/api/v1/query_range":
			w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"values":[[1700000000.5,"0.25"]]}]}}`))
		}
	})
	p, _ := NewPrometheus(Config{URL: url})
	ss, err := p.QueryRange(context.Background(), "x", time.Unix(0, 0), time.Unix(1, 0), time.Second)
	if err != nil || len(ss) != 1 || ss[0].Labels["a"] != "b" || ss[0].Samples[0].V != 0.25 ||
		ss[0].Samples[0].T.UnixMilli() != 1700000000500 {
		t.Errorf("%+v %v", ss, err)
	}
	if _, err := p.Query(context.Background(), "bad", time.Now()); err == nil ||
		err.Error() != "prometheus: HTTP 400 Bad Request: parse error at char 3" {
		t.Errorf("%v", err)
	}
	if _, err := NewPrometheus(Config{URL: "localhost:9090"}); err == nil {
		t.Error("a URL without a scheme was accepted")
	}
	if _, err := NewPrometheus(Config{URL: "https://x", TLS: TLS{ClientCert: "c"}}); err == nil {
		t.Error("a client certificate without a key was accepted")
	}
}

// The server reads a step back as whole milliseconds, truncating: every
// step must come back as the milliseconds it was.
func TestStepSecondsRoundTrip(t *testing.T) {
	for ms := int64(1); ms < 10_000_000; ms += 997 {
		for _, m := range []int64{ms, ms * 1000, 86_400_000 + ms} {
			s := stepSeconds(time.Duration(m) * time.Millisecond)
			if got := time.Duration(s * float64(time.Second)).Milliseconds(); got != m {
				t.Fatalf("%d ms sent as %v s, read back as %d ms", m, s, got)
			}
		}
	}
}
