package deploy

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/sidelock/sidelock/internal/injector"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// The monitoring that ships with the chart (issue 16, finding 6): the
// PodMonitor and PrometheusRule objects, the rule file they carry, its
// runbooks, and the Grafana dashboard, whose every query must name series
// a real sidecar exports.

const (
	alertsFile     = "../../charts/sidelock/files/alerts.yaml"
	alertTestsFile = "../../charts/sidelock/files/alerts_test.yaml"
	runbooksFile   = "../../docs/runbooks.md"
	dashboardFile  = "../../docs/grafana/sidelock.json"
	runbookBase    = "https://github.com/sidelock/sidelock/blob/main/docs/runbooks.md#"
)

// The Prometheus Operator's PodMonitor and PrometheusRule
// (monitoring.coreos.com/v1), reduced to the fields the chart renders, so
// that they decode strictly (see certmanager_test.go for why local copies).
type pmPodMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type pmPrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleFile `json:"spec"`
}

// ruleFile is a Prometheus rule file, which is also a PrometheusRule's spec.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []rule `json:"rules"`
	} `json:"groups"`
}

type rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func (p *pmPodMonitor) DeepCopyObject() runtime.Object { return deepCopyJSON(p, &pmPodMonitor{}) }
func (p *pmPrometheusRule) DeepCopyObject() runtime.Object {
	return deepCopyJSON(p, &pmPrometheusRule{})
}

func readRuleFile(t *testing.T) ruleFile {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	return f
}

