package envoy_test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// The types below mirror, with exactly the fields the examples use and
// the JSON names of the upstream Go types, Envoy Gateway's API
// (github.com/envoyproxy/gateway, api/v1alpha1: envoygateway_types.go,
// ratelimit_types.go, shared_types.go and backendtrafficpolicy_types.go,
// main branch as read in November 2026) and the Gateway API
// (sigs.k8s.io/gateway-api, apis/v1 and the v1alpha2 policy references).
// Decoded strictly, a field that is misspelt or that Envoy Gateway does
// not have fails the test; a field the examples start to use must be
// added here, under its upstream name.

// EnvoyGateway is the document envoy-gateway.yaml of the ConfigMap
// envoy-gateway-config.
type EnvoyGateway struct {
	metav1.TypeMeta `json:",inline"`
	EnvoyGatewaySpec
}

// EnvoyGatewaySpec mirrors envoygateway_types.go.
type EnvoyGatewaySpec struct {
	Gateway   *Gateway              `json:"gateway,omitempty"`
	Provider  *EnvoyGatewayProvider `json:"provider,omitempty"`
	Logging   *EnvoyGatewayLogging  `json:"logging,omitempty"`
	RateLimit *RateLimit            `json:"rateLimit,omitempty"`
}

// Gateway mirrors the EnvoyGateway's gateway settings.
type Gateway struct {
	ControllerName string `json:"controllerName,omitempty"`
}

// EnvoyGatewayLogging mirrors envoygateway_types.go.
type EnvoyGatewayLogging struct {
	Level map[string]string `json:"level,omitempty"`
}

// EnvoyGatewayProvider mirrors envoygateway_types.go.
type EnvoyGatewayProvider struct {
	Type       string                          `json:"type"`
	Kubernetes *EnvoyGatewayKubernetesProvider `json:"kubernetes,omitempty"`
}

// EnvoyGatewayKubernetesProvider mirrors envoygateway_types.go.
type EnvoyGatewayKubernetesProvider struct {
	RateLimitDeployment *KubernetesDeploymentSpec `json:"rateLimitDeployment,omitempty"`
}

// KubernetesDeploymentSpec mirrors shared_types.go.
type KubernetesDeploymentSpec struct {
	Container *KubernetesContainerSpec `json:"container,omitempty"`
}

// KubernetesContainerSpec mirrors shared_types.go.
type KubernetesContainerSpec struct {
	Env   []corev1.EnvVar `json:"env,omitempty"`
	Image *string         `json:"image,omitempty"`
}

// RateLimit mirrors envoygateway_types.go.
type RateLimit struct {
	Backend    RateLimitDatabaseBackend `json:"backend"`
	FailClosed bool                     `json:"failClosed"`
}

// RateLimitDatabaseBackend mirrors envoygateway_types.go.
type RateLimitDatabaseBackend struct {
	Type  string                  `json:"type"`
	Redis *RateLimitRedisSettings `json:"redis,omitempty"`
}

// RateLimitRedisSettings mirrors envoygateway_types.go.
type RateLimitRedisSettings struct {
	URL string `json:"url,omitempty"`
}

// BackendTrafficPolicy mirrors backendtrafficpolicy_types.go.
type BackendTrafficPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              BackendTrafficPolicySpec `json:"spec"`
}

// BackendTrafficPolicySpec mirrors backendtrafficpolicy_types.go.
type BackendTrafficPolicySpec struct {
	PolicyTargetReferences `json:",inline"`
	RateLimit              *RateLimitSpec `json:"rateLimit,omitempty"`
}

// PolicyTargetReferences mirrors policy_helpers.go.
type PolicyTargetReferences struct {
	TargetRefs []LocalPolicyTargetReferenceWithSectionName `json:"targetRefs,omitempty"`
}

// LocalPolicyTargetReferenceWithSectionName mirrors the Gateway API's
// v1alpha2 type.
type LocalPolicyTargetReferenceWithSectionName struct {
	Group       string  `json:"group"`
	Kind        string  `json:"kind"`
	Name        string  `json:"name"`
	SectionName *string `json:"sectionName,omitempty"`
}

// RateLimitSpec mirrors ratelimit_types.go.
type RateLimitSpec struct {
	Global *GlobalRateLimit `json:"global,omitempty"`
}

// GlobalRateLimit mirrors ratelimit_types.go.
type GlobalRateLimit struct {
	Rules []RateLimitRule `json:"rules"`
}

