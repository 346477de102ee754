package envoy_test

// The configurations here are decoded with protojson, which resolves the
// type of every typed_config from the protos linked into this test: each
// type a YAML file names must be imported below (blank, if the test does
// not use it by name), or decoding fails with "unable to resolve".
import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_to_metadata/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tollgatehq/tollgate/envoy/internal/envoytest"
	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/rls"
)

// The Envoy bootstrap of the demo and the service name docker-compose.yaml
// gives tollgate, which the bootstrap's cluster resolves.
const (
	demoBootstrap  = "envoy.yaml"
	composeService = "tollgate"
	readme         = "README.md"
	configExamples = "../config-examples"
)

// The descriptor entry that makes tollgate charge a descriptor's hits
// whatever the verdict (issue 14): it is removed before matching, so the
// descriptor names the same rule and counter as without it; another value
// is InvalidArgument.
const (
	chargeKey    = "tollgate.charge"
	chargeAlways = "always"
)

// rateLimitMetadata is the access-log operator that prints what tollgate
// put in the ratelimit filter's dynamic metadata under its own key: per
// descriptor, the rule that decided, its code and what remains.
const rateLimitMetadata = "%DYNAMIC_METADATA(" + envoytest.FilterName + ":tollgate)%"

// metadataHits is a hits_addend read from the dynamic metadata, as Envoy
// Gateway writes cost.response: %DYNAMIC_METADATA(namespace:key)%.
var metadataHits = regexp.MustCompile(`^%DYNAMIC_METADATA\([^:()%]+:[^()%]+\)%$`)

