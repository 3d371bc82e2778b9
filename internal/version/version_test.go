package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	bi := func(v string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{Main: debug.Module{Version: v}, Settings: settings}, true
		}
	}
	rev := debug.BuildSetting{Key: "vcs.revision", Value: "0123456789abcdef0123"}
	dirty := debug.BuildSetting{Key: "vcs.modified", Value: "true"}
	for _, c := range []struct {
		name, v, c string
		read       func() (*debug.BuildInfo, bool)
		want       string
	}{
		{"link time wins", "v0.2.0", "feedbeef", bi("v0.1.0", rev), "p version v0.2.0 (commit feedbeef, "},
		{"module proxy", "", "", bi("v0.1.0"), "p version v0.1.0 (commit unknown, "},
		{"checkout", "", "", bi("(devel)", rev, dirty), "p version devel (commit 0123456789ab+modified, "},
		{"no build info", "", "", func() (*debug.BuildInfo, bool) { return nil, false }, "p version devel (commit unknown, "},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := get(c.v, c.c, c.read).String("p")
			if !strings.HasPrefix(got, c.want) || !strings.HasSuffix(got, ")") {
				t.Errorf("got %q, want prefix %q", got, c.want)
			}
		})
	}
}
