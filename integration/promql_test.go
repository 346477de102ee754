package integration

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promql parses the alerts' and the dashboard's queries as Prometheus
// does.
var promql = parser.NewParser(parser.Options{})

// grafanaVariables are the variables Grafana replaces in a query before
// Prometheus sees it, with a value of the same kind.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// selectors parses a PromQL query, Grafana's variables in it replaced,
// and returns its vector selectors.
func selectors(query string) ([]*parser.VectorSelector, error) {
	expr, err := promql.ParseExpr(grafanaVariables.Replace(query))
	if err != nil {
		return nil, err
	}
	var out []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out, nil
}

// exportedSeries parses a Prometheus text exposition and returns its
// series by metric name; a histogram's are its _bucket, _sum and _count.
func exportedSeries(t *testing.T, exposition string) map[string][]labels.Labels {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(exposition))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string][]labels.Labels{}
	add := func(name string, pairs []*dto.LabelPair, extra ...string) {
		b := labels.NewScratchBuilder(len(pairs) + 1)
		for _, lp := range pairs {
			b.Add(lp.GetName(), lp.GetValue())
		}
		for i := 0; i+1 < len(extra); i += 2 {
			b.Add(extra[i], extra[i+1])
		}
		b.Add(model.MetricNameLabel, name)
		b.Sort()
		out[name] = append(out[name], b.Labels())
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetType() != dto.MetricType_HISTOGRAM {
				add(name, m.GetLabel())
				continue
			}
			add(name+"_sum", m.GetLabel())
			add(name+"_count", m.GetLabel())
			for _, b := range m.GetHistogram().GetBucket() {
				add(name+"_bucket", m.GetLabel(), "le", model.FloatString(b.GetUpperBound()).String())
			}
		}
	}
	return out
}

// selects reports whether vs selects one of series.
func selects(vs *parser.VectorSelector, series []labels.Labels) bool {
	for _, ls := range series {
		matched := true
		for _, m := range vs.LabelMatchers {
			matched = matched && m.Matches(ls.Get(m.Name))
		}
		if matched {
			return true
		}
	}
	return false
}