// httpProtocolOptions is the key under which a cluster's
// typed_extension_protocol_options hold its upstream HTTP protocol.
const httpProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// loadRules loads config-examples/ with the loader and default options of
// `tollgate serve`.
func loadRules(t *testing.T) *descriptor.Tree {
	t.Helper()
	s, err := app.DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := serveOptions(s)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := descriptor.Load(configExamples, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// serveOptions returns the descriptor options that serve, check and
// explain load rules with, for settings s.
func serveOptions(s app.Settings) (descriptor.Options, error) {
	kind, err := algorithm.ParseKind(s.Rules.DefaultAlgorithm)
	if err != nil {
		return descriptor.Options{}, err
	}
	mode, err := descriptor.ParseFailureMode(s.Failure.Mode)
	if err != nil {
		return descriptor.Options{}, err
	}
	return descriptor.Options{DefaultAlgorithm: kind, DefaultFailureMode: mode, MaxPatterns: s.Limits.MaxPatterns}, nil
}

// defaultPorts returns the gRPC and HTTP ports of `tollgate serve` without
// flags.
func defaultPorts(t *testing.T) (grpcPort, httpPort uint32) {
	t.Helper()
	s, err := app.DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	return addrPort(t, s.Listen.GRPC), addrPort(t, s.Listen.HTTP)
}

func addrPort(t *testing.T, addr string) uint32 {
	t.Helper()
	port, err := portOf(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// yamlFiles lists the YAML files under envoy/, by slash path.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := fs.WalkDir(os.DirFS("."), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(name); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// kind says which test checks a YAML file under envoy/.
func kind(name string) string {
	switch {
	case strings.HasPrefix(name, "kubernetes/"):
		return "kubernetes"
	case strings.HasPrefix(name, "istio/ratelimit/"):
		return "istio-ratelimit"
	case strings.HasPrefix(name, "istio/"):
		return "istio"
	case strings.HasPrefix(name, "envoy-gateway/"):
		return "envoy-gateway"
	case strings.HasPrefix(name, "observability/"):
		return "observability" // integration/deploy_test.go
	case !strings.Contains(name, "/"):
		return "bootstrap"
	}
	return ""
}

// TestEveryFileIsChecked fails when a YAML file under envoy/ is in no
// place a test reads.
func TestEveryFileIsChecked(t *testing.T) {
	files := yamlFiles(t)
	if !slices.Contains(files, demoBootstrap) {
		t.Errorf("%s is missing", demoBootstrap)
	}
	for _, name := range files {
		if kind(name) == "" {
			t.Errorf("%s: no test reads YAML files there; put bootstraps in envoy/, manifests in envoy/kubernetes/, envoy/istio/ (EnvoyFilters), envoy/istio/ratelimit/ or envoy/envoy-gateway/", name)
		}
	}
}

func loadBootstrap(t *testing.T, name string) *bootstrapv3.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := envoytest.DecodeYAML(data, &b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &b
}

// TestBootstraps decodes every Envoy bootstrap under envoy/, validates it
// with every typed_config inside, and checks its rate-limit wiring.
func TestBootstraps(t *testing.T) {
	tree := loadRules(t)
	grpcPort, _ := defaultPorts(t)
	for _, name := range yamlFiles(t) {
		if kind(name) != "bootstrap" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b := loadBootstrap(t, name)
			if err := envoytest.Validate(b); err != nil {
				t.Fatal(err)
			}
			for _, p := range wiringProblems(b, tree, grpcPort) {
				t.Error(p)
			}
		})
	}
}

// rateLimitFilter is a ratelimit filter in an HTTP connection manager.
type rateLimitFilter struct {
	hcm    *hcmv3.HttpConnectionManager
	config *ratelimitv3.RateLimit
}

// rateLimitFilters returns every HTTP rate-limit filter of b.
func rateLimitFilters(b *bootstrapv3.Bootstrap) ([]rateLimitFilter, error) {
	hcms, err := envoytest.Find[*hcmv3.HttpConnectionManager](b)
	if err != nil {
		return nil, err
	}
	var out []rateLimitFilter
	for _, hcm := range hcms {
		for _, f := range hcm.GetHttpFilters() {
			if f.GetName() != envoytest.FilterName {
				continue
			}
			var rl ratelimitv3.RateLimit
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				return nil, fmt.Errorf("filter %s: %w", f.GetName(), err)
			}
			out = append(out, rateLimitFilter{hcm: hcm, config: &rl})
		}
	}
	return out, nil
}

// wiringProblems checks what Envoy's own validation does not: that the
// rate-limit filter reaches tollgate, that tollgate's answers reach the
// client unchanged, and that every domain it names is configured.
func wiringProblems(b *bootstrapv3.Bootstrap, tree *descriptor.Tree, grpcPort uint32) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	filters, err := rateLimitFilters(b)
	if err != nil {
		return []string{err.Error()}
	}
	if len(filters) == 0 {
		add("no %s filter", envoytest.FilterName)
	}
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	for _, f := range filters {
		rl := f.config
		problems = append(problems, filterProblems(rl, tree)...)
		hf := f.hcm.GetHttpFilters()
		if last := hf[len(hf)-1]; !last.GetTypedConfig().MessageIs(&routerv3.Router{}) {
			add("the last HTTP filter is %s, want the router", last.GetName())
		}
		if f.hcm.GetLocalReplyConfig() != nil {
			add("local_reply_config is set: it could rewrite tollgate's 429 body and content-type")
		}
		problems = append(problems, routeProblems(f, tree)...)
		problems = append(problems, accessLogProblems(f.hcm)...)

		name := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		c := clusters[name]
		if c == nil {
			add("rate_limit_service names cluster %q, which is not defined", name)
			continue
		}
		problems = append(problems, clusterProblems(c, composeService, grpcPort)...)
	}
	return problems
}