// RateLimitRule mirrors ratelimit_types.go.
type RateLimitRule struct {
	ClientSelectors []RateLimitSelectCondition `json:"clientSelectors,omitempty"`
	Limit           RateLimitValue             `json:"limit"`
	Cost            *RateLimitCost             `json:"cost,omitempty"`
}

// RateLimitSelectCondition mirrors ratelimit_types.go, without the
// selectors the examples do not use (methods, path, sourceCIDR).
type RateLimitSelectCondition struct {
	Headers []HeaderMatch `json:"headers,omitempty"`
}

// HeaderMatch mirrors ratelimit_types.go.
type HeaderMatch struct {
	Type  *string `json:"type,omitempty"`
	Name  string  `json:"name"`
	Value *string `json:"value,omitempty"`
}

// RateLimitValue mirrors ratelimit_types.go.
type RateLimitValue struct {
	Requests uint   `json:"requests"`
	Unit     string `json:"unit"`
}

// RateLimitCost mirrors ratelimit_types.go.
type RateLimitCost struct {
	Request  *RateLimitCostSpecifier `json:"request,omitempty"`
	Response *RateLimitCostSpecifier `json:"response,omitempty"`
}

// RateLimitCostSpecifier mirrors ratelimit_types.go.
type RateLimitCostSpecifier struct {
	From     string                 `json:"from"`
	Number   *uint64                `json:"number,omitempty"`
	Metadata *RateLimitCostMetadata `json:"metadata,omitempty"`
}

// RateLimitCostMetadata mirrors ratelimit_types.go.
type RateLimitCostMetadata struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
}

// GatewayClass mirrors the Gateway API's v1 type.
type GatewayClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ControllerName string `json:"controllerName"`
	} `json:"spec"`
}

// GatewayObject mirrors the Gateway API's v1 Gateway (named apart from
// the EnvoyGateway's Gateway settings above).
type GatewayObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		GatewayClassName string     `json:"gatewayClassName"`
		Listeners        []Listener `json:"listeners"`
	} `json:"spec"`
}

// Listener mirrors the Gateway API's v1 type.
type Listener struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
}

// HTTPRoute mirrors the Gateway API's v1 type.
type HTTPRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ParentRefs []ParentReference `json:"parentRefs,omitempty"`
		Hostnames  []string          `json:"hostnames,omitempty"`
		Rules      []HTTPRouteRule   `json:"rules,omitempty"`
	} `json:"spec"`
}

// ParentReference mirrors the Gateway API's v1 type.
type ParentReference struct {
	Group     *string `json:"group,omitempty"`
	Kind      *string `json:"kind,omitempty"`
	Namespace *string `json:"namespace,omitempty"`
	Name      string  `json:"name"`
}

// HTTPRouteRule mirrors the Gateway API's v1 type.
type HTTPRouteRule struct {
	Matches []struct {
		Path *struct {
			Type  *string `json:"type,omitempty"`
			Value *string `json:"value,omitempty"`
		} `json:"path,omitempty"`
	} `json:"matches,omitempty"`
	BackendRefs []struct {
		Name string `json:"name"`
		Port *int32 `json:"port,omitempty"`
	} `json:"backendRefs,omitempty"`
}

// What Envoy Gateway's API accepts, from the kubebuilder enums of
// ratelimit_types.go and envoygateway_types.go.
var (
	egUnits            = []string{"Second", "Minute", "Hour", "Day", "Month", "Year"}
	egHeaderMatchTypes = []string{"Exact", "RegularExpression", "Distinct"}
	egCostFrom         = []string{"Number", "Metadata"}
)

// The names the Envoy Gateway example must use.
const (
	egConfigMap      = "envoy-gateway-config"
	egNamespace      = "envoy-gateway-system"
	egConfigKey      = "envoy-gateway.yaml"
	egAPIVersion     = "gateway.envoyproxy.io/v1alpha1"
	gatewayAPIGroup  = "gateway.networking.k8s.io"
	egControllerName = "gateway.envoyproxy.io/gatewayclass-controller"
)

// egObjects holds the decoded documents under envoy-gateway/.
type egObjects struct {
	configMaps []*corev1.ConfigMap
	config     *EnvoyGateway // envoy-gateway.yaml of egConfigMap
	classes    []*GatewayClass
	gateways   []*GatewayObject
	routes     []*HTTPRoute
	policies   []*BackendTrafficPolicy
	where      map[any]document
}

