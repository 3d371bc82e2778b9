package filter

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/slurmscope/slurmscope/schema"
)

// Expected selectors are written as Selector.String renders them, one per
// line; wire labels appear only inside those strings (see the schema
// package's test).
func TestSelectors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"equal", `slurm.job.user == "bob"`, `{slurm_job_user="bob"}`},
		{"not equal", `slurm.job.user != "bob"`, `{slurm_job_user!="bob"}`},
		{"value first", `"bob" == slurm.job.user`, `{slurm_job_user="bob"}`},
		{"in", `host.name in ["n2", "n1", "n1"]`, `{host_name=~"n1|n2"}`},
		{"in one", `host.name in ["n1"]`, `{host_name="n1"}`},
		{"in none", `host.name in []`, ``},
		{"not in quotes metacharacters", `!(host.name in ["a.b", "c"])`, `{host_name!~"a\\.b|c"}`},
		{"matches", `slurm.job.name.matches("^train")`, `{slurm_job_name=~"(?s:.*)^train(?s:.*)"}`},
		{"matches global form, alternation grouped", `matches(slurm.job.name, "a|b")`,
			`{slurm_job_name=~"(?s:.*)(?:a|b)(?s:.*)"}`},
		{"dot keeps CEL's no-newline default", `!slurm.job.name.matches("x.y")`,
			`{slurm_job_name!~"(?s:.*)(?-s:x.y)(?s:.*)"}`},
		{"flags stay inside the pattern", `slurm.job.name.matches("(?i)ab")`,
			`{slurm_job_name=~"(?s:.*)(?:(?i)ab)(?s:.*)"}`},
		{"unterminated \\Q is closed", `slurm.job.name.matches("\\Qa.")`,
			`{slurm_job_name=~"(?s:.*)(?:\\Qa.\\E)(?s:.*)"}`},
		{"empty pattern matches all", `slurm.job.name.matches("")`, `{}`},
		{"startsWith", `host.name.startsWith("n1.")`, `{host_name=~"n1\\.(?s:.*)"}`},
		{"endsWith", `host.name.endsWith("$x")`, `{host_name=~"(?s:.*)\\$x"}`},
		{"contains", `host.name.contains("a*b")`, `{host_name=~"(?s:.*)a\\*b(?s:.*)"}`},
		{"&& binds tighter than ||", `slurm.job.user == "a" || host.name == "n1" && slurm.job.user == "b"`,
			"{slurm_job_user=\"a\"}\n{host_name=\"n1\", slurm_job_user=\"b\"}"},
		{"parentheses", `(slurm.job.user == "a" || host.name == "n1") && slurm.job.user == "b"`,
			`{host_name="n1", slurm_job_user="b"}`},
		{"overlapping branches are made disjoint", `slurm.job.user == "a" || host.name == "n1"`,
			"{slurm_job_user=\"a\"}\n{host_name=\"n1\", slurm_job_user!=\"a\"}"},
		{"De Morgan on &&", `!(slurm.job.user == "a" && host.name == "n1")`,
			"{slurm_job_user!=\"a\"}\n{host_name!=\"n1\", slurm_job_user=\"a\"}"},
		{"De Morgan on ||", `!(slurm.job.user == "a" || host.name == "n1")`,
			`{host_name!="n1", slurm_job_user!="a"}`},
		{"double negation", `!!(slurm.job.user == "a")`, `{slurm_job_user="a"}`},
		{"conditional", `slurm.job.user == "bob" ? host.name == "n1" : host.name == "n2"`,
			"{host_name=\"n1\", slurm_job_user=\"bob\"}\n{host_name=\"n2\", slurm_job_user!=\"bob\"}"},
		{"conditions compared", `host.name.startsWith("n") != (slurm.job.user == "a")`,
			"{host_name!~\"n(?s:.*)\", slurm_job_user=\"a\"}\n{host_name=~\"n(?s:.*)\", slurm_job_user!=\"a\"}"},
		{"injection", `slurm.job.user == "x\"} or {a=\"b"`, `{slurm_job_user="x\"} or {a=\"b"}`},
		{"metacharacters under == stay exact", `slurm.job.name == "a.*(b)?"`, `{slurm_job_name="a.*(b)?"}`},
		{"unicode", `slurm.job.name == "é\u00e9日本"`, `{slurm_job_name="éé日本"}`},
		{"control characters", `slurm.job.name == "a\nb\x01"`, `{slurm_job_name="a\nb\x01"}`},
		{"empty means absent or empty", `slurm.job.user == ""`, `{slurm_job_user=""}`},
		{"not empty", `slurm.job.user != ""`, `{slurm_job_user!=""}`},
		{"raw and single-quoted strings", "slurm.job.user == 'bob'\n  && host.name == r\"n\\1\"",
			`{host_name="n\\1", slurm_job_user="bob"}`},
		{"true", `true`, `{}`},
		{"empty filter", "  \n", `{}`},
		{"false", `false`, ``},
		{"true absorbs", `true || slurm.job.user == "a"`, `{}`},
		{"false absorbs", `slurm.job.user == "a" && false`, ``},
		{"contradiction", `slurm.job.user == "x" && slurm.job.user == "y"`, ``},
		{"implied inequality dropped", `slurm.job.user == "x" && slurm.job.user != "y"`, `{slurm_job_user="x"}`},
		{"set minus value", `slurm.job.user in ["a", "b"] && slurm.job.user != "a"`, `{slurm_job_user="b"}`},
		{"set filtered by pattern", `slurm.job.user in ["ann", "bob"] && slurm.job.user.startsWith("a")`,
			`{slurm_job_user="ann"}`},
		{"exclusions merge", `slurm.job.user != "a" && slurm.job.user != "b"`, `{slurm_job_user!~"a|b"}`},
		{"equalities merge", `slurm.job.user == "a" || slurm.job.user == "b"`, `{slurm_job_user=~"a|b"}`},
		{"disjoint prefixes", `host.name.startsWith("a") && host.name.startsWith("b")`, ``},
		{"implied prefix", `host.name.startsWith("ab") && !host.name.startsWith("a")`, ``},
		{"covered branch vanishes", `host.name.startsWith("a") || host.name.startsWith("ab")`,
			`{host_name=~"a(?s:.*)"}`},
		{"pattern implies exclusion", `host.name.contains("ab") && host.name != "x"`,
			`{host_name=~"(?s:.*)ab(?s:.*)"}`},
		{"int attribute, int literal", `slurm.job.id == 4242`, `{slurm_job_id="4242"}`},
		{"int attribute, string literal", `slurm.job.id == "4242"`, `{slurm_job_id="4242"}`},
		{"int list", `slurm.job.id in [1, 2u, "3"]`, `{slurm_job_id=~"1|2|3"}`},
		{"process attribute, int literal", `slurm.task.rank == 3`, `{slurm_task_rank="3"}`},
		{"one node's ranks", `slurm.node.index == 2 && slurm.task.local_id in [0, "1"]`,
			`{slurm_node_index="2", slurm_task_local_id=~"0|1"}`},
		{"rank or its job, disjoint", `slurm.task.rank == 0 || slurm.job.id == 7`,
			"{slurm_task_rank=\"0\"}\n{slurm_job_id=\"7\", slurm_task_rank!=\"0\"}"},
		{"injection in a process attribute", `slurm.task.rank == "0\"} or {a=\"b"`, `{slurm_task_rank="0\"} or {a=\"b"}`},
		{"typical", `slurm.job.user == "bob" && matches(slurm.job.name, "train.*") && !(host.name in ["n1","n2"])`,
			`{host_name!~"n1|n2", slurm_job_name=~"(?s:.*)(?-s:train.*)(?s:.*)", slurm_job_user="bob"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Compile(tc.src)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tc.src, err)
			}
			for _, target := range []Target{Pyroscope, Prometheus} {
				if got := render(f.Selectors(target)); got != tc.want {
					t.Errorf("Compile(%q).Selectors(%v):\n%s\nwant:\n%s", tc.src, target, got, tc.want)
				}
			}
		})
	}
}

func render(sels []Selector) string {
	lines := make([]string, len(sels))
	for i, s := range sels {
		lines[i] = s.String()
	}
	return strings.Join(lines, "\n")
}

func TestMatches(t *testing.T) {
	user, host := schema.JobUser.Label, schema.HostName.Label
	for _, tc := range []struct {
		src    string
		labels map[string]string
		want   bool
	}{
		{`slurm.job.user == ""`, map[string]string{}, true},
		{`slurm.job.user == ""`, map[string]string{user: ""}, true},
		{`slurm.job.user != "bob"`, map[string]string{}, true},
		{`slurm.job.user != "bob"`, map[string]string{user: "bob"}, false},
		{`host.name.matches("^n\\d+$")`, map[string]string{host: "n12"}, true},
		{`host.name.matches("n\\d")`, map[string]string{host: "gpu-n1-x"}, true},
		{`host.name.matches("a.b")`, map[string]string{host: "a\nb"}, false},
		{`host.name.matches("(?s)a.b")`, map[string]string{host: "a\nb"}, true},
		{`host.name.startsWith("n") && slurm.job.user in ["a", "b"]`, map[string]string{host: "n1", user: "b"}, true},
	} {
		f, err := Compile(tc.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Matches(tc.labels); got != tc.want {
			t.Errorf("Compile(%q).Matches(%v) = %v, want %v", tc.src, tc.labels, got, tc.want)
		}
	}
}

func TestErrors(t *testing.T) {
	ops := " is not supported; " + supported
	for _, tc := range []struct{ src, want string }{
		{"slurm.job.user ==", "1:18: syntax error: unexpected end of filter"},
		{`slurm.job.user = "a"`, "1:16: syntax error: unexpected =; compare with ==\n" +
			`1:18: syntax error: extraneous input '"a"' expecting <EOF>`},
		{`slurm.job.usr == "a"`, "1:1: unknown attribute slurm.job.usr; did you mean slurm.job.user?"},
		{`user == "a"`, "1:1: unknown attribute user; did you mean slurm.job.user?"},
		{`gpu == "a"`, "1:1: unknown attribute gpu; did you mean gpu.name, gpu.uuid, gpu.index, gpu.mig.profile or gpu.mig.instance?"},
		{`cpu.name == "a"`, "1:1: unknown attribute cpu.name; did you mean gpu.name?"},
		{"host.name == \"a\" &&\n   \"é\" == slurm.job.usr", "2:11: unknown attribute slurm.job.usr; did you mean slurm.job.user?"},
		{`x == "1" && y == "2" || z`, "1:1: unknown attribute x\n1:13: unknown attribute y\n1:25: unknown attribute z"},
		{`slurm.job.user == 1`, `1:19: slurm.job.user is a string: write the value in quotes, as in "1"`},
		{`slurm.job.user == 1.5`, "1:19: expected a string value, got a double"},
		{`slurm.job.user == true`, "1:19: expected a string value, got a bool"},
		{`slurm.job.user == null`, `1:19: null is not a value here: a missing attribute reads as ""`},
		{`slurm.job.user == b"x"`, "1:19: expected a string value, got bytes"},
		{`host.name.matches("(")`, "1:19: invalid regular expression: missing closing )"},
		{`host.name.matches("a{2,1001}")`, "1:19: invalid regular expression: invalid repeat count: `{2,1001}`"},
		{`matches(host.name, "(a)\\1")`, "1:20: invalid regular expression: invalid escape sequence: `\\1`"},
		{`slurm.job.id + 1 == 2`, "1:14: operator +" + ops},
		{`size(host.name) == 1`, "1:1: function size()" + ops},
		{`host.name.size() == 1`, "1:11: function size()" + ops},
		{`host.name < "b"`, "1:11: operator <" + ops},
		{`host.name >= "b"`, "1:11: operator >=" + ops},
		{`host.name[0] == "a"`, "1:10: indexing" + ops},
		{`has(host.name)`, "1:1: function has()" + ops},
		{`host.name`, `1:1: host.name is a string, not a condition: compare it, as in host.name == "..."`},
		{`"x"`, "1:1: expected a condition, got a string value"},
		{`[true]`, "1:1: expected a condition, got a list"},
		{`host.name == host.name`, "1:11: comparing two attributes is not supported; compare an attribute with a value"},
		{`host.name == "a" == "b"`, "1:18: a condition can only be compared with another condition"},
		{`"a" == "b"`, `1:5: compare an attribute with a value, as in slurm.job.user == "bob"`},
		{`host.name in "abc"`, `1:14: in needs a list of values on its right, as in ["a", "b"]`},
		{`host.name in [host.name]`, "1:15: expected a literal value"},
		{`startsWith(host.name, "a")`, `1:1: write startsWith as a method, as in host.name.startsWith("n")`},
		{`host.name.startsWith(1)`, "1:22: startsWith needs a string, got an int"},
		{`"x".startsWith("a")`, `1:1: startsWith needs an attribute, as in host.name.startsWith("n")`},
		{"slurm.job.user == \"\xff\"", "1:20: filter is not valid UTF-8"},
		{`"é" < "f"`, "1:5: operator <" + ops}, // columns count characters
	} {
		_, err := Compile(tc.src)
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Compile(%q) = %v, want an *Error", tc.src, err)
			continue
		}
		if got := err.Error(); got != tc.want {
			t.Errorf("Compile(%q):\n got %s\nwant %s", tc.src, got, tc.want)
		}
		for _, is := range e.Issues {
			checkPosition(t, tc.src, is)
		}
	}
}

func TestErrorOffsetsAreBytes(t *testing.T) {
	_, err := Compile("\"é\" == x &&\n  y == \"1\"")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatal(err)
	}
	want := []Issue{
		{Line: 1, Column: 8, Offset: 8, Message: "unknown attribute x"},
		{Line: 2, Column: 3, Offset: 15, Message: "unknown attribute y"},
	}
	if len(e.Issues) != len(want) || e.Issues[0] != want[0] || e.Issues[1] != want[1] {
		t.Errorf("issues = %+v, want %+v", e.Issues, want)
	}
}

func TestTooComplex(t *testing.T) {
	// Ten two-way choices that do not simplify: 2^10 conjunctions.
	var parts []string
	for i := range 10 {
		a, b := schema.All[i].Name, schema.All[i+1].Name
		parts = append(parts, "("+a+`.contains("x`+strconv.Itoa(i)+`") || `+b+`.matches("y`+strconv.Itoa(i)+`"))`)
	}
	_, err := Compile(strings.Join(parts, " && "))
	if err == nil || !strings.Contains(err.Error(), "too complex") {
		t.Fatalf("err = %v, want too complex", err)
	}
}

func TestAndCannotBeEscaped(t *testing.T) {
	user, err := Compile(`slurm.job.user == "eve" || true`)
	if err != nil {
		t.Fatal(err)
	}
	f := And(Equal(schema.JobUser, "bob"), user)
	if got, want := render(f.Selectors(Pyroscope)), `{slurm_job_user="bob"}`; got != want {
		t.Errorf("selectors = %s, want %s", got, want)
	}
	if f.Matches(map[string]string{schema.JobUser.Label: "eve"}) {
		t.Error("owner filter matched another user's job")
	}
	if got, want := f.String(), `slurm.job.user == "bob"`; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	other, _ := Compile(`slurm.job.user == "eve" || host.name == "n1"`)
	if got, want := render(And(Equal(schema.JobUser, "bob"), other).Selectors(Prometheus)),
		`{host_name="n1", slurm_job_user="bob"}`; got != want {
		t.Errorf("selectors = %s, want %s", got, want)
	}
	if got := render(And(True(), nil).Selectors(Prometheus)); got != "{}" {
		t.Errorf("And(True(), nil) = %s, want {}", got)
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`slurm.job.user != "a" && (host.name == "b" || !(gpu.name.matches("x")))`,
			`slurm.job.user != "a" && (host.name == "b" || !(gpu.name.matches("x")))`},
		{`(a == "1" || b == "2") && c == "3"`, ""}, // not compiled: unknown attributes
		{`matches(host.name, "a") && slurm.job.id == 7`, `host.name.matches("a") && slurm.job.id == "7"`},
		{`host.name in ["b", "a"] || true`, `true`},
	} {
		f, err := Compile(tc.src)
		if tc.want == "" {
			if err == nil {
				t.Errorf("Compile(%q) succeeded", tc.src)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := f.String(); got != tc.want {
			t.Errorf("Compile(%q).String() = %s, want %s", tc.src, got, tc.want)
		}
	}
}

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"bob", `"bob"`},
		{`x"} or {a="b`, `"x\"} or {a=\"b"`},
		{`a\b`, `"a\\b"`},
		{"tab\tnl\ncr\r", `"tab\tnl\ncr\r"`},
		{"\x00\x1b\u2028", `"\u0000\u001b\u2028"`},
		{"é日本🙂", `"é日本🙂"`},
		{"\U000e0001", `"\U000e0001"`},
		{"bad\xffutf8", `"bad` + "\uFFFD" + `utf8"`},
	} {
		got := Quote(tc.in)
		if got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
		// It must read back as the same value in CEL.
		if v, ok := celUnquote(got); !ok || v != strings.ToValidUTF8(tc.in, "\uFFFD") {
			t.Errorf("CEL reads Quote(%q) = %s back as %q, %v", tc.in, got, v, ok)
		}
	}
}

func TestSelectorString(t *testing.T) {
	s := Selector{{"a", OpEqual, "x\"}"}, {"b", OpNotEqual, "é\n"}, {"c", OpRegexp, `a\.b`}, {"d", OpNotRegexp, ""}}
	want := `{a="x\"}", b!="é\n", c=~"a\\.b", d!~""}`
	if got := s.String(); got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if got := (Selector{}).String(); got != "{}" {
		t.Errorf("empty selector = %s, want {}", got)
	}
	// Values read back with Go (and PromQL) unquoting.
	for _, m := range s {
		if v, err := strconv.Unquote(strings.TrimPrefix(m.String(), m.Label+string(m.Op))); err != nil || v != m.Value {
			t.Errorf("%s reads back as %q, %v", m, v, err)
		}
	}
}

const typical = `slurm.job.user == "bob" && matches(slurm.job.name, "train.*") && !(host.name in ["n1","n2"])`

// BenchmarkCompileAndSelectors is a dashboard refresh: a filter seen before.
func BenchmarkCompileAndSelectors(b *testing.B) {
	for b.Loop() {
		f, err := Compile(typical)
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Selectors(Pyroscope)) != 1 {
			b.Fatal("want one selector")
		}
	}
}

// BenchmarkCompileAndSelectorsCold is a filter never seen before.
func BenchmarkCompileAndSelectorsCold(b *testing.B) {
	for b.Loop() {
		f, err := compile(typical)
		if err != nil {
			b.Fatal(err)
		}
		if len(f.Selectors(Pyroscope)) != 1 {
			b.Fatal("want one selector")
		}
	}
}

func BenchmarkOverlappingBranches(b *testing.B) {
	const src = `(slurm.job.user == "a" || host.name.startsWith("n1")) && (slurm.job.account == "c" || gpu.name.contains("H100")) || slurm.job.partition == "debug"`
	for b.Loop() {
		f, err := compile(src)
		if err != nil {
			b.Fatal(err)
		}
		f.Selectors(Prometheus)
	}
}

// Every attribute of the schema, whatever its scope (a process's rank as
// much as a job's owner), is escaped in selectors and split into disjoint
// ones, as cel-go evaluates the filter: the checks of the fuzz tests, on
// filters naming each attribute beside another.
func TestEveryAttributeIsEscapedAndDisjoint(t *testing.T) {
	values := []string{"", "0", "17", `0"} or {a="b`, "a|b", "x\ny", `\`, "é"}
	for i, a := range schema.All {
		b := schema.All[(i+1)%len(schema.All)]
		for _, src := range []string{
			a.Name + ` == "0\"} or {a=\"b"`,
			a.Name + ` in ["0", "a|b", "x\ny"] || ` + b.Name + ` == "17"`,
			`!(` + a.Name + `.matches("^(0|1)$")) && ` + b.Name + `.startsWith("a|")`,
			a.Name + ` != "" ? ` + b.Name + `.contains("\\") : ` + a.Name + `.endsWith("7")`,
		} {
			var sets []map[string]string
			for j, va := range values {
				for k, vb := range values {
					ls := map[string]string{}
					if j > 0 {
						ls[a.Label] = va
					}
					if k > 0 {
						ls[b.Label] = vb
					}
					sets = append(sets, ls)
				}
			}
			checkFilter(t, src, sets, true)
		}
	}
}