// filterProblems checks the configuration of one rate-limit filter.
func filterProblems(rl *ratelimitv3.RateLimit, tree *descriptor.Tree) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if tree.Domain(rl.GetDomain()) == nil {
		add("filter domain %q is not configured in config-examples (configured: %s)", rl.GetDomain(), strings.Join(tree.Domains(), ", "))
	}
	if v := rl.GetRateLimitService().GetTransportApiVersion(); v != corev3.ApiVersion_V3 {
		add("rate_limit_service.transport_api_version is %s, want V3", v)
	}
	if rl.GetTimeout().AsDuration().Milliseconds() != 20 {
		add("timeout is %v, want 20ms (tollgate's deadline budget assumes Envoy's default)", rl.GetTimeout().AsDuration())
	}
	if rl.GetFailureModeDeny() {
		add("failure_mode_deny is true, want false (fail open)")
	}
	if rl.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		add("enable_x_ratelimit_headers is %s, want DRAFT_VERSION_03", rl.GetEnableXRatelimitHeaders())
	}
	if !rl.GetRateLimitedAsResourceExhausted() {
		add("rate_limited_as_resource_exhausted is false, want true")
	}
	if rl.GetDisableXEnvoyRatelimitedHeader() {
		add("disable_x_envoy_ratelimited_header is true: a 429 would not carry x-envoy-ratelimited")
	}
	if s := rl.GetRateLimitedStatus(); s != nil && s.GetCode() != 429 {
		add("rate_limited_status is %s, want unset or 429", s.GetCode())
	}
	if len(rl.GetRateLimits()) > 0 {
		add("filter-level rate_limits would override every route's rate_limits")
	}
	return problems
}

// routeProblems checks every route the filter's connection manager
// serves: the domains they name, and that no route strips the headers
// tollgate adds.
func routeProblems(f rateLimitFilter, tree *descriptor.Tree) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	rc := f.hcm.GetRouteConfig()
	if rc == nil {
		return []string{"the connection manager has no inline route_config"}
	}
	if len(rc.GetResponseHeadersToRemove()) > 0 {
		add("route_config %s removes response headers %v", rc.GetName(), rc.GetResponseHeadersToRemove())
	}
	for _, vh := range rc.GetVirtualHosts() {
		if len(vh.GetResponseHeadersToRemove()) > 0 {
			add("virtual host %s removes response headers %v", vh.GetName(), vh.GetResponseHeadersToRemove())
		}
		for i, rt := range vh.GetRoutes() {
			if len(rt.GetResponseHeadersToRemove()) > 0 {
				add("route %s removes response headers %v", routeName(rt, i), rt.GetResponseHeadersToRemove())
			}
			pr, err := envoytest.PerRoute(vh, rt)
			if err != nil {
				add("route %s: %v", routeName(rt, i), err)
				continue
			}
			if d := pr.GetDomain(); d != "" && tree.Domain(d) == nil {
				add("route %s: domain %q is not configured in config-examples", routeName(rt, i), d)
			}
			if rt.GetRoute() == nil && (pr != nil || len(vh.GetRateLimits()) > 0) {
				add("route %s does not forward to a cluster: Envoy never rate-limits it", routeName(rt, i))
			}
			for _, p := range tokenBudgetProblems(pr.GetRateLimits()) {
				add("route %s: %s", routeName(rt, i), p)
			}
		}
	}
	return problems
}

// tokenBudgetProblems checks the stream-done entries of a route's
// per-route rate_limits: each reports a number read from the dynamic
// metadata, carries tollgate.charge=always so that a report larger than
// what remains still counts, and charges the counter of a request-time
// check of cost 0, so that the next request sees the report.
func tokenBudgetProblems(limits []*routev3.RateLimit) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for i, rl := range limits {
		if !rl.GetApplyOnStreamDone() {
			continue
		}
		if f := rl.GetHitsAddend().GetFormat(); !metadataHits.MatchString(f) {
			add("rate_limits[%d] (stream done): hits_addend.format is %q, want %%DYNAMIC_METADATA(namespace:key)%%, the usage the response reported", i, f)
		}
		var marker *routev3.RateLimit_Action_GenericKey
		var rest []*routev3.RateLimit_Action
		for _, a := range rl.GetActions() {
			if gk := a.GetGenericKey(); gk != nil && gk.GetDescriptorKey() == chargeKey {
				marker = gk
				continue
			}
			rest = append(rest, a)
		}
		switch {
		case marker == nil:
			add("rate_limits[%d] (stream done): no generic_key %s=%s: tollgate would drop a report larger than what remains under a rule charged admitted", i, chargeKey, chargeAlways)
		case marker.GetDescriptorValue() != chargeAlways:
			add("rate_limits[%d] (stream done): %s=%s: tollgate answers InvalidArgument to any value but %s", i, chargeKey, marker.GetDescriptorValue(), chargeAlways)
		}
		checked := slices.ContainsFunc(limits, func(c *routev3.RateLimit) bool {
			return !c.GetApplyOnStreamDone() && c.GetHitsAddend().GetNumber() != nil && c.GetHitsAddend().GetNumber().GetValue() == 0 &&
				slices.EqualFunc(c.GetActions(), rest, func(a, b *routev3.RateLimit_Action) bool { return proto.Equal(a, b) })
		})
		if !checked {
			add("rate_limits[%d] (stream done): no request-time entry with hits_addend 0 and the same actions: the report charges a counter that no request is checked against", i)
		}
	}
	return problems
}

