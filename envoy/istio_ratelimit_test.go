package envoy_test

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// The names and values of Istio's documented ratelimit setup
// (samples/ratelimit/rate-limit-service.yaml), which the example keeps.
const (
	istioRateLimit       = "ratelimit"
	istioRateLimitConfig = "ratelimit-config"
	ratelimitCommand     = "/bin/ratelimit"
)

// istioRateLimitEnv is the environment of Istio's sample, which the
// example keeps as it is; REDIS_URL is checked against kubernetes/.
var istioRateLimitEnv = map[string]string{
	"LOG_LEVEL":              "debug",
	"REDIS_SOCKET_TYPE":      "tcp",
	"USE_STATSD":             "false",
	"RUNTIME_ROOT":           "/data",
	"RUNTIME_SUBDIRECTORY":   "ratelimit",
	"RUNTIME_WATCH_ROOT":     "false",
	"RUNTIME_IGNOREDOTFILES": "true",
	"HOST":                   "::",
	"GRPC_HOST":              "::",
}

// TestIstioRateLimitService decodes istio/ratelimit/ with the Kubernetes
// API types, strictly, and checks that it is Istio's ratelimit Deployment
// with tollgate's image and envoyproxy/ratelimit's environment.
func TestIstioRateLimitService(t *testing.T) {
	o, err := decodeManifests(filesOfKind(t, "istio-ratelimit"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range istioRateLimitProblems(o, loadDeployFacts(t)) {
		t.Error(p)
	}
}

// istioRateLimitProblems lists what is wrong with the decoded objects o.
func istioRateLimitProblems(o *objects, f deployFacts) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	dep := o.deployment(istioRateLimit)
	if dep == nil || len(dep.Spec.Template.Spec.Containers) != 1 {
		return []string{fmt.Sprintf("no Deployment %s with one container", istioRateLimit)}
	}
	d := o.where[dep]
	pod := dep.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != f.image {
		add("%s: image %q, want tollgate's image %q", d, c.Image, f.image)
	}
	if !slices.Equal(c.Command, []string{ratelimitCommand}) {
		add("%s: command %q, want [%s] as in Istio's sample", d, c.Command, ratelimitCommand)
	}
	if len(c.Args) != 0 {
		add("%s: args %q: Istio's sample has none", d, c.Args)
	}

	// The environment: Istio's, unchanged.
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			add("%s: env %s comes from valueFrom; the sample sets values", d, e.Name)
		}
		env[e.Name] = e.Value
	}
	for name, want := range istioRateLimitEnv {
		if got, ok := env[name]; !ok || got != want {
			add("%s: env %s is %q, want %q as in Istio's sample", d, name, got, want)
		}
	}
	for name := range env {
		if _, ok := istioRateLimitEnv[name]; !ok && name != "REDIS_URL" {
			add("%s: env %s is not in Istio's sample", d, name)
		}
	}
	if p := f.redisURLProblem(env["REDIS_URL"]); p != "" {
		add("%s: env REDIS_URL: %s", d, p)
	}

	// The rules: mounted where RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config
	// puts them, from the ConfigMap, which tollgate loads.
	wantMount := path.Join(env["RUNTIME_ROOT"], env["RUNTIME_SUBDIRECTORY"], "config")
	var mounted bool
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Volumes[i].ConfigMap == nil || pod.Volumes[i].ConfigMap.Name != istioRateLimitConfig {
			continue
		}
		mounted = true
		if m.MountPath != wantMount || m.SubPath != "" {
			add("%s: ConfigMap %s is mounted at %s (subPath %q), want %s = RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config", d, istioRateLimitConfig, m.MountPath, m.SubPath, wantMount)
		}
	}
	if !mounted {
		add("%s: the ConfigMap %s is not mounted", d, istioRateLimitConfig)
	}
	if i := slices.IndexFunc(o.configMaps, func(m *corev1.ConfigMap) bool { return m.Name == istioRateLimitConfig }); i < 0 {
		add("no ConfigMap %s", istioRateLimitConfig)
	} else {
		cm := o.configMaps[i]
		fsys := fstest.MapFS{}
		for name, text := range cm.Data {
			fsys[name] = &fstest.MapFile{Data: []byte(text)}
		}
		tree, err := descriptor.LoadFS(fsys, f.tollgate.opts)
		switch {
		case err != nil:
			add("%s: the rules do not load: %v", o.where[cm], err)
		case !slices.Contains(tree.Domains(), istioRateLimit):
			add("%s: no domain %q, the one Istio's EnvoyFilters use; got %v", o.where[cm], istioRateLimit, tree.Domains())
		}
	}

	// Ports: envoyproxy/ratelimit's HTTP and gRPC ports. The sample's
	// debug port is not published: tollgate's debug listener stays on the
	// pod's loopback.
	var ports []int32
	for _, p := range c.Ports {
		ports = append(ports, p.ContainerPort)
	}
	wantPorts := []int32{int32(f.tollgate.httpPort), int32(f.tollgate.grpcPort)}
	if !slices.Equal(ports, wantPorts) {
		add("%s: container ports %v, want %v (HTTP, gRPC; the debug listener stays on loopback)", d, ports, wantPorts)
	}
	svc := o.service(istioRateLimit)
	if svc == nil {
		add("no Service %s", istioRateLimit)
		return problems
	}
	if deps := o.selected(svc.Namespace, labels.SelectorFromSet(svc.Spec.Selector)); len(svc.Spec.Selector) == 0 || len(deps) != 1 || deps[0] != dep {
		add("%s: Service %s does not select the Deployment %s alone", o.where[svc], svc.Name, dep.Name)
	}
	var svcPorts []int32
	for _, p := range svc.Spec.Ports {
		svcPorts = append(svcPorts, p.Port)
		if _, err := containerPort(pod.Containers, p.TargetPort); err != nil {
			add("%s: Service %s port %s: %v", o.where[svc], svc.Name, p.Name, err)
		}
	}
	if !slices.Equal(svcPorts, wantPorts) {
		add("%s: Service ports %v, want %v", o.where[svc], svcPorts, wantPorts)
	}
	if sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector); err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		add("%s: the Deployment's selector does not select its pods", d)
	}
	return problems
}

