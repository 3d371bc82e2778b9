package users

import (
	"strings"
	"testing"
)

func TestParsePasswd(t *testing.T) {
	p, bad, err := ParsePasswd(strings.NewReader("root:x:0:0:root:/root:/bin/bash\n# comment\nbob:x:1001:1001::/home/bob:/bin/sh\ngarbage\neve:x:notanumber:1\nbob2:x:1001:1:dup\n"))
	if err != nil {
		t.Fatal(err)
	}
	if bad != 2 {
		t.Errorf("bad lines = %d, want 2", bad)
	}
	for uid, want := range map[int]string{0: "root", 1001: "bob"} {
		if got, ok := p.Name(uid); !ok || got != want {
			t.Errorf("Name(%d) = %q, %v; want %q", uid, got, ok, want)
		}
	}
	if got := NameOrID(p, 4242); got != "4242" {
		t.Errorf("unknown uid rendered as %q", got)
	}
}

func TestSystemLookupFindsRoot(t *testing.T) {
	var s System
	if n, ok := s.Name(0); !ok || n != "root" {
		t.Fatalf("uid 0 = %q, %v", n, ok)
	}
	if _, ok := s.Name(4000000000); ok {
		t.Fatal("a uid with no user resolved")
	}
}