// accessLogProblems checks that the connection manager logs which rule
// decided each request.
func accessLogProblems(hcm *hcmv3.HttpConnectionManager) []string {
	for _, al := range hcm.GetAccessLog() {
		m, err := al.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return []string{fmt.Sprintf("access log %s: %v", al.GetName(), err)}
		}
		js, err := protojson.Marshal(m)
		if err != nil {
			return []string{fmt.Sprintf("access log %s: %v", al.GetName(), err)}
		}
		if strings.Contains(string(js), rateLimitMetadata) {
			return nil
		}
	}
	return []string{fmt.Sprintf("connection manager %s: no access log prints %s, the rule that decided", hcm.GetStatPrefix(), rateLimitMetadata)}
}

// clusterProblems checks the cluster of the rate-limit service.
func clusterProblems(c *clusterv3.Cluster, address string, grpcPort uint32) []string {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("cluster %s: ", c.GetName())+fmt.Sprintf(format, args...))
	}
	var opts upstreamhttpv3.HttpProtocolOptions
	if a := c.GetTypedExtensionProtocolOptions()[httpProtocolOptions]; a == nil {
		add("no typed_extension_protocol_options %s: gRPC needs HTTP/2", httpProtocolOptions)
	} else if err := a.UnmarshalTo(&opts); err != nil {
		add("%s: %v", httpProtocolOptions, err)
	} else if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		add("%s does not set explicit_http_config.http2_protocol_options: gRPC needs HTTP/2", httpProtocolOptions)
	}
	endpoints := 0
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			endpoints++
			if sa.GetPortValue() != grpcPort {
				add("endpoint %s:%d: want port %d, tollgate's gRPC port", sa.GetAddress(), sa.GetPortValue(), grpcPort)
			}
			if sa.GetAddress() != address {
				add("endpoint address %q, want %q, tollgate's service", sa.GetAddress(), address)
			}
		}
	}
	if endpoints == 0 {
		add("no endpoints")
	}
	hc := c.GetHealthChecks()
	if len(hc) == 0 || hc[0].GetGrpcHealthCheck() == nil {
		add("no gRPC health check")
	} else if got := hc[0].GetGrpcHealthCheck().GetServiceName(); got != rls.ServiceName {
		add("health check service_name %q, want %q, which tollgate reports NOT_SERVING while draining", got, rls.ServiceName)
	}
	return problems
}

func routeName(rt *routev3.Route, i int) string {
	if rt.GetName() != "" {
		return rt.GetName()
	}
	return fmt.Sprintf("%d (%s)", i, matchString(rt.GetMatch()))
}

// matchString describes a route match as the README's table does.
func matchString(m *routev3.RouteMatch) string {
	switch {
	case m.GetPath() != "":
		return "path " + m.GetPath()
	case m.GetPathSeparatedPrefix() != "":
		return "path_separated_prefix " + m.GetPathSeparatedPrefix()
	default:
		return "prefix " + m.GetPrefix()
	}
}

