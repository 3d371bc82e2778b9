package dashboards

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/slurmscope/slurmscope/internal/testenv"
)

// promRules turns the provisioned Grafana rules whose query is PromQL and
// whose condition is a threshold on it into Prometheus alerting rules, so
// that promtool can run them: alert is the rule's uid, expr the query
// compared as the threshold compares, for the rule's for. Grafana
// evaluates an instant query at each evaluation, as Prometheus does.
func promRules(t *testing.T) []map[string]string {
	t.Helper()
	var doc struct {
		Groups []struct {
			Rules []struct {
				UID       string `yaml:"uid"`
				Condition string `yaml:"condition"`
				For       string `yaml:"for"`
				Data      []struct {
					RefID         string `yaml:"refId"`
					DatasourceUID string `yaml:"datasourceUid"`
					Model         struct {
						Expr       string `yaml:"expr"`
						Type       string `yaml:"type"`
						Expression string `yaml:"expression"`
						Conditions []struct {
							Evaluator struct {
								Type   string    `yaml:"type"`
								Params []float64 `yaml:"params"`
							} `yaml:"evaluator"`
						} `yaml:"conditions"`
					} `yaml:"model"`
				} `yaml:"data"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(root, "provisioning", "alerting", "slurmscope-rules.yaml"), &doc)
	var out []map[string]string
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			exprs := map[string]string{}
			for _, q := range r.Data {
				if q.DatasourceUID == promType || q.DatasourceUID == "prometheus" {
					exprs[q.RefID] = q.Model.Expr
				}
			}
			for _, q := range r.Data {
				m := q.Model
				if q.RefID != r.Condition || q.DatasourceUID != exprUID || m.Type != "threshold" || exprs[m.Expression] == "" || len(m.Conditions) != 1 {
					continue
				}
				ev := m.Conditions[0].Evaluator
				op := map[string]string{"gt": ">", "lt": "<"}[ev.Type]
				if op == "" || len(ev.Params) != 1 {
					t.Fatalf("rule %s: threshold %+v: only gt and lt with one value are translated", r.UID, ev)
				}
				out = append(out, map[string]string{
					"alert": r.UID,
					"expr":  fmt.Sprintf("(%s) %s %v", exprs[m.Expression], op, ev.Params[0]),
					"for":   r.For,
				})
			}
		}
	}
	return out
}

// TestAgentAlertRulesFire runs the provisioned agent alert rules in
// promtool (Debian's prometheus package) against series where an agent
// stops delivering and where a scrape fails: the heartbeat rule fires for
// a node without GPUs, after its threshold and its for, and keeps firing
// while the node stays silent (testdata/agent-alerts.test.yaml).
func TestAgentAlertRulesFire(t *testing.T) {
	testenv.Require(t, testenv.Tools("promtool"))
	rules := promRules(t)
	uids := map[string]bool{}
	for _, r := range rules {
		uids[r["alert"]] = true
	}
	for _, want := range []string{"slurmscope-agent-silent", "slurmscope-agent-down"} {
		if !uids[want] {
			t.Fatalf("rule %s is not a PromQL threshold rule any more (have %v)", want, uids)
		}
	}
	dir := t.TempDir()
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "slurmscope", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "agent-alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agent-alerts.test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("promtool", "test", "rules", filepath.Join(dir, "agent-alerts.test.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\nrules:\n%s", err, out, b)
	}
	t.Logf("%s", out)
}
