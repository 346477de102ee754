package envoy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tollgatehq/tollgate/envoy/internal/envoytest"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// envoyFilter is Istio's EnvoyFilter (networking.istio.io/v1alpha3), the
// part of its schema these recipes may use. Decoding is strict, so a field
// outside it, or a misspelled one, fails the test; patch values are Envoy
// protos and are decoded as such.
type envoyFilter struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		WorkloadSelector *struct {
			Labels map[string]string `json:"labels"`
		} `json:"workloadSelector,omitempty"`
		ConfigPatches []configPatch `json:"configPatches"`
		Priority      int32         `json:"priority,omitempty"`
	} `json:"spec"`
}

type configPatch struct {
	ApplyTo string `json:"applyTo"`
	Match   *struct {
		Context string `json:"context,omitempty"`
		Proxy   *struct {
			ProxyVersion string            `json:"proxyVersion,omitempty"`
			Metadata     map[string]string `json:"metadata,omitempty"`
		} `json:"proxy,omitempty"`
		Listener           *listenerMatch `json:"listener,omitempty"`
		RouteConfiguration *struct {
			PortNumber uint32 `json:"portNumber,omitempty"`
			PortName   string `json:"portName,omitempty"`
			Gateway    string `json:"gateway,omitempty"`
			Name       string `json:"name,omitempty"`
			Vhost      *struct {
				Name  string `json:"name,omitempty"`
				Route *struct {
					Name   string `json:"name,omitempty"`
					Action string `json:"action,omitempty"`
				} `json:"route,omitempty"`
			} `json:"vhost,omitempty"`
		} `json:"routeConfiguration,omitempty"`
		Cluster *struct {
			PortNumber uint32 `json:"portNumber,omitempty"`
			Service    string `json:"service,omitempty"`
			Subset     string `json:"subset,omitempty"`
			Name       string `json:"name,omitempty"`
		} `json:"cluster,omitempty"`
	} `json:"match,omitempty"`
	Patch struct {
		Operation   string          `json:"operation"`
		Value       json.RawMessage `json:"value,omitempty"`
		FilterClass string          `json:"filterClass,omitempty"`
	} `json:"patch"`
}

type listenerMatch struct {
	PortNumber  uint32            `json:"portNumber,omitempty"`
	Name        string            `json:"name,omitempty"`
	FilterChain *filterChainMatch `json:"filterChain,omitempty"`
}

type filterChainMatch struct {
	Name                 string `json:"name,omitempty"`
	Sni                  string `json:"sni,omitempty"`
	TransportProtocol    string `json:"transportProtocol,omitempty"`
	ApplicationProtocols string `json:"applicationProtocols,omitempty"`
	DestinationPort      uint32 `json:"destinationPort,omitempty"`
	Filter               *struct {
		Name      string `json:"name,omitempty"`
		SubFilter *struct {
			Name string `json:"name,omitempty"`
		} `json:"subFilter,omitempty"`
	} `json:"filter,omitempty"`
}

// filterChain returns the filter-chain match of l, or nil.
func (l *listenerMatch) filterChain() *filterChainMatch {
	if l == nil {
		return nil
	}
	return l.FilterChain
}

