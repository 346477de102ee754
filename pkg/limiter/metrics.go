package limiter

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// meterName is the instrumentation scope of the engine's instruments.
const meterName = "github.com/tollgatehq/tollgate/pkg/limiter"

// result is the outcome of one descriptor, the "result" attribute of
// tollgate_decisions.
type result uint8

// The results.
const (
	resultOK              result = iota // counted and within the limit
	resultOverLimit                     // counted and over (quota mode too)
	resultShadowOverLimit               // over, answered OK by shadow mode
	resultAllowlist                     // allow list: not counted
	resultDenylist                      // deny list: OVER_LIMIT
	resultShadowDenylist                // deny list, answered OK by shadow mode
	resultUnmatched                     // no rule with a limit, or unknown domain
	resultUnlimited                     // unlimited rule: not counted
	resultReplaced                      // every limit replaced by another rule
	resultDegraded                      // store failed: answered by the failure mode
	resultPenalized                     // counted and blocked by a penalty's cooldown
	resultNoRules                       // no rules loaded yet: answered ErrNoRules
	numResults
)

var resultNames = [numResults]string{
	resultOK:              "ok",
	resultOverLimit:       "over_limit",
	resultShadowOverLimit: "shadow_over_limit",
	resultAllowlist:       "allowlist",
	resultDenylist:        "denylist",
	resultShadowDenylist:  "shadow_denylist",
	resultUnmatched:       "unmatched",
	resultUnlimited:       "unlimited",
	resultReplaced:        "replaced",
	resultDegraded:        "degraded",
	resultPenalized:       "penalized",
	resultNoRules:         "no_rules",
}

// The attribute values used where there is no domain or rule name. Metrics
// never carry raw descriptor values, so their cardinality is bounded by the
// configuration.
const (
	unknownDomain = "(unknown)"
	overrideLimit = "(override)"
)

// maxLabelSets bounds the attribute sets cached per tree snapshot.
const maxLabelSets = 1 << 14

// metrics holds the engine's instruments.
type metrics struct {
	decisions   metric.Int64Counter
	pastLimit   metric.Int64Counter
	storeErrors metric.Int64Counter
	untrusted   metric.Int64Counter
	// envoyIgnored counts Envoy limit overrides not honoured.
	envoyIgnored metric.Int64Counter
	latency      metric.Float64Histogram

	unknownDomain, noRules []metric.AddOption
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter(meterName)
	var m metrics
	var err error
	m.decisions, err = meter.Int64Counter("tollgate_decisions",
		metric.WithDescription("Descriptors decided, by domain, rule, limit name and result."),
		metric.WithUnit("{descriptor}"))
	if err != nil {
		return nil, err
	}
	m.pastLimit, err = meter.Int64Counter("tollgate_charged_past_limit_hits",
		metric.WithDescription("Hits charged though over the limit (charge always), by domain, rule and limit name."),
		metric.WithUnit("{hit}"))
	if err != nil {
		return nil, err
	}
	m.storeErrors, err = meter.Int64Counter("tollgate_store_errors",
		metric.WithDescription("Store batches that failed and were answered by the failure mode."),
		metric.WithUnit("{error}"))
	if err != nil {
		return nil, err
	}
	m.untrusted, err = meter.Int64Counter("tollgate_untrusted_charges_refused",
		metric.WithDescription("Requests refused for a charge marker or a refund from a source that is not trusted (--trusted-sources)."),
		metric.WithUnit("{request}"))
	if err != nil {
		return nil, err
	}
	m.envoyIgnored, err = meter.Int64Counter("tollgate_envoy_limits_ignored",
		metric.WithDescription("Envoy per-descriptor limit overrides not honoured, as the algorithms cannot take the limit they give: the rule's own limits decided."),
		metric.WithUnit("{descriptor}"))
	if err != nil {
		return nil, err
	}
	m.latency, err = meter.Float64Histogram("tollgate_check_duration",
		metric.WithDescription("Time to decide one rate-limit request."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1))
	if err != nil {
		return nil, err
	}
	unknown := newLabelSet(unknownDomain, "", "")
	m.unknownDomain, m.noRules = unknown.opts[resultUnmatched], unknown.opts[resultNoRules]
	return &m, nil
}

// labelSet holds the measurement options of one (domain, rule, limit) for
// every result of tollgate_decisions, and for
// tollgate_charged_past_limit_hits.
type labelSet struct {
	opts      [numResults][]metric.AddOption
	pastLimit []metric.AddOption
	// obs hears the decisions of the identity, when an Observer is set
	// and the identity is a limit's or an override's.
	obs RuleObserver
}

func newLabelSet(domain, rule, limit string) *labelSet {
	ls := new(labelSet)
	ls.pastLimit = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String("domain", domain),
		attribute.String("rule", rule),
		attribute.String("limit", limit),
	))}
	for r := range numResults {
		set := attribute.NewSet(
			attribute.String("domain", domain),
			attribute.String("rule", rule),
			attribute.String("limit", limit),
			attribute.String("result", resultNames[r]),
		)
		ls.opts[r] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	return ls
}

// labelCache caches label sets for one tree snapshot, keyed by pointers into
// the tree, so a reload drops them with the old tree.
type labelCache struct {
	tree *descriptor.Tree
	sets sync.Map // key: *descriptor.Limit, *descriptor.Rule, *descriptor.Domain or an override key
	n    atomic.Int64
	// observer, if not nil, gives the label sets of limits and
	// overrides their RuleObserver.
	observer Observer
}

// The cache keys of override decisions: the rule matched, or the domain.
type (
	overrideRuleKey   struct{ r *descriptor.Rule }
	overrideDomainKey struct{ d *descriptor.Domain }
)

// labelsFor returns the label cache of tree, replacing the cache of an
// older snapshot.
func (l *Limiter) labelsFor(tree *descriptor.Tree) *labelCache {
	c := l.labels.Load()
	if c != nil && c.tree == tree {
		return c
	}
	nc := &labelCache{tree: tree, observer: l.observer}
	if l.labels.CompareAndSwap(c, nc) {
		return nc
	}
	if c = l.labels.Load(); c != nil && c.tree == tree {
		return c
	}
	return nc
}

// set returns the label set of a descriptor of domain that resolved to
// st.rule and, when counted, was reported against lim.
func (c *labelCache) set(domain string, dom *descriptor.Domain, st *descState, lim *descriptor.Limit) *labelSet {
	var key any
	var rule, name string
	observed := false             // a limit's or an override's identity
	var decides *descriptor.Limit // the limit of the identity, nil for an override
	switch {
	case (st.override || st.admin != nil) && st.rule != nil:
		key, rule, name, observed = overrideRuleKey{st.rule}, st.rule.Path, overrideLimit, true
	case st.override:
		key, name, observed = overrideDomainKey{dom}, overrideLimit, true
	case lim != nil:
		key, rule, name, observed, decides = lim, st.rule.Path, lim.Name, true, lim
	case st.rule != nil:
		key, rule = st.rule, st.rule.Path
	default:
		key = dom
	}
	if v, ok := c.sets.Load(key); ok {
		return v.(*labelSet)
	}
	ls := newLabelSet(domain, rule, name)
	if observed && c.observer != nil {
		ls.obs = c.observer.Rule(domain, rule, name, decides)
	}
	if c.n.Load() < maxLabelSets {
		if v, loaded := c.sets.LoadOrStore(key, ls); loaded {
			ls = v.(*labelSet)
		} else {
			c.n.Add(1)
		}
	}
	return ls
}
