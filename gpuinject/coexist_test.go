package gpuinject

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kinetoReport is what the Kineto stand-in (the user's own CUPTI client)
// wrote at stop: its "kineto k=v ..." line and its records per kernel name.
type kinetoReport struct {
	fields  map[string]string
	kernels map[string]uint64
}

func readKinetoReport(t *testing.T, path string) kinetoReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("Kineto stand-in report: %v", err)
	}
	rep := kinetoReport{fields: map[string]string{}, kernels: map[string]uint64{}}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if rest, ok := strings.CutPrefix(l, "kineto "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				rep.fields[k] = v
			}
		} else if rest, ok := strings.CutPrefix(l, "record_kernel="); ok {
			i := strings.LastIndex(rest, " n=")
			if i < 0 {
				t.Fatalf("report line %q", l)
			}
			rep.kernels[rest[:i]] = mustUint(t, rest[i+3:])
		}
	}
	return rep
}

// assertUserProfilerWorked: the user's client subscribed successfully and
// saw exactly the m launches and m kernels of its window, nothing else.
func assertUserProfilerWorked(t *testing.T, r run, rep kinetoReport, m uint64) {
	t.Helper()
	if !strings.Contains(r.stdout, "trainer profiler_subscribe=0 ") {
		t.Fatalf("the user's cuptiSubscribe failed: %q", r.stdout)
	}
	for _, k := range []string{"subscribe", "enable_callback", "register", "activity_enable", "activity_disable", "flush", "unsubscribe"} {
		if rep.fields[k] != "0" {
			t.Errorf("user's %s returned %s, want 0 (success): %v", k, rep.fields[k], rep.fields)
		}
	}
	if got := mustUint(t, rep.fields["launch_callbacks"]); got != m {
		t.Errorf("user's launch callbacks = %d, want %d", got, m)
	}
	if got := mustUint(t, rep.fields["records"]); got != m || len(rep.kernels) != 1 || rep.kernels["profiled_kernel"] != m {
		t.Errorf("user's records = %d %v, want %d profiled_kernel", got, rep.kernels, m)
	}
}

// The user's own CUPTI profiler (torch.profiler's Kineto, here its
// stand-in, linked to libcupti through DT_NEEDED) subscribes after the
// first kernels ran: the library steps aside, the user's profiler gets
// everything of its window, and the library resumes when it unsubscribes,
// with exact totals before and after. "late": the profiler library is
// loaded after CUDA started (bound through libcupti's patched symbols);
// "early": before (its full-RELRO GOT is patched).
func TestInjectStepsAsideForUserProfiler(t *testing.T) {
	const n, m, k = 40, 25, 30
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"late", nil},
		{"early", []string{"--profiler-early"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			report := filepath.Join(t.TempDir(), "kineto")
			r := runTrainer(t, true, map[string]string{
				"SLURMSCOPE_LAUNCH_SAMPLES_PER_SEC": "1000000000",
				"SLURMSCOPE_KINETO_STANDIN_REPORT":  report,
			}, append([]string{"--user-profiler", "40:25:30"}, tc.args...)...)

			assertUserProfilerWorked(t, r, readKinetoReport(t, report), m)

			l := logLines(r.stderr)
			if len(l) != 2 || !strings.Contains(l[0], "stepped aside") || !strings.Contains(l[1], "resumed") {
				t.Fatalf("want one step-aside and one resume line, got %q", l)
			}
			// Ours: exactly the kernels before and after the window, to the ns.
			if r.truth["profiled_kernel"].launches != m {
				t.Fatalf("truth: %v", r.truth)
			}
			for _, name := range []string{"before_kernel", "after_kernel"} {
				if r.totals[name] != r.truth[name] {
					t.Errorf("%s: library %v, truth %v", name, r.totals[name], r.truth[name])
				}
			}
			if r.totals["before_kernel"].launches != n || r.totals["after_kernel"].launches != k {
				t.Errorf("totals %v", r.totals)
			}
			if _, ok := r.totals["profiled_kernel"]; ok || len(r.totals) != 2 {
				t.Errorf("library reported kernels of the user's window: %v", r.totals)
			}
			if r.summary["records"] != n+k || r.summary["stepped_aside"] != 1 || r.summary["resumed"] != 1 ||
				r.summary["foreign_buffers"] != 0 || r.summary["dropped"] != 0 {
				t.Errorf("summary %v", r.summary)
			}
			if tc.name == "late" && r.summary["symbol_hooks"] != 2 {
				t.Errorf("libcupti's symbols not redirected: %v", r.summary)
			}
			if tc.name == "early" && r.summary["got_hooks"] != 2 {
				t.Errorf("GOT slots redirected = %d, want 2 (cuptiSubscribe, cuptiUnsubscribe)", r.summary["got_hooks"])
			}
			assertTraceConsistent(t, r)

			// Marker order: everything of before_kernel, step-aside, nothing,
			// resume, everything of after_kernel.
			var states []string
			aside, on := -1, -1
			for i, tl := range r.trace {
				if tl.kind == "state" {
					states = append(states, tl.fields["state"]+"/"+tl.fields["reason"])
					if tl.fields["state"] == "0" {
						aside = i
					} else {
						on = i
					}
				}
			}
			if strings.Join(states, " ") != "0/1 1/2" || aside > on {
				t.Fatalf("state markers %v, want step-aside (0/1) then resume (1/2)", states)
			}
			names := map[string]string{}
			for _, tl := range r.lines("name") {
				names[tl.fields["id"]] = tl.fields["name"]
			}
			cidPhase := map[string]string{}
			var before, after [2]int // launch markers, records
			for i, tl := range r.trace {
				phase := ""
				switch tl.kind {
				case "launch":
					phase = names[tl.fields["name_id"]]
					cidPhase[tl.fields["cid"]] = phase
				case "record":
					phase = names[tl.fields["name_id"]]
				default:
					continue
				}
				j := 0
				if tl.kind == "record" {
					j = 1
				}
				switch {
				case phase == "before_kernel" && i < aside:
					before[j]++
				case phase == "after_kernel" && i > on:
					after[j]++
				default:
					t.Fatalf("trace line %d: %s of %s (step-aside at %d, resume at %d)", i, tl.kind, phase, aside, on)
				}
			}
			if before != [2]int{n, n} || after != [2]int{k, k} {
				t.Fatalf("before step-aside %v, after resume %v (launch markers, records); want %d and %d", before, after, n, k)
			}
		})
	}
}