// The values Istio's EnvoyFilter enums take.
var (
	istioApplyTo = []string{"LISTENER", "FILTER_CHAIN", "NETWORK_FILTER", "HTTP_FILTER", "ROUTE_CONFIGURATION",
		"VIRTUAL_HOST", "HTTP_ROUTE", "CLUSTER", "EXTENSION_CONFIG", "BOOTSTRAP", "LISTENER_FILTER"}
	istioOperations  = []string{"MERGE", "ADD", "REMOVE", "INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "REPLACE"}
	istioContexts    = []string{"ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY"}
	istioRouteAction = []string{"ANY", "ROUTE", "REDIRECT", "DIRECT_RESPONSE"}
)

const (
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	routerFilterName = "envoy.filters.http.router"
)

// patchedValue is a patch value decoded into its Envoy proto.
type patchedValue struct {
	patch *configPatch
	msg   proto.Message
}

// TestIstioEnvoyFilters decodes every EnvoyFilter under istio/ strictly,
// decodes each patch value into the Envoy proto its applyTo implies,
// validates it, and checks the rate-limit wiring: the filter sits before
// the router and reaches tollgate's Kubernetes Service over HTTP/2, and
// the route actions produce descriptors that config-examples/ limits.
func TestIstioEnvoyFilters(t *testing.T) {
	tree := loadRules(t)
	grpcPort, _ := defaultPorts(t)
	o := loadManifests(t)
	svc := o.service(tollgateName)
	if svc == nil {
		t.Fatalf("no Service %q in kubernetes/", tollgateName)
	}
	address := svc.Name + "." + svc.Namespace + ".svc.cluster.local"
	seen := 0
	for _, name := range yamlFiles(t) {
		if kind(name) != "istio" {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range splitDocuments(name, data) {
			seen++
			t.Run(d.String(), func(t *testing.T) {
				for _, p := range envoyFilterProblems(d.data, tree, address, grpcPort) {
					t.Error(p)
				}
			})
		}
	}
	if seen == 0 {
		t.Fatal("no EnvoyFilter under istio/")
	}
}

// envoyFilterProblems decodes and checks one EnvoyFilter document.
func envoyFilterProblems(data []byte, tree *descriptor.Tree, address string, grpcPort uint32) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var ef envoyFilter
	if err := decodeStrict(data, &ef); err != nil {
		return []string{err.Error()}
	}
	if ef.APIVersion != "networking.istio.io/v1alpha3" || ef.Kind != "EnvoyFilter" {
		add("apiVersion %q kind %q, want networking.istio.io/v1alpha3 EnvoyFilter", ef.APIVersion, ef.Kind)
	}
	if ef.Metadata.Name == "" || ef.Metadata.Namespace == "" {
		add("metadata needs a name and a namespace")
	}
	if ef.Spec.WorkloadSelector == nil || len(ef.Spec.WorkloadSelector.Labels) == 0 {
		add("no workloadSelector: the patches would apply to every proxy of namespace %s", ef.Metadata.Namespace)
	}
	var values []patchedValue
	for i := range ef.Spec.ConfigPatches {
		p := &ef.Spec.ConfigPatches[i]
		msg, err := decodePatch(p)
		if err != nil {
			add("configPatches[%d] (%s): %v", i, p.ApplyTo, err)
			continue
		}
		values = append(values, patchedValue{patch: p, msg: msg})
	}
	if len(problems) > 0 {
		return problems
	}

	clusters := map[string]*clusterv3.Cluster{}
	var filter *ratelimitv3.RateLimit
	var filterContext string
	var limits [][]*routev3.RateLimit
	for _, v := range values {
		switch m := v.msg.(type) {
		case *clusterv3.Cluster:
			clusters[m.GetName()] = m
		case *hcmv3.HttpFilter:
			if m.GetName() != envoytest.FilterName {
				continue
			}
			var rl ratelimitv3.RateLimit
			if err := m.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				add("%s: %v", m.GetName(), err)
				continue
			}
			if filter != nil {
				add("more than one %s filter", envoytest.FilterName)
			}
			filter, filterContext = &rl, v.patch.Match.Context
			fc := v.patch.Match.Listener.filterChain()
			if v.patch.Patch.Operation != "INSERT_BEFORE" || fc.filterName() != hcmFilterName || fc.subFilterName() != routerFilterName {
				add("the %s patch must be INSERT_BEFORE the subFilter %s of the filter %s, so that the router stays last", envoytest.FilterName, routerFilterName, hcmFilterName)
			}
		case *routev3.VirtualHost:
			limits = append(limits, m.GetRateLimits())
		case *routev3.Route:
			limits = append(limits, m.GetRoute().GetRateLimits())
		}
	}
	if filter == nil {
		add("no HTTP_FILTER patch adds %s", envoytest.FilterName)
		return problems
	}
	problems = append(problems, filterProblems(filter, tree)...)
	name := filter.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	if c := clusters[name]; c == nil {
		add("rate_limit_service names cluster %q, which no CLUSTER patch adds", name)
	} else {
		problems = append(problems, clusterProblems(c, address, grpcPort)...)
	}
	for _, v := range values {
		switch v.patch.ApplyTo {
		case "VIRTUAL_HOST", "HTTP_ROUTE":
			if v.patch.Match.Context != filterContext {
				add("%s patch in context %s, but the filter is in %s", v.patch.ApplyTo, v.patch.Match.Context, filterContext)
			}
		case "CLUSTER":
			if want := map[string]string{"GATEWAY": "GATEWAY", "SIDECAR_INBOUND": "SIDECAR_OUTBOUND"}[filterContext]; v.patch.Match.Context != want {
				add("CLUSTER patch in context %s: the proxy calls tollgate as an outbound client, want %s", v.patch.Match.Context, want)
			}
		}
	}
	if len(limits) == 0 {
		add("no VIRTUAL_HOST or HTTP_ROUTE patch adds rate_limits: the filter would never call tollgate")
	}
	d := tree.Domain(filter.GetDomain())
	for _, rls := range limits {
		if len(rls) == 0 {
			add("a VIRTUAL_HOST or HTTP_ROUTE patch adds no rate_limits")
		}
		for i, rl := range rls {
			req := requestFor(rl)
			descs, err := envoytest.Descriptors([]*routev3.RateLimit{rl}, req)
			if err != nil {
				add("rate_limits[%d]: %v", i, err)
				continue
			}
			if len(descs) != 1 {
				add("rate_limits[%d]: a request with every header it reads produces no descriptor", i)
				continue
			}
			if x := d.Explain(descs[0]); x.Rule == nil && d != nil {
				add("rate_limits[%d]: %s matches no rule of domain %s: %s", i, envoytest.String(descs[0]), filter.GetDomain(), x.Reason)
			}
		}
	}
	return problems
}