func (o *egObjects) decode(d document) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(d.data, &tm); err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		o.configMaps, obj = append(o.configMaps, v), v
	case gatewayAPIGroup + "/v1 GatewayClass":
		v := &GatewayClass{}
		o.classes, obj = append(o.classes, v), v
	case gatewayAPIGroup + "/v1 Gateway":
		v := &GatewayObject{}
		o.gateways, obj = append(o.gateways, v), v
	case gatewayAPIGroup + "/v1 HTTPRoute":
		v := &HTTPRoute{}
		o.routes, obj = append(o.routes, v), v
	case egAPIVersion + " BackendTrafficPolicy":
		v := &BackendTrafficPolicy{}
		o.policies, obj = append(o.policies, v), v
	default:
		return fmt.Errorf("%s: apiVersion %q kind %q is not one the test knows", d, tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(d.data, obj); err != nil {
		return fmt.Errorf("%s: %s: %w", d, tm.Kind, err)
	}
	o.where[obj] = d
	if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == egConfigMap {
		text, ok := cm.Data[egConfigKey]
		if !ok {
			return fmt.Errorf("%s: ConfigMap %s has no key %s", d, cm.Name, egConfigKey)
		}
		o.config = &EnvoyGateway{}
		if err := decodeStrict([]byte(text), o.config); err != nil {
			return fmt.Errorf("%s: %s: %w", d, egConfigKey, err)
		}
	}
	return nil
}

// decodeEnvoyGateway decodes every document of files, by path.
func decodeEnvoyGateway(files map[string][]byte) (*egObjects, error) {
	o := &egObjects{where: map[any]document{}}
	return o, decodeDocuments(files, o.decode)
}