// sample is one row of the README's table of sample requests.
type sample struct {
	line                              int
	request                           string // the cell as written
	req                               envoytest.Request
	route, domain, descriptors, rules string
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// readSamples parses the table in envoy/README.md whose header is
// | request | route | domain | descriptors | rules |.
func readSamples(text string) ([]sample, error) {
	var out []sample
	in := false
	for i, line := range strings.Split(text, "\n") {
		cells := tableCells(line)
		if cells == nil {
			if in {
				break
			}
			continue
		}
		if !in {
			if slices.Equal(cells, []string{"request", "route", "domain", "descriptors", "rules"}) {
				in = true
			}
			continue
		}
		if strings.Trim(cells[0], "-: ") == "" {
			continue // the delimiter row
		}
		if len(cells) != 5 {
			return nil, fmt.Errorf("README.md:%d: want 5 cells, got %d", i+1, len(cells))
		}
		req, err := parseRequest(cells[0])
		if err != nil {
			return nil, fmt.Errorf("README.md:%d: %w", i+1, err)
		}
		out = append(out, sample{line: i + 1, request: cells[0], req: req,
			route: cells[1], domain: cells[2], descriptors: cells[3], rules: cells[4]})
	}
	if len(out) == 0 {
		return nil, errors.New("README.md: no table of sample requests (| request | route | domain | descriptors | rules |)")
	}
	return out, nil
}

func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") || len(line) < 2 {
		return nil
	}
	cells := strings.Split(line[1:len(line)-1], "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// parseRequest reads a request cell: `METHOD /path?query`, then
// `header: value` and `from ADDRESS` spans in any order.
func parseRequest(cell string) (envoytest.Request, error) {
	spans := codeSpan.FindAllStringSubmatch(cell, -1)
	if len(spans) == 0 {
		return envoytest.Request{}, fmt.Errorf("request cell %q has no `METHOD /path`", cell)
	}
	var req envoytest.Request
	method, path, ok := strings.Cut(spans[0][1], " ")
	if !ok || !strings.HasPrefix(path, "/") {
		return req, fmt.Errorf("request cell %q: want `METHOD /path` first", cell)
	}
	req.Method, req.Path, req.Headers = method, path, map[string]string{}
	for _, s := range spans[1:] {
		if addr, ok := strings.CutPrefix(s[1], "from "); ok {
			req.RemoteAddress = addr
			continue
		}
		name, value, ok := strings.Cut(s[1], ": ")
		if !ok {
			return req, fmt.Errorf("request cell %q: %q is neither `name: value` nor `from ADDRESS`", cell, s[1])
		}
		req.Headers[strings.ToLower(name)] = value
	}
	return req, nil
}

// expected computes the route, domain, descriptors and rules cells of a
// sample request against a bootstrap's first rate-limit filter.
func expected(f rateLimitFilter, tree *descriptor.Tree, req envoytest.Request) (route, domain, descs, rules string, err error) {
	vhs := f.hcm.GetRouteConfig().GetVirtualHosts()
	if len(vhs) != 1 {
		return "", "", "", "", fmt.Errorf("want one virtual host, got %d", len(vhs))
	}
	rt, err := envoytest.Route(vhs[0], req)
	if err != nil {
		return "", "", "", "", err
	}
	if rt == nil {
		return "no route", "", "(none)", "no call", nil
	}
	call, err := envoytest.RateLimitCall(f.config, vhs[0], req)
	if err != nil {
		return "", "", "", "", err
	}
	route, domain = "`"+matchString(rt.GetMatch())+"`", "`"+call.Domain+"`"
	done, err := envoytest.StreamDoneCall(f.config, vhs[0], req)
	if err != nil {
		return "", "", "", "", err
	}
	if len(call.Descriptors)+len(done.Descriptors) == 0 {
		return route, domain, "(none)", "no call", nil
	}
	var ds, rs []string
	d := tree.Domain(call.Domain)
	for _, c := range []struct {
		prefix string
		call   envoytest.Call
	}{{"", call}, {"on stream done: ", done}} {
		for i, entries := range c.call.Descriptors {
			cell := c.prefix + "`" + envoytest.String(entries) + "`"
			if h := c.call.Hits[i]; h != nil {
				cell += " hits `" + envoytest.HitsString(h) + "`"
			}
			ds = append(ds, cell)
			x := d.Explain(withoutChargeMarker(entries))
			if x.Rule == nil {
				rs = append(rs, "no rule")
				continue
			}
			rs = append(rs, "`"+x.Rule.Path+"`: "+outcome(x.Rule))
		}
	}
	return route, domain, strings.Join(ds, "<br>"), strings.Join(rs, "<br>"), nil
}

// withoutChargeMarker returns entries without tollgate.charge=always, as
// tollgate matches them.
func withoutChargeMarker(entries []descriptor.Entry) []descriptor.Entry {
	return slices.DeleteFunc(slices.Clone(entries), func(e descriptor.Entry) bool {
		return e.Key == chargeKey && e.Value == chargeAlways
	})
}

// outcome describes what a rule does, as the README's rules column says.
func outcome(r *descriptor.Rule) string {
	switch {
	case r.Action != descriptor.ActionLimit:
		return r.Action.String()
	case r.Unlimited:
		return "unlimited"
	}
	limits := make([]string, len(r.Limits))
	for i, l := range r.Limits {
		limits[i] = l.String()
	}
	return strings.Join(limits, "; ")
}

// sampleProblems checks every row of the README's table against the
// bootstrap, and that every route with rate_limits has a row.
func sampleProblems(b *bootstrapv3.Bootstrap, tree *descriptor.Tree, samples []sample) []string {
	filters, err := rateLimitFilters(b)
	if err != nil {
		return []string{err.Error()}
	}
	if len(filters) != 1 {
		return []string{fmt.Sprintf("want one %s filter, got %d", envoytest.FilterName, len(filters))}
	}
	f := filters[0]
	var problems []string
	covered := map[string]bool{}
	for _, s := range samples {
		route, domain, descs, rules, err := expected(f, tree, s.req)
		if err != nil {
			problems = append(problems, fmt.Sprintf("README.md:%d %s: %v", s.line, s.request, err))
			continue
		}
		covered[route] = true
		for _, c := range []struct{ name, got, want string }{
			{"route", s.route, route}, {"domain", s.domain, domain},
			{"descriptors", s.descriptors, descs}, {"rules", s.rules, rules},
		} {
			if c.got != c.want {
				problems = append(problems, fmt.Sprintf("README.md:%d %s: %s cell is %q, want %q", s.line, s.request, c.name, c.got, c.want))
			}
		}
	}
	for _, vh := range f.hcm.GetRouteConfig().GetVirtualHosts() {
		for _, rt := range vh.GetRoutes() {
			if len(rt.GetRoute().GetRateLimits()) > 0 && !covered["`"+matchString(rt.GetMatch())+"`"] {
				problems = append(problems, fmt.Sprintf("README.md: no sample request for route `%s`", matchString(rt.GetMatch())))
			}
		}
	}
	return problems
}

// TestReadmeSamples checks the README's table of sample requests: the
// route each takes, the domain and descriptors Envoy sends, and the rule
// tollgate resolves each descriptor to, as `tollgate explain` would.
func TestReadmeSamples(t *testing.T) {
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := readSamples(string(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sampleProblems(loadBootstrap(t, demoBootstrap), loadRules(t), samples) {
		t.Error(p)
	}
}

// TestBreakingTheDemo shows that the checks above catch the mistakes that
// would make the demo fail silently in a real Envoy.
func TestBreakingTheDemo(t *testing.T) {
	tree := loadRules(t)
	grpcPort, _ := defaultPorts(t)
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	samples, err := readSamples(string(text))
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(demoBootstrap)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		old, new string // a textual edit of envoy.yaml
		edit     func(*bootstrapv3.Bootstrap)
		want     string // a problem, or the decoding error, that must be reported
	}{{
		name: "misspelled field",
		old:  "failure_mode_deny: false", new: "failure_mode_denied: false",
		want: `unknown field "failure_mode_denied"`,
	}, {
		name: "unknown typed_config type",
		old:  "envoy.extensions.filters.http.router.v3.Router", new: "envoy.extensions.filters.http.router.v3.Routr",
		want: `unable to resolve "type.googleapis.com/envoy.extensions.filters.http.router.v3.Routr"`,
	}, {
		name: "duplicate key",
		old:  "      connect_timeout: 1s\n", new: "      connect_timeout: 1s\n      connect_timeout: 2s\n",
		want: `key "connect_timeout" already set in map`,
	}, {
		name: "cluster without HTTP/2",
		edit: func(b *bootstrapv3.Bootstrap) {
			delete(cluster(b, "tollgate").TypedExtensionProtocolOptions, httpProtocolOptions)
		},
		want: "cluster tollgate: no typed_extension_protocol_options envoy.extensions.upstreams.http.v3.HttpProtocolOptions: gRPC needs HTTP/2",
	}, {
		name: "HTTP/1 cluster",
		old:  "            http2_protocol_options: {}", new: "            http_protocol_options: {}",
		want: "cluster tollgate: envoy.extensions.upstreams.http.v3.HttpProtocolOptions does not set explicit_http_config.http2_protocol_options: gRPC needs HTTP/2",
	}, {
		name: "wrong port",
		old:  "address: tollgate, port_value: 8081", new: "address: tollgate, port_value: 8080",
		want: "cluster tollgate: endpoint tollgate:8080: want port 8081, tollgate's gRPC port",
	}, {
		name: "V2 transport",
		old:  "transport_api_version: V3", new: "transport_api_version: AUTO",
		want: "rate_limit_service.transport_api_version is AUTO, want V3",
	}, {
		name: "router not last",
		edit: func(b *bootstrapv3.Bootstrap) {
			editHCM(b, "demo", func(m *hcmv3.HttpConnectionManager) {
				hf := m.HttpFilters
				hf[len(hf)-2], hf[len(hf)-1] = hf[len(hf)-1], hf[len(hf)-2]
			})
		},
		want: "the last HTTP filter is envoy.filters.http.ratelimit, want the router",
	}, {
		name: "unknown domain",
		old:  "domain: access", new: "domain: acces",
		want: `filter domain "acces" is not configured in config-examples (configured: access, algorithms, endpoints, legacy, llm, tenants, tiers)`,
	}, {
		name: "unknown route domain",
		old:  "domain: tiers", new: "domain: tier",
		want: `route 2 (prefix /catalog): domain "tier" is not configured in config-examples`,
	}, {
		name: "missing cluster",
		old:  "envoy_grpc: { cluster_name: tollgate }", new: "envoy_grpc: { cluster_name: ratelimit }",
		want: `rate_limit_service names cluster "ratelimit", which is not defined`,
	}, {
		name: "headers stripped",
		edit: func(b *bootstrapv3.Bootstrap) {
			editHCM(b, "demo", func(m *hcmv3.HttpConnectionManager) {
				m.GetRouteConfig().ResponseHeadersToRemove = []string{"retry-after"}
			})
		},
		want: "route_config demo removes response headers [retry-after]",
	}, {
		name: "health check of another service",
		old:  "service_name: envoy.service.ratelimit.v3.RateLimitService", new: "service_name: ratelimit",
		want: `cluster tollgate: health check service_name "ratelimit", want "envoy.service.ratelimit.v3.RateLimitService", which tollgate reports NOT_SERVING while draining`,
	}, {
		name: "misspelled header",
		old:  "header_name: x-tier,", new: "header_name: x-teir,",
		want: "descriptors cell is \"`[tier=free, api_key=k2]`\", want \"(none)\"",
	}, {
		name: "direct response on a limited route",
		edit: func(b *bootstrapv3.Bootstrap) {
			editHCM(b, "demo", func(m *hcmv3.HttpConnectionManager) {
				rt := m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[4]
				rt.Action = &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{Status: 200}}
			})
		},
		want: "route 4 (path /export) does not forward to a cluster: Envoy never rate-limits it",
	}, {
		name: "report without the charge marker",
		old:  "                                    - generic_key: { descriptor_key: tollgate.charge, descriptor_value: always }\n", new: "",
		want: "route 5 (prefix /v1/): rate_limits[1] (stream done): no generic_key tollgate.charge=always",
	}, {
		name: "charge marker value",
		old:  "descriptor_key: tollgate.charge, descriptor_value: always", new: "descriptor_key: tollgate.charge, descriptor_value: \"true\"",
		want: "route 5 (prefix /v1/): rate_limits[1] (stream done): tollgate.charge=true: tollgate answers InvalidArgument",
	}, {
		name: "report on another counter",
		old:  "                                    - request_headers: { header_name: x-api-key, descriptor_key: api_key }\n                                    - generic_key", new: "                                    - request_headers: { header_name: x-user-id, descriptor_key: api_key }\n                                    - generic_key",
		want: "route 5 (prefix /v1/): rate_limits[1] (stream done): no request-time entry with hits_addend 0 and the same actions",
	}, {
		name: "check that charges",
		old:  "hits_addend: { number: 0 }", new: "hits_addend: { number: 1 }",
		want: "no request-time entry with hits_addend 0",
	}, {
		name: "report of a constant",
		old:  `hits_addend: { format: "%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%" }`, new: "hits_addend: { number: 100 }",
		want: `rate_limits[1] (stream done): hits_addend.format is "", want %DYNAMIC_METADATA(namespace:key)%`,
	}, {
		name: "report at request time",
		old:  "                                  apply_on_stream_done: true\n", new: "",
		want: "descriptors cell is",
	}, {
		name: "hits_addend on the route",
		edit: func(b *bootstrapv3.Bootstrap) {
			editHCM(b, "demo", func(m *hcmv3.HttpConnectionManager) {
				rt := m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[5]
				var pr ratelimitv3.RateLimitPerRoute
				if err := rt.GetTypedPerFilterConfig()[envoytest.FilterName].UnmarshalTo(&pr); err != nil {
					panic(err)
				}
				rt.GetRoute().RateLimits, pr.RateLimits = pr.RateLimits, nil
				a, err := anypb.New(&pr)
				if err != nil {
					panic(err)
				}
				rt.TypedPerFilterConfig[envoytest.FilterName] = a
			})
		},
		want: "Envoy ignores it",
	}, {
		name: "no access log of the deciding rule",
		old:  "DYNAMIC_METADATA(envoy.filters.http.ratelimit:tollgate)", new: "DYNAMIC_METADATA(envoy.filters.http.ratelimit)",
		want: "connection manager demo: no access log prints %DYNAMIC_METADATA(envoy.filters.http.ratelimit:tollgate)%",
	}, {
		name: "wrong generic_key",
		old:  "descriptor_value: report", new: "descriptor_value: reports",
		want: "rules cell is \"`client=report`: 5 per 5 minutes, fixed_window\", want \"no rule\"",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := string(good)
			if tt.old != "" {
				if !strings.Contains(text, tt.old) {
					t.Fatalf("envoy.yaml has no %q", tt.old)
				}
				text = strings.Replace(text, tt.old, tt.new, 1)
			}
			var b bootstrapv3.Bootstrap
			var problems []string
			if err := envoytest.DecodeYAML([]byte(text), &b); err != nil {
				problems = []string{err.Error()}
			} else {
				if tt.edit != nil {
					tt.edit(&b)
				}
				if err := envoytest.Validate(&b); err != nil {
					problems = append(problems, err.Error())
				}
				problems = append(problems, wiringProblems(&b, tree, grpcPort)...)
				problems = append(problems, sampleProblems(&b, tree, samples)...)
			}
			for _, p := range problems {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Errorf("no problem reported contains %q; got:\n%s", tt.want, strings.Join(problems, "\n"))
		})
	}
}

func cluster(b *bootstrapv3.Bootstrap, name string) *clusterv3.Cluster {
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == name {
			return c
		}
	}
	panic("no cluster " + name)
}

// editHCM applies edit to the connection manager of listener name and
// packs the result back into its filter.
func editHCM(b *bootstrapv3.Bootstrap, name string, edit func(*hcmv3.HttpConnectionManager)) {
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() != name {
			continue
		}
		f := l.GetFilterChains()[0].GetFilters()[0]
		var m hcmv3.HttpConnectionManager
		if err := f.GetTypedConfig().UnmarshalTo(&m); err != nil {
			panic(err)
		}
		edit(&m)
		a, err := anypb.New(&m)
		if err != nil {
			panic(err)
		}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
		return
	}
	panic("no listener " + name)
}