func (fc *filterChainMatch) filterName() string {
	if fc == nil || fc.Filter == nil {
		return ""
	}
	return fc.Filter.Name
}

func (fc *filterChainMatch) subFilterName() string {
	if fc == nil || fc.Filter == nil || fc.Filter.SubFilter == nil {
		return ""
	}
	return fc.Filter.SubFilter.Name
}

// requestFor returns a request that carries every header the actions of
// rl read, each with the value "sample", from a public address.
func requestFor(rl *routev3.RateLimit) envoytest.Request {
	req := envoytest.Request{Path: "/", Headers: map[string]string{}, RemoteAddress: "203.0.113.9"}
	for _, a := range rl.GetActions() {
		if rh := a.GetRequestHeaders(); rh != nil {
			req.Headers[strings.ToLower(rh.GetHeaderName())] = "sample"
		}
	}
	return req
}

// decodePatch checks a patch's enums and decodes its value into the Envoy
// proto its applyTo implies, strictly, and validates it. A MERGE value is
// a fragment: it is merged, as Istio merges it, into the smallest valid
// object of its type, and the result is validated.
func decodePatch(p *configPatch) (proto.Message, error) {
	if !slices.Contains(istioApplyTo, p.ApplyTo) {
		return nil, fmt.Errorf("applyTo %q is not one of %v", p.ApplyTo, istioApplyTo)
	}
	if !slices.Contains(istioOperations, p.Patch.Operation) {
		return nil, fmt.Errorf("operation %q is not one of %v", p.Patch.Operation, istioOperations)
	}
	if p.Match == nil || !slices.Contains(istioContexts, p.Match.Context) {
		return nil, fmt.Errorf("match.context must be one of %v", istioContexts)
	}
	if rc := p.Match.RouteConfiguration; rc != nil && rc.Vhost != nil && rc.Vhost.Route != nil &&
		rc.Vhost.Route.Action != "" && !slices.Contains(istioRouteAction, rc.Vhost.Route.Action) {
		return nil, fmt.Errorf("route action %q is not one of %v", rc.Vhost.Route.Action, istioRouteAction)
	}
	var msg, base proto.Message
	switch p.ApplyTo {
	case "HTTP_FILTER":
		msg = &hcmv3.HttpFilter{}
	case "CLUSTER":
		msg = &clusterv3.Cluster{}
	case "VIRTUAL_HOST":
		msg = &routev3.VirtualHost{}
		name := "vhost"
		if rc := p.Match.RouteConfiguration; rc != nil && rc.Vhost != nil && rc.Vhost.Name != "" {
			name = rc.Vhost.Name
		}
		base = &routev3.VirtualHost{Name: name, Domains: []string{"*"}}
	case "HTTP_ROUTE":
		msg = &routev3.Route{}
		base = &routev3.Route{
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "inbound|8080||"}}},
		}
	default:
		return nil, fmt.Errorf("applyTo %s: %w", p.ApplyTo, envoytest.ErrUnsupported)
	}
	if err := envoytest.DecodeJSON(p.Patch.Value, msg); err != nil {
		return nil, err
	}
	if p.Patch.Operation == "MERGE" {
		if base == nil {
			return nil, fmt.Errorf("MERGE into %s: %w", p.ApplyTo, envoytest.ErrUnsupported)
		}
		proto.Merge(base, msg)
		msg = base
	}
	if err := envoytest.Validate(msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// TestBreakingTheEnvoyFilters shows that the checks above catch mistakes
// that Istio would accept and Envoy would reject, or that would leave
// requests unlimited without an error anywhere.
func TestBreakingTheEnvoyFilters(t *testing.T) {
	tree := loadRules(t)
	grpcPort, _ := defaultPorts(t)
	const address = "tollgate.tollgate.svc.cluster.local"
	tests := []struct {
		name, file, old, new string
		want                 string
	}{
		{"misspelled Envoy field", "istio/gateway.yaml", "failure_mode_deny: false", "failure_mode_deny_: false", `unknown field "failure_mode_deny_"`},
		{"misspelled Istio field", "istio/gateway.yaml", "subFilter:", "subfilter:", `unknown field "spec.configPatches[1].match.listener.filterChain.filter.subfilter"`},
		{"unknown applyTo", "istio/gateway.yaml", "applyTo: VIRTUAL_HOST", "applyTo: VHOST", `applyTo "VHOST" is not one of`},
		{"unknown operation", "istio/sidecar.yaml", "operation: INSERT_BEFORE", "operation: INSERT", `operation "INSERT" is not one of`},
		{"filter after the router", "istio/gateway.yaml", "operation: INSERT_BEFORE", "operation: INSERT_AFTER", "must be INSERT_BEFORE the subFilter envoy.filters.http.router"},
		{"cluster without HTTP/2", "istio/sidecar.yaml", "http2_protocol_options: {}", "http_protocol_options: {}", "does not set explicit_http_config.http2_protocol_options"},
		{"wrong service address", "istio/gateway.yaml", "address: tollgate.tollgate.svc.cluster.local", "address: tollgate.default.svc.cluster.local", `endpoint address "tollgate.default.svc.cluster.local", want "tollgate.tollgate.svc.cluster.local"`},
		{"wrong port", "istio/gateway.yaml", "port_value: 8081", "port_value: 8080", "want port 8081, tollgate's gRPC port"},
		{"cluster name mismatch", "istio/sidecar.yaml", "cluster_name: tollgate-ratelimit\n              transport_api_version", "cluster_name: ratelimit\n              transport_api_version", `names cluster "ratelimit", which no CLUSTER patch adds`},
		{"unknown domain", "istio/sidecar.yaml", "domain: tenants", "domain: tenant", `filter domain "tenant" is not configured`},
		{"descriptor matches no rule", "istio/sidecar.yaml", "descriptor_key: user", "descriptor_key: usr", "[tenant=sample, usr=sample] matches no rule of domain tenants"},
		{"no workload selector", "istio/gateway.yaml", "  workloadSelector:\n    labels:\n      istio: ingressgateway\n", "", "no workloadSelector"},
		{"route patch in the wrong context", "istio/sidecar.yaml", "context: SIDECAR_INBOUND\n        routeConfiguration", "context: SIDECAR_OUTBOUND\n        routeConfiguration", "HTTP_ROUTE patch in context SIDECAR_OUTBOUND, but the filter is in SIDECAR_INBOUND"},
		{"invalid merged route", "istio/sidecar.yaml", "descriptor_key: tenant\n", "descriptor_key: \"\"\n", "invalid RateLimit_Action_RequestHeaders.DescriptorKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tt.old) {
				t.Fatalf("%s has no %q", tt.file, tt.old)
			}
			edited := strings.Replace(string(data), tt.old, tt.new, 1)
			problems := envoyFilterProblems([]byte(edited), tree, address, grpcPort)
			for _, p := range problems {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Errorf("no problem reported contains %q; got:\n%s", tt.want, strings.Join(problems, "\n"))
		})
	}
}
