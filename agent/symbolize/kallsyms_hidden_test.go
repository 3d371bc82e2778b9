package symbolize

import (
	"strings"
	"testing"
)

func TestKallsymsHiddenAtStart(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     bool
	}{
		{"readable", "ffffffff81000000 T _stext\nffffffff81000010 T other\n", false},
		{"zeroed without CAP_SYSLOG", "0000000000000000 T srso_alias_untrain_ret\n0000000000000000 T _stext\n", true},
		{"empty", "", false},
		{"zero first, real later", "0000000000000000 A fixed_percpu_data\nffffffff81000000 T _stext\n", false},
	} {
		if got := kallsymsHidden(strings.NewReader(c.in)); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