func (f ruleFile) rules() []rule {
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// Off by default (their CRDs may be absent); on, the PodMonitor scrapes
// the sidecar's admin port on every pod that has the sidecar, however it
// got it, and the PrometheusRule is the rule file as it is.
func TestMonitoringObjects(t *testing.T) {
	r, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(ofType[*pmPodMonitor](r.objs)) + len(ofType[*pmPrometheusRule](r.objs)); n != 0 {
		t.Fatalf("%d monitoring objects rendered by default, want none", n)
	}

	vals := parseValues(t, `monitoring:
  podMonitor: {enabled: true, interval: 15s, labels: {release: prom}}
  prometheusRule: {enabled: true, labels: {release: prom}}`)
	for _, m := range lintChart(t, vals) {
		t.Errorf("helm lint: %s", m)
	}
	r, err = render(loadChart(t), vals, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	pms, prs := ofType[*pmPodMonitor](r.objs), ofType[*pmPrometheusRule](r.objs)
	if len(pms) != 1 || len(prs) != 1 {
		t.Fatalf("%d PodMonitors and %d PrometheusRules, want 1 each", len(pms), len(prs))
	}
	pm, pr := pms[0], prs[0]
	for _, l := range []map[string]string{pm.Labels, pr.Labels} {
		if l["release"] != "prom" {
			t.Errorf("labels %v: the values' labels (release: prom) missing", l)
		}
	}

	// Which pods it scrapes: those the injector left with the sidecar, by
	// pod label or namespace label, in any namespace; not others.
	spec, _ := injectorSpecOf(t, r.objs)
	byLabel, _ := injectPod(t, spec, podFor(nil), "shop")
	plain := podFor(nil)
	delete(plain.Labels, injector.InjectLabel)
	byNamespace, _ := injectPod(t, spec, plain, "web")
	if !pm.Spec.NamespaceSelector.Any {
		t.Error("PodMonitor limited to some namespaces; sidecars run in any")
	}
	for _, tc := range []struct {
		name string
		pod  labels.Set
		want bool
	}{
		{"injected for its label", byLabel.Labels, true},
		{"injected for its namespace", byNamespace.Labels, true},
		{"no sidecar", labels.Set{"app": "web"}, false},
	} {
		if got := matchesSelector(t, &pm.Spec.Selector, tc.pod); got != tc.want {
			t.Errorf("PodMonitor selects a pod %s (%v): %v, want %v", tc.name, tc.pod, got, tc.want)
		}
	}
	sidecar := byNamespace.Spec.InitContainers[0]
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("endpoints %+v, want one", pm.Spec.PodMetricsEndpoints)
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if portNamed(sidecar, ep.Port) == 0 || ep.Path != "/metrics" || ep.Interval != "15s" {
		t.Errorf("endpoint %+v: want the sidecar's port %v, /metrics, 15s", ep, sidecar.Ports)
	}

	if got, want := pr.Spec, readRuleFile(t); !equalJSON(t, got, want) {
		t.Errorf("PrometheusRule spec differs from %s", alertsFile)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// Every alert has a severity, a summary, a description and a runbook_url
// into its own section of docs/runbooks.md, and promtool unit tests that
// see it fire and see it stay quiet.
func TestAlertsHaveRunbooksAndUnitTests(t *testing.T) {
	runbooks, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S.*)$`).FindAllStringSubmatch(string(runbooks), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	fires, quiet := alertTests(t)
	var alerts []string
	for _, r := range readRuleFile(t).rules() {
		if r.Alert == "" {
			continue
		}
		alerts = append(alerts, r.Alert)
		if !slices.Contains([]string{"critical", "warning"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, r.Labels["severity"])
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: no summary or description", r.Alert)
		}
		url := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(url, runbookBase)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q is not in %s", r.Alert, url, runbookBase)
		case anchor != githubAnchor(r.Alert):
			t.Errorf("%s: runbook_url %q does not point at its own section (#%s)", r.Alert, url, githubAnchor(r.Alert))
		case !anchors[anchor]:
			t.Errorf("%s: %s has no section ## %s", r.Alert, runbooksFile, r.Alert)
		}
		if !fires[r.Alert] || !quiet[r.Alert] {
			t.Errorf("%s: %s tests it firing: %v, staying quiet: %v; want both", r.Alert, alertTestsFile, fires[r.Alert], quiet[r.Alert])
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts")
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// alertTests reads which alerts the promtool tests expect to fire, and
// which they expect quiet at some time.
func alertTests(t *testing.T) (fires, quiet map[string]bool) {
	t.Helper()
	data, err := os.ReadFile(alertTestsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `json:"alertname"`
				ExpAlerts []map[string]any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	fires, quiet = map[string]bool{}, map[string]bool{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	return fires, quiet
}

// Every series the dashboard and the alerts query is one a real sidecar
// exports: the binary, built from this tree and run in dev mode, scraped
// after one lock taken and released. (Prometheus's own `up` and the rule
// file's recording rules apart.) The dashboard covers what it promises.
func TestDashboardAndAlertsQueryExportedSeries(t *testing.T) {
	exported := scrapeSidecar(t)

	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	queried := map[string]bool{}
	exprs := dashboardExprs(dash)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard", len(exprs))
	}
	for _, e := range exprs {
		for _, name := range seriesNames(t, e) {
			queried[name] = true
			if !exported[name] {
				t.Errorf("dashboard queries %s, which the sidecar does not export: %s", name, e)
			}
		}
	}
	for _, name := range []string{
		"sidelock_locks_held", "sidelock_acquire_duration_seconds_count", "sidelock_acquire_duration_seconds_bucket",
		"sidelock_waiters", "sidelock_renewals_total", "sidelock_locks_lost_total", "sidelock_overloaded_total",
		"sidelock_master_up", "sidelock_quorum", "sidelock_build_info",
	} {
		if !queried[name] {
			t.Errorf("the dashboard shows nothing of %s", name)
		}
	}

	recorded := map[string]bool{}
	for _, r := range readRuleFile(t).rules() {
		if r.Record != "" {
			recorded[r.Record] = true
			continue
		}
	}
	for _, r := range readRuleFile(t).rules() {
		for _, name := range seriesNames(t, r.Expr) {
			if !exported[name] && !recorded[name] && name != "up" {
				t.Errorf("rule %s%s queries %s, which the sidecar does not export", r.Alert, r.Record, name)
			}
		}
	}
}

// dashboardExprs collects every PromQL expression of a dashboard: panel
// targets and the metric of label_values() variable queries.
func dashboardExprs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			s, isString := child.(string)
			switch {
			case k == "expr" && isString:
				out = append(out, s)
			case k == "definition" && isString:
				if m := regexp.MustCompile(`^label_values\((.+), *\w+\)$`).FindStringSubmatch(s); m != nil {
					out = append(out, m[1])
				}
			default:
				out = append(out, dashboardExprs(child)...)
			}
		}
	case []any:
		for _, child := range v {
			out = append(out, dashboardExprs(child)...)
		}
	}
	return out
}

// grafanaVars are Grafana's and the dashboard's variables, replaced by
// what they stand for so that Prometheus's parser reads the query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m", "$namespace", ".*", "$pod", ".*")

// seriesNames parses a query as Prometheus does and returns the metric
// names its selectors name.
func seriesNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		t.Errorf("not PromQL: %v\n%s", err, expr)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			if vs.Name == "" {
				t.Errorf("selector without a metric name: %s", vs)
			}
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// scrapeSidecar builds the sidelock binary from this tree, runs it in dev
// mode (3 in-memory masters) on loopback, takes and releases a lock, and
// returns the series names of its /metrics (a histogram's as
// _bucket/_sum/_count).
func scrapeSidecar(t *testing.T) map[string]bool {
	t.Helper()
	bin := sidecartest.Build(t)
	// Within a minute: the machine's cores are shared.
	p := sidecartest.Start(t, bin, os.Environ(), sidecartest.Options{Args: []string{"-dev"}, ReadyWithin: time.Minute})
	api, admin := p.APIAddr(), p.AdminAddr()
	client := &http.Client{Timeout: 10 * time.Second}

	lock := "http://" + api + "/locks/dashboard-test"
	resp, err := client.Post(lock+"?ttl=5s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var grant struct{ Token string }
	_ = json.NewDecoder(resp.Body).Decode(&grant)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || grant.Token == "" {
		t.Fatalf("acquire: HTTP %d, token %q", resp.StatusCode, grant.Token)
	}
	req, _ := http.NewRequest(http.MethodDelete, lock, nil)
	req.Header.Set("Lock-Token", grant.Token)
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	resp, err = client.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		switch f[3] {
		case "histogram":
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[f[2]+suffix] = true
			}
		case "summary":
			for _, suffix := range []string{"", "_sum", "_count"} {
				names[f[2]+suffix] = true
			}
		default:
			names[f[2]] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d series names scraped", len(names))
	}
	return names
}