// A job with SLURMSCOPE_GPU_TRACE=off: the library, even when loaded, does
// nothing (one line), and the user's profiler works as without it.
func TestInjectOptedOutLeavesCUPTIAlone(t *testing.T) {
	report := filepath.Join(t.TempDir(), "kineto")
	r := runTrainer(t, true, map[string]string{
		"SLURMSCOPE_GPU_TRACE":             "off",
		"SLURMSCOPE_KINETO_STANDIN_REPORT": report,
	}, "--user-profiler", "10:12:8")
	assertUserProfilerWorked(t, r, readKinetoReport(t, report), 12)
	l := logLines(r.stderr)
	if len(l) != 1 || !strings.Contains(l[0], "SLURMSCOPE_GPU_TRACE=off") {
		t.Fatalf("want one opt-out line, got %q", l)
	}
	if len(r.totals) != 0 || len(r.summary) != 0 || len(r.trace) != 0 {
		t.Fatalf("traced an opted-out job: totals %v %v, %d trace lines", r.totals, r.summary, len(r.trace))
	}
	if sumLaunches(r.truth) != 30 {
		t.Fatalf("trainer ran %d kernels, want 30", sumLaunches(r.truth))
	}
}

// The stand-ins themselves: without the injection library the user's
// profiler sees its window only; and the mock CUPTI, like CUPTI, refuses a
// second subscriber (the library's own step-aside test relies on that).
func TestKinetoStandinWithoutInjection(t *testing.T) {
	report := filepath.Join(t.TempDir(), "kineto")
	r := runTrainer(t, false, map[string]string{"SLURMSCOPE_KINETO_STANDIN_REPORT": report},
		"--user-profiler", "5:9:4", "--profiler-early")
	assertUserProfilerWorked(t, r, readKinetoReport(t, report), 9)
	if r.stderr != "" {
		t.Fatalf("stderr: %q", r.stderr)
	}

	busy := runTrainer(t, false, map[string]string{
		"SLURMSCOPE_KINETO_STANDIN_REPORT": report,
		"SLURMSCOPE_MOCK_CUPTI_BUSY":       "1",
	}, "--user-profiler", "1:2:3")
	if !strings.Contains(busy.stdout, "trainer profiler_subscribe=39 ") { // CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
		t.Fatalf("subscribe against a busy mock: %q", busy.stdout)
	}
}