// TestBreakingTheIstioRateLimitService shows that the checks above catch
// changes that would make the example stop being Istio's setup with only
// the image swapped.
func TestBreakingTheIstioRateLimitService(t *testing.T) {
	facts := loadDeployFacts(t)
	good := filesOfKind(t, "istio-ratelimit")
	const file = "istio/ratelimit/ratelimit.yaml"
	tests := []struct {
		name, old, new string
		want           string
	}{
		{"original image", "image: tollgate:latest", "image: envoyproxy/ratelimit:master", `image "envoyproxy/ratelimit:master", want tollgate's image "tollgate:latest"`},
		{"misspelled field", "volumeMounts:", "volumeMount:", `unknown field "spec.template.spec.containers[0].volumeMount"`},
		{"mount elsewhere", "mountPath: /data/ratelimit/config", "mountPath: /data/config", "is mounted at /data/config (subPath \"\"), want /data/ratelimit/config"},
		{"subdirectory changed", "value: ratelimit\n", "value: rl\n", `env RUNTIME_SUBDIRECTORY is "rl", want "ratelimit"`},
		{"statsd on", "value: \"false\"\n            - name: RUNTIME_ROOT", "value: \"true\"\n            - name: RUNTIME_ROOT", `env USE_STATSD is "true", want "false"`},
		{"extra env", "- name: LOG_LEVEL", "- name: CONFIG_TYPE\n              value: FILE\n            - name: LOG_LEVEL", "env CONFIG_TYPE is not in Istio's sample"},
		{"redis elsewhere", "value: redis.tollgate.svc.cluster.local:6379", "value: redis:6379", `host "redis" is not the demo Redis Service`},
		{"bad rule", "unit: minute\n          requests_per_unit: 1", "unit: fortnight\n          requests_per_unit: 1", "the rules do not load"},
		{"other domain", "domain: ratelimit", "domain: rl", `no domain "ratelimit"`},
		{"debug port published", "- containerPort: 8081\n", "- containerPort: 8081\n            - containerPort: 6070\n", "container ports [8080 8081 6070], want [8080 8081]"},
		{"service selects nothing", "  selector:\n    app: ratelimit\n  ports:", "  selector:\n    app: rl\n  ports:", "Service ratelimit does not select the Deployment ratelimit alone"},
		{"command dropped", "          command: [\"/bin/ratelimit\"]\n", "", "want [/bin/ratelimit] as in Istio's sample"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := maps.Clone(good)
			text := string(files[file])
			if !strings.Contains(text, tt.old) {
				t.Fatalf("%s has no %q", file, tt.old)
			}
			files[file] = []byte(strings.Replace(text, tt.old, tt.new, 1))
			var problems []string
			if o, err := decodeManifests(files); err != nil {
				problems = []string{err.Error()}
			} else {
				problems = istioRateLimitProblems(o, facts)
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