// filesOfKind reads the YAML files under envoy/ that kind() puts in k.
func filesOfKind(t *testing.T, k string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, name := range yamlFiles(t) {
		if kind(name) != k {
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	return files
}

// deployFacts are what the drop-in examples must agree with in
// kubernetes/: the image it deploys tollgate from, and the demo Redis.
type deployFacts struct {
	image      string
	redisHosts []string // the names the Redis Service answers to in the cluster
	redisPort  int32
	tollgate   tollgateFacts
}

func loadDeployFacts(t *testing.T) deployFacts {
	t.Helper()
	o := loadManifests(t)
	f := deployFacts{tollgate: loadFacts(t)}
	dep := o.deployment(tollgateName)
	if dep == nil || len(dep.Spec.Template.Spec.Containers) == 0 {
		t.Fatalf("kubernetes/ has no Deployment %s", tollgateName)
	}
	f.image = dep.Spec.Template.Spec.Containers[0].Image
	svc := o.service(redisName)
	if svc == nil || len(svc.Spec.Ports) != 1 {
		t.Fatalf("kubernetes/ has no Service %s with one port", redisName)
	}
	ns := svc.Namespace
	f.redisHosts = []string{redisName + "." + ns, redisName + "." + ns + ".svc", redisName + "." + ns + ".svc.cluster.local"}
	f.redisPort = svc.Spec.Ports[0].Port
	return f
}

// redisURLProblem says what is wrong with a host:port that should name the
// demo Redis Service from another namespace, or "" if nothing is.
func (f deployFacts) redisURLProblem(url string) string {
	host, port, err := net.SplitHostPort(url)
	if err != nil {
		return fmt.Sprintf("Redis URL %q: %v", url, err)
	}
	if !slices.Contains(f.redisHosts, host) {
		return fmt.Sprintf("Redis URL host %q is not the demo Redis Service of kubernetes/ (one of %v)", host, f.redisHosts)
	}
	if port != strconv.Itoa(int(f.redisPort)) {
		return fmt.Sprintf("Redis URL port %s is not the Service's port %d", port, f.redisPort)
	}
	return ""
}

// TestEnvoyGatewayExample decodes envoy-gateway/ strictly and checks that
// Envoy Gateway would run tollgate as its rate-limit service, against the
// demo Redis, for policies whose targets exist.
func TestEnvoyGatewayExample(t *testing.T) {
	o, err := decodeEnvoyGateway(filesOfKind(t, "envoy-gateway"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range envoyGatewayProblems(o, loadDeployFacts(t)) {
		t.Error(p)
	}
}

// envoyGatewayProblems lists what is wrong with the decoded example o.
func envoyGatewayProblems(o *egObjects, f deployFacts) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// The EnvoyGateway configuration.
	i := slices.IndexFunc(o.configMaps, func(m *corev1.ConfigMap) bool { return m.Name == egConfigMap })
	switch {
	case i < 0 || o.config == nil:
		add("no ConfigMap %s with %s", egConfigMap, egConfigKey)
	case o.configMaps[i].Namespace != egNamespace:
		add("%s: ConfigMap %s is in namespace %q, want %q, where Envoy Gateway reads it", o.where[o.configMaps[i]], egConfigMap, o.configMaps[i].Namespace, egNamespace)
	}
	controller := egControllerName
	if eg := o.config; eg != nil {
		if eg.APIVersion != egAPIVersion || eg.Kind != "EnvoyGateway" {
			add("%s: apiVersion %q kind %q, want %s EnvoyGateway", egConfigKey, eg.APIVersion, eg.Kind, egAPIVersion)
		}
		if eg.Gateway != nil && eg.Gateway.ControllerName != "" {
			controller = eg.Gateway.ControllerName
		}
		var image string
		if p := eg.Provider; p == nil || p.Type != "Kubernetes" {
			add("%s: provider.type must be Kubernetes, the provider that deploys the rate-limit service", egConfigKey)
		} else if k := p.Kubernetes; k != nil && k.RateLimitDeployment != nil && k.RateLimitDeployment.Container != nil && k.RateLimitDeployment.Container.Image != nil {
			image = *k.RateLimitDeployment.Container.Image
		}
		if image != f.image {
			add("%s: provider.kubernetes.rateLimitDeployment.container.image is %q, want tollgate's image %q", egConfigKey, image, f.image)
		}
		switch rl := eg.RateLimit; {
		case rl == nil:
			add("%s: no rateLimit: Envoy Gateway deploys no rate-limit service without it", egConfigKey)
		case rl.Backend.Type != "Redis" || rl.Backend.Redis == nil:
			add("%s: rateLimit.backend.type is %q, want Redis with rateLimit.backend.redis", egConfigKey, rl.Backend.Type)
		default:
			if p := f.redisURLProblem(rl.Backend.Redis.URL); p != "" {
				add("%s: rateLimit.backend.redis.url: %s", egConfigKey, p)
			}
		}
	}

	// Gateway API objects.
	for _, gw := range o.gateways {
		j := slices.IndexFunc(o.classes, func(c *GatewayClass) bool { return c.Name == gw.Spec.GatewayClassName })
		if j < 0 {
			add("%s: Gateway %s: no GatewayClass %q", o.where[gw], gw.Name, gw.Spec.GatewayClassName)
		} else if c := o.classes[j]; c.Spec.ControllerName != controller {
			add("%s: GatewayClass %s has controllerName %q, but Envoy Gateway is %q", o.where[c], c.Name, c.Spec.ControllerName, controller)
		}
	}
	for _, r := range o.routes {
		if len(r.Spec.ParentRefs) == 0 {
			add("%s: HTTPRoute %s has no parentRefs", o.where[r], r.Name)
		}
		for _, p := range r.Spec.ParentRefs {
			ns := r.Namespace
			if p.Namespace != nil {
				ns = *p.Namespace
			}
			if o.gateway(ns, p.Name) == nil {
				add("%s: HTTPRoute %s: parentRef %s/%s is no Gateway here", o.where[r], r.Name, ns, p.Name)
			}
		}
	}

	// The policies.
	if len(o.policies) == 0 {
		add("no BackendTrafficPolicy")
	}
	for _, btp := range o.policies {
		d := o.where[btp]
		if len(btp.Spec.TargetRefs) == 0 {
			add("%s: BackendTrafficPolicy %s has no targetRefs", d, btp.Name)
		}
		for _, ref := range btp.Spec.TargetRefs {
			if p := o.targetProblem(btp.Namespace, ref); p != "" {
				add("%s: BackendTrafficPolicy %s: %s", d, btp.Name, p)
			}
		}
		if btp.Spec.RateLimit == nil || btp.Spec.RateLimit.Global == nil || len(btp.Spec.RateLimit.Global.Rules) == 0 {
			add("%s: BackendTrafficPolicy %s has no rateLimit.global.rules", d, btp.Name)
			continue
		}
		for n, rule := range btp.Spec.RateLimit.Global.Rules {
			for _, p := range ruleProblems(rule, f.tollgate.opts) {
				add("%s: BackendTrafficPolicy %s: rule %d: %s", d, btp.Name, n, p)
			}
		}
	}
	return problems
}

func (o *egObjects) gateway(ns, name string) *GatewayObject {
	for _, g := range o.gateways {
		if g.Namespace == ns && g.Name == name {
			return g
		}
	}
	return nil
}

// targetProblem says what is wrong with a policy's targetRef, or "".
func (o *egObjects) targetProblem(ns string, ref LocalPolicyTargetReferenceWithSectionName) string {
	if ref.Group != gatewayAPIGroup {
		return fmt.Sprintf("targetRef group %q, want %s", ref.Group, gatewayAPIGroup)
	}
	switch ref.Kind {
	case "Gateway":
		if o.gateway(ns, ref.Name) == nil {
			return fmt.Sprintf("targets Gateway %s/%s, which is not here", ns, ref.Name)
		}
	case "HTTPRoute":
		if !slices.ContainsFunc(o.routes, func(r *HTTPRoute) bool { return r.Namespace == ns && r.Name == ref.Name }) {
			return fmt.Sprintf("targets HTTPRoute %s/%s, which is not here", ns, ref.Name)
		}
	default:
		return fmt.Sprintf("targetRef kind %q is not Gateway or HTTPRoute", ref.Kind)
	}
	return ""
}

// ruleProblems checks a global rule against the enums and rules of Envoy
// Gateway's API, and checks that tollgate loads a limit with its unit.
func ruleProblems(rule RateLimitRule, opts descriptor.Options) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !slices.Contains(egUnits, rule.Limit.Unit) {
		add("limit.unit %q is not one of %v", rule.Limit.Unit, egUnits)
	}
	if rule.Limit.Requests == 0 {
		add("limit.requests is 0")
	}
	for _, cs := range rule.ClientSelectors {
		if len(cs.Headers) == 0 {
			add("a clientSelector without headers selects nothing here")
		}
		for _, h := range cs.Headers {
			typ := "Exact"
			if h.Type != nil {
				typ = *h.Type
			}
			switch {
			case !slices.Contains(egHeaderMatchTypes, typ):
				add("header %s: type %q is not one of %v", h.Name, typ, egHeaderMatchTypes)
			case typ == "Distinct" && h.Value != nil:
				add("header %s: a Distinct match takes no value", h.Name)
			case typ != "Distinct" && h.Value == nil:
				add("header %s: a %s match needs a value", h.Name, typ)
			}
		}
	}
	if c := rule.Cost; c != nil {
		for _, s := range []struct {
			name string
			spec *RateLimitCostSpecifier
		}{{"request", c.Request}, {"response", c.Response}} {
			switch sp := s.spec; {
			case sp == nil:
			case !slices.Contains(egCostFrom, sp.From):
				add("cost.%s.from %q is not one of %v", s.name, sp.From, egCostFrom)
			case sp.Number != nil && sp.Metadata != nil:
				add("cost.%s: only one of number or metadata can be specified", s.name)
			case sp.From == "Number" && sp.Number == nil, sp.From == "Metadata" && sp.Metadata == nil:
				add("cost.%s: from %s without %s", s.name, sp.From, strings.ToLower(sp.From))
			}
		}
		// A usage report after the response, as Envoy AI Gateway
		// documents it: the request only checks the budget (cost 0), and
		// the response reports a number read from the dynamic metadata.
		if r := c.Response; r != nil {
			if r.From != "Metadata" {
				add("cost.response.from is %s, want Metadata: the usage the response reported", r.From)
			}
			if q := c.Request; q == nil || q.From != "Number" || q.Number == nil || *q.Number != 0 {
				add("cost.response without cost.request number 0: every request would also take 1 (or more) from the budget it reports usage to")
			}
		}
	}
	// Envoy Gateway sends each rule to the rate-limit service as a
	// descriptor with rate_limit {unit: UPPER, requests_per_unit}; load
	// one such rule with tollgate's loader.
	rules := fmt.Sprintf("domain: eg\ndescriptors:\n  - key: rule\n    rate_limit:\n      unit: %s\n      requests_per_unit: %d\n", strings.ToUpper(rule.Limit.Unit), rule.Limit.Requests)
	if _, err := descriptor.LoadFS(fstest.MapFS{"eg.yaml": {Data: []byte(rules)}}, opts); err != nil {
		add("tollgate does not load the limit %d per %s: %v", rule.Limit.Requests, rule.Limit.Unit, err)
	}
	return problems
}

// TestBreakingTheEnvoyGatewayExample shows that the checks above catch
// mistakes Envoy Gateway would reject or run with silently.
func TestBreakingTheEnvoyGatewayExample(t *testing.T) {
	facts := loadDeployFacts(t)
	good := filesOfKind(t, "envoy-gateway")
	const config, policy, tokens = "envoy-gateway/envoy-gateway-config.yaml", "envoy-gateway/policy.yaml", "envoy-gateway/token-budget.yaml"
	tests := []struct {
		name, file, old, new string
		want                 string
	}{
		{"misspelled image field", config, "image: tollgate:latest", "imag: tollgate:latest", `unknown field "provider.kubernetes.rateLimitDeployment.container.imag"`},
		{"image field case", config, "rateLimitDeployment:", "ratelimitDeployment:", `unknown field "provider.kubernetes.ratelimitDeployment"`},
		{"envoyproxy/ratelimit image", config, "image: tollgate:latest", "image: envoyproxy/ratelimit:master", `container.image is "envoyproxy/ratelimit:master", want tollgate's image "tollgate:latest"`},
		{"no image", config, "          container:\n            image: tollgate:latest\n", "          container: {}\n", `container.image is "", want tollgate's image`},
		{"redis elsewhere", config, "url: redis.tollgate.svc.cluster.local:6379", "url: redis.redis-system.svc.cluster.local:6379", `host "redis.redis-system.svc.cluster.local" is not the demo Redis Service`},
		{"redis port", config, "url: redis.tollgate.svc.cluster.local:6379", "url: redis.tollgate.svc.cluster.local:6380", "Redis URL port 6380 is not the Service's port 6379"},
		{"no backend type", config, "type: Redis", "type: Memcache", `rateLimit.backend.type is "Memcache", want Redis`},
		{"unknown policy field", policy, "requests: 100\n", "requests: 100\n            burst: 10\n", `unknown field "spec.rateLimit.global.rules[0].limit.burst"`},
		{"unit Envoy Gateway rejects", policy, "unit: Minute", "unit: minute", `limit.unit "minute" is not one of`},
		{"week", tokens, "unit: Hour", "unit: Week", `limit.unit "Week" is not one of`},
		{"missing route", policy, "kind: HTTPRoute\n      name: backend", "kind: HTTPRoute\n      name: frontend", "targets HTTPRoute default/frontend, which is not here"},
		{"missing gateway", tokens, "kind: Gateway\n      name: eg", "kind: Gateway\n      name: eg2", "targets Gateway default/eg2, which is not here"},
		{"distinct with value", policy, "type: Distinct\n          limit:\n            requests: 100", "type: Distinct\n                  value: x\n          limit:\n            requests: 100", "a Distinct match takes no value"},
		{"header type", policy, "type: Exact", "type: Prefix", `type "Prefix" is not one of`},
		{"cost number and metadata", tokens, "number: 0\n", "number: 0\n              metadata: {namespace: a, key: b}\n", "cost.request: only one of number or metadata"},
		{"cost from", tokens, "from: Metadata", "from: Header", `cost.response.from "Header" is not one of`},
		{"request cost charges", tokens, "number: 0", "number: 1", "cost.response without cost.request number 0"},
		{"no request cost", tokens, "            request:\n              from: Number\n              number: 0\n", "", "cost.response without cost.request number 0"},
		{"response cost constant", tokens, "            response:\n              from: Metadata\n              metadata:\n                namespace: io.envoy.ai_gateway\n                key: llm_total_token\n", "            response:\n              from: Number\n              number: 10\n", "cost.response.from is Number, want Metadata"},
		{"misspelled cost field", tokens, "namespace: io.envoy.ai_gateway", "namespaces: io.envoy.ai_gateway", `unknown field "spec.rateLimit.global.rules[0].cost.response.metadata.namespaces"`},
		{"route on no gateway", policy, "  parentRefs:\n    - name: eg", "  parentRefs:\n    - name: gw", "parentRef default/gw is no Gateway here"},
		{"another controller", policy, "controllerName: gateway.envoyproxy.io/gatewayclass-controller", "controllerName: example.com/other", `controllerName "example.com/other", but Envoy Gateway is`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := maps.Clone(good)
			text := string(files[tt.file])
			if !strings.Contains(text, tt.old) {
				t.Fatalf("%s has no %q", tt.file, tt.old)
			}
			files[tt.file] = []byte(strings.Replace(text, tt.old, tt.new, 1))
			var problems []string
			if o, err := decodeEnvoyGateway(files); err != nil {
				problems = []string{err.Error()}
			} else {
				problems = envoyGatewayProblems(o, facts)
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
