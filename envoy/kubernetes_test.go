package envoy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/tollgatehq/tollgate/pkg/app"
	"github.com/tollgatehq/tollgate/pkg/cli"
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/httpapi"
)

var update = flag.Bool("update", false, "rewrite kubernetes/rules.yaml from config-examples/")

// The names the manifests give tollgate's parts.
const (
	namespace     = "tollgate"
	rulesFile     = "kubernetes/rules.yaml"
	rulesMap      = "tollgate-rules"
	tollgateName  = "tollgate"
	redisName     = "redis"
	nonRootUID    = 65532
	readinessPath = "/readyz"
	livenessPath  = "/healthz"
)

// document is one YAML document of a manifest file.
type document struct {
	file string
	line int // of the document's first line
	data []byte
}

func (d document) String() string { return fmt.Sprintf("%s:%d", d.file, d.line) }

// splitDocuments splits a multi-document YAML file on its "---" lines and
// drops documents that hold only comments.
func splitDocuments(file string, data []byte) []document {
	var docs []document
	var cur bytes.Buffer
	start, empty := 1, true
	flush := func(next int) {
		if !empty {
			docs = append(docs, document{file: file, line: start, data: bytes.Clone(cur.Bytes())})
		}
		cur.Reset()
		start, empty = next, true
	}
	for i, line := range strings.SplitAfter(string(data), "\n") {
		if strings.TrimRight(line, " \r\n") == "---" {
			flush(i + 2)
			continue
		}
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			empty = false
		}
		cur.WriteString(line)
	}
	flush(0)
	return docs
}

// decodeStrict decodes a YAML document into v as the Kubernetes API server
// reads a manifest: field names are case-sensitive, and an unknown or
// duplicate field is an error. (encoding/json, under yaml.UnmarshalStrict,
// would take "subfilter" for "subFilter".)
func decodeStrict(data []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// objects holds the decoded manifests by kind.
type objects struct {
	namespaces  []*corev1.Namespace
	configMaps  []*corev1.ConfigMap
	services    []*corev1.Service
	deployments []*appsv1.Deployment
	pdbs        []*policyv1.PodDisruptionBudget
	policies    []*networkingv1.NetworkPolicy
	alerts      []*prometheusRule
	where       map[any]document
}

// decodeManifest decodes one document strictly into the API type its
// apiVersion and kind name.
func (o *objects) decode(d document) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(d.data, &tm); err != nil {
		return fmt.Errorf("%s: %w", d, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		v := &corev1.Namespace{}
		o.namespaces, obj = append(o.namespaces, v), v
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		o.configMaps, obj = append(o.configMaps, v), v
	case "v1 Service":
		v := &corev1.Service{}
		o.services, obj = append(o.services, v), v
	case "apps/v1 Deployment":
		v := &appsv1.Deployment{}
		o.deployments, obj = append(o.deployments, v), v
	case "policy/v1 PodDisruptionBudget":
		v := &policyv1.PodDisruptionBudget{}
		o.pdbs, obj = append(o.pdbs, v), v
	case "networking.k8s.io/v1 NetworkPolicy":
		v := &networkingv1.NetworkPolicy{}
		o.policies, obj = append(o.policies, v), v
	case "monitoring.coreos.com/v1 PrometheusRule":
		v := &prometheusRule{}
		o.alerts, obj = append(o.alerts, v), v
	default:
		return fmt.Errorf("%s: apiVersion %q kind %q is not one the test knows", d, tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(d.data, obj); err != nil {
		return fmt.Errorf("%s: %s: %w", d, tm.Kind, err)
	}
	o.where[obj] = d
	return nil
}

// manifestFiles reads the manifests under kubernetes/ by path.
func manifestFiles(t *testing.T) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, name := range yamlFiles(t) {
		if kind(name) != "kubernetes" {
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

// decodeManifests decodes every document of files.
func decodeManifests(files map[string][]byte) (*objects, error) {
	o := &objects{where: map[any]document{}}
	return o, decodeDocuments(files, o.decode)
}

// decodeDocuments hands every document of files, in path order, to decode
// and joins the errors.
func decodeDocuments(files map[string][]byte, decode func(document) error) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(files)) {
		for _, d := range splitDocuments(name, files[name]) {
			if err := decode(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func loadManifests(t *testing.T) *objects {
	t.Helper()
	o, err := decodeManifests(manifestFiles(t))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *objects) deployment(name string) *appsv1.Deployment {
	for _, d := range o.deployments {
		if d.Name == name {
			return d
		}
	}
	return nil
}

func (o *objects) service(name string) *corev1.Service {
	for _, s := range o.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// selected returns the deployments whose pods sel selects.
func (o *objects) selected(ns string, sel labels.Selector) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range o.deployments {
		if d.Namespace == ns && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// tollgateFacts are what the manifests must agree with: tollgate's own
// flags, ports, HTTP handler and rules.
type tollgateFacts struct {
	flags              map[string]bool
	grpcPort, httpPort uint32
	handler            http.Handler
	examples           map[string][]byte // config-examples/ by file name
	opts               descriptor.Options
}

func loadFacts(t *testing.T) tollgateFacts {
	t.Helper()
	f := tollgateFacts{flags: serveFlags(t), handler: httpapi.New(httpapi.Options{}), examples: map[string][]byte{}}
	f.grpcPort, f.httpPort = defaultPorts(t)
	entries, err := os.ReadDir(configExamples)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if f.examples[e.Name()], err = os.ReadFile(path.Join(configExamples, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	s, err := app.DefaultSettings()
	if err != nil {
		t.Fatal(err)
	}
	if f.opts, err = serveOptions(s); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestKubernetesManifests decodes every manifest under kubernetes/ with
// the Kubernetes API types, strictly, and checks that the objects fit
// together and fit tollgate.
func TestKubernetesManifests(t *testing.T) {
	for _, p := range manifestProblems(loadManifests(t), loadFacts(t)) {
		t.Error(p)
	}
}

// manifestProblems lists what is wrong with the decoded manifests o.
func manifestProblems(o *objects, f tollgateFacts) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// Namespaces.
	if len(o.namespaces) != 1 || o.namespaces[0].Name != namespace {
		add("want one Namespace %q", namespace)
	}
	for obj, d := range o.where {
		m, err := metaOf(obj)
		if err != nil {
			add("%v", err)
			continue
		}
		if _, isNS := obj.(*corev1.Namespace); !isNS && m.Namespace != namespace {
			add("%s: %s is in namespace %q, want %q", d, m.Name, m.Namespace, namespace)
		}
	}

	// Selectors and ports between objects.
	for _, dep := range o.deployments {
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		if err != nil {
			add("%s: %v", o.where[dep], err)
		} else if sel.Empty() || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
			add("%s: Deployment %s: selector %s does not select its own pods %v", o.where[dep], dep.Name, sel, dep.Spec.Template.Labels)
		}
	}
	for _, svc := range o.services {
		deps := o.selected(svc.Namespace, labels.SelectorFromSet(svc.Spec.Selector))
		if len(svc.Spec.Selector) == 0 || len(deps) != 1 {
			add("%s: Service %s selects %d Deployments, want 1", o.where[svc], svc.Name, len(deps))
			continue
		}
		for _, p := range svc.Spec.Ports {
			if _, err := containerPort(deps[0].Spec.Template.Spec.Containers, p.TargetPort); err != nil {
				add("%s: Service %s port %s: %v", o.where[svc], svc.Name, p.Name, err)
			}
		}
	}
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			add("%s: %v", o.where[pdb], err)
			continue
		}
		deps := o.selected(pdb.Namespace, sel)
		if len(deps) != 1 {
			add("%s: PodDisruptionBudget %s selects %d Deployments, want 1", o.where[pdb], pdb.Name, len(deps))
			continue
		}
		replicas := int32(1)
		if deps[0].Spec.Replicas != nil {
			replicas = *deps[0].Spec.Replicas
		}
		if m := pdb.Spec.MinAvailable; m == nil || m.Type != intstr.Int || m.IntVal >= replicas {
			add("%s: PodDisruptionBudget %s: minAvailable must be a number below the %d replicas, or no pod could ever be evicted", o.where[pdb], pdb.Name, replicas)
		}
	}

	// Security, of every container.
	for _, dep := range o.deployments {
		pod := dep.Spec.Template.Spec
		for _, c := range pod.Containers {
			ps := securityProblems(pod.SecurityContext, c.SecurityContext)
			if dep.Name == tollgateName {
				if uid := runAsUser(pod.SecurityContext, c.SecurityContext); uid == nil || *uid != nonRootUID {
					ps = append(ps, fmt.Sprintf("runAsUser must be %d, the image's user", nonRootUID))
				}
			}
			for _, p := range ps {
				add("%s: container %s/%s: %s", o.where[dep], dep.Name, c.Name, p)
			}
		}
	}

	dep := o.deployment(tollgateName)
	if dep == nil {
		return append(problems, fmt.Sprintf("no Deployment %q", tollgateName))
	}
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return append(problems, fmt.Sprintf("Deployment %s: want one container, got %d", tollgateName, len(pod.Containers)))
	}
	c := pod.Containers[0]
	args, err := parseArgs(c.Args)
	if err != nil {
		return append(problems, err.Error())
	}

	// Flags and environment that tollgate serve knows.
	for _, name := range slices.Sorted(maps.Keys(args)) {
		if !f.flags[name] {
			add("tollgate serve has no flag --%s", name)
		}
	}
	for _, e := range c.Env {
		if name, ok := strings.CutPrefix(e.Name, "TOLLGATE_"); ok {
			secret := name == "REDIS_PASSWORD" || name == "ADMIN_TOKEN"
			if flagName := strings.ToLower(strings.ReplaceAll(name, "_", "-")); !f.flags[flagName] && !secret {
				add("env %s names no setting of tollgate serve", e.Name)
			}
			if secret && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
				add("env %s: a secret, want it from a Secret (valueFrom.secretKeyRef)", e.Name)
			}
		}
	}

	// Ports.
	for _, p := range []struct {
		flag, name string
		port       uint32
	}{{"grpc-addr", "grpc", f.grpcPort}, {"http-addr", "http", f.httpPort}} {
		want := p.port
		if v, ok := args[p.flag]; ok {
			if want, err = portOf(v); err != nil {
				add("--%s: %v", p.flag, err)
			}
		}
		if got, err := containerPort(pod.Containers, intstr.FromString(p.name)); err != nil {
			add("container port %q: %v", p.name, err)
		} else if uint32(got) != want {
			add("container port %q is %d, tollgate listens on %d", p.name, got, want)
		}
	}
	if svc := o.service(tollgateName); svc == nil {
		add("no Service %q", tollgateName)
	} else {
		i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "grpc" })
		switch {
		case i < 0 || svc.Spec.Ports[i].AppProtocol == nil || *svc.Spec.Ports[i].AppProtocol != "grpc":
			add("Service %s: want a port named grpc with appProtocol grpc, so that meshes speak HTTP/2 to it", svc.Name)
		case uint32(svc.Spec.Ports[i].Port) != f.grpcPort:
			add("Service %s: grpc port %d, want %d like Envoy's configurations", svc.Name, svc.Spec.Ports[i].Port, f.grpcPort)
		}
	}

	// The admin API stays on the pod's loopback, for kubectl port-forward.
	if addr, ok := args["admin-addr"]; ok {
		if host, _, err := net.SplitHostPort(addr); err != nil || !net.ParseIP(host).IsLoopback() {
			add("--admin-addr %q: want the pod's loopback, which kubectl port-forward reaches", addr)
		}
	}
	problems = append(problems, policyProblems(o, dep)...)

	// Probes, on paths tollgate's HTTP handler really serves.
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readinessProbe", c.ReadinessProbe, readinessPath}, {"livenessProbe", c.LivenessProbe, livenessPath}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			add("%s: want an httpGet probe", p.name)
			continue
		}
		get := p.probe.HTTPGet
		if get.Path != p.path {
			add("%s: path %q, want %q", p.name, get.Path, p.path)
		}
		if port, err := containerPort(pod.Containers, get.Port); err != nil || uint32(port) != f.httpPort {
			add("%s: port %s is not tollgate's HTTP port %d", p.name, get.Port.String(), f.httpPort)
		}
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, get.Path, nil))
		if rec.Code != http.StatusOK {
			add("%s: GET %s on tollgate's HTTP handler answers %d", p.name, get.Path, rec.Code)
		}
	}

	// The rules: mounted whole at --config-dir, and config-examples/ as it is.
	problems = append(problems, rulesMountProblems(pod, c, args["config-dir"])...)
	problems = append(problems, rulesProblems(o, f)...)

	// Redis.
	if args["store"] != "redis" {
		add("--store is %q, want redis", args["store"])
	}
	svc := o.service(redisName)
	if svc == nil || o.deployment(redisName) == nil {
		return append(problems, fmt.Sprintf("want a Deployment and a Service %q", redisName))
	}
	host, port, ok := strings.Cut(args["redis-addrs"], ":")
	if !ok {
		return append(problems, fmt.Sprintf("--redis-addrs %q is not HOST:PORT", args["redis-addrs"]))
	}
	if host != svc.Name && host != svc.Name+"."+svc.Namespace+".svc.cluster.local" {
		add("--redis-addrs host %q is not the Service %s", host, svc.Name)
	}
	if n, err := strconv.Atoi(port); err != nil || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return int(p.Port) == n }) {
		add("--redis-addrs port %s is not a port of Service %s", port, svc.Name)
	}
	return problems
}

// policyProblems checks the NetworkPolicies: each selects one Deployment,
// every Deployment is selected by one, and every rule names its ports,
// which the selected pods have. tollgate admits gRPC from the gateways and
// HTTP from a selected scraper only; Redis admits tollgate's pods only.
func policyProblems(o *objects, tollgate *appsv1.Deployment) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	byDeployment := map[*appsv1.Deployment]*networkingv1.NetworkPolicy{}
	for _, np := range o.policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		deps := o.selected(np.Namespace, sel)
		if err != nil || sel.Empty() || len(deps) != 1 {
			add("%s: NetworkPolicy %s selects %d Deployments, want 1", o.where[np], np.Name, len(deps))
			continue
		}
		byDeployment[deps[0]] = np
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			add("%s: NetworkPolicy %s: policyTypes %v, want [Ingress]", o.where[np], np.Name, np.Spec.PolicyTypes)
		}
		for i, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 || len(rule.From) == 0 {
				add("%s: NetworkPolicy %s: ingress rule %d admits every port or every peer", o.where[np], np.Name, i)
			}
			for _, p := range rule.Ports {
				if p.Port == nil {
					add("%s: NetworkPolicy %s: ingress rule %d has a port without a number or name", o.where[np], np.Name, i)
				} else if _, err := containerPort(deps[0].Spec.Template.Spec.Containers, *p.Port); err != nil {
					add("%s: NetworkPolicy %s: ingress rule %d: %v", o.where[np], np.Name, i, err)
				}
			}
		}
	}
	for _, dep := range o.deployments {
		if byDeployment[dep] == nil {
			add("%s: no NetworkPolicy selects Deployment %s", o.where[dep], dep.Name)
		}
	}
	if np := byDeployment[tollgate]; np != nil {
		admitted := map[string]bool{}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil {
					continue
				}
				admitted[p.Port.String()] = true
				if p.Port.String() == "http" && slices.ContainsFunc(rule.From, func(peer networkingv1.NetworkPolicyPeer) bool { return peer.PodSelector == nil }) {
					add("%s: NetworkPolicy %s admits HTTP from every pod of a namespace; want the scraper's pods only", o.where[np], np.Name)
				}
			}
		}
		if !admitted["grpc"] || !admitted["http"] || len(admitted) != 2 {
			add("%s: NetworkPolicy %s admits ports %v, want grpc and http only", o.where[np], np.Name, slices.Sorted(maps.Keys(admitted)))
		}
	}
	if dep := o.deployment(redisName); dep != nil && byDeployment[dep] != nil && tollgate != nil {
		np := byDeployment[dep]
		for _, rule := range np.Spec.Ingress {
			for _, peer := range rule.From {
				sel, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
				if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil || err != nil ||
					!slices.Equal(o.selected(np.Namespace, sel), []*appsv1.Deployment{tollgate}) {
					add("%s: NetworkPolicy %s admits a peer other than tollgate's pods: write access to Redis is admin access", o.where[np], np.Name)
				}
			}
		}
	}
	return problems
}

// rulesMountProblems checks that the rules ConfigMap is mounted whole at
// dir, so that kubelet's updates reach tollgate.
func rulesMountProblems(pod corev1.PodSpec, c corev1.Container, dir string) []string {
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.ConfigMap != nil && v.ConfigMap.Name == rulesMap })
	if i < 0 {
		return []string{fmt.Sprintf("no volume of ConfigMap %s", rulesMap)}
	}
	vol := pod.Volumes[i]
	var problems []string
	if len(vol.ConfigMap.Items) > 0 {
		problems = append(problems, fmt.Sprintf("volume %s lists items: a file added to the ConfigMap would not appear", vol.Name))
	}
	j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == vol.Name })
	switch {
	case j < 0:
		problems = append(problems, fmt.Sprintf("volume %s is not mounted", vol.Name))
	case c.VolumeMounts[j].SubPath != "" || c.VolumeMounts[j].SubPathExpr != "":
		problems = append(problems, fmt.Sprintf("volume %s is mounted with a subPath: kubelet never updates those, so rules would not reload", vol.Name))
	case path.Clean(c.VolumeMounts[j].MountPath) != path.Clean(dir):
		problems = append(problems, fmt.Sprintf("rules are mounted at %s, but --config-dir is %q", c.VolumeMounts[j].MountPath, dir))
	}
	return problems
}

// rulesProblems checks that the rules ConfigMap holds config-examples/ as
// it is and loads as serve would load it.
func rulesProblems(o *objects, f tollgateFacts) []string {
	i := slices.IndexFunc(o.configMaps, func(m *corev1.ConfigMap) bool { return m.Name == rulesMap })
	if i < 0 {
		return []string{fmt.Sprintf("no ConfigMap %q", rulesMap)}
	}
	cm := o.configMaps[i]
	var problems []string
	for name, want := range f.examples {
		if got, ok := cm.Data[name]; !ok || got != string(want) {
			problems = append(problems, fmt.Sprintf("%s: key %s does not hold config-examples/%s as it is", rulesFile, name, name))
		}
	}
	fsys := fstest.MapFS{}
	for name, text := range cm.Data {
		fsys[name] = &fstest.MapFile{Data: []byte(text)}
	}
	tree, err := descriptor.LoadFS(fsys, f.opts)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("%s: the rules do not load: %v", rulesFile, err))
	case len(tree.Domains()) == 0:
		problems = append(problems, fmt.Sprintf("%s: no domains", rulesFile))
	}
	return problems
}

// TestBreakingTheManifests shows that the checks above catch mistakes that
// would break tollgate in a cluster, with no cluster to show it.
func TestBreakingTheManifests(t *testing.T) {
	facts := loadFacts(t)
	good := manifestFiles(t)
	tests := []struct {
		name, file, old, new string
		want                 string
	}{
		{"misspelled field", "kubernetes/tollgate.yaml", "readinessProbe:", "readinesProbe:", `unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"field name case", "kubernetes/tollgate.yaml", "containerPort: 8081", "containerport: 8081", `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{"wrong readiness path", "kubernetes/tollgate.yaml", "path: /readyz", "path: /ready", `readinessProbe: path "/ready", want "/readyz"`},
		{"wrong liveness port", "kubernetes/tollgate.yaml", "path: /healthz\n              port: http", "path: /healthz\n              port: grpc", "livenessProbe: port grpc is not tollgate's HTTP port 8080"},
		{"service selects nothing", "kubernetes/tollgate.yaml", "  selector:\n    app.kubernetes.io/name: tollgate\n  ports:", "  selector:\n    app.kubernetes.io/name: tollgat\n  ports:", "Service tollgate selects 0 Deployments, want 1"},
		{"subPath mount", "kubernetes/tollgate.yaml", "mountPath: /etc/tollgate/rules", "mountPath: /etc/tollgate/rules\n              subPath: tiers.yaml", "is mounted with a subPath"},
		{"config dir elsewhere", "kubernetes/tollgate.yaml", "--config-dir=/etc/tollgate/rules", "--config-dir=/etc/tollgate", `rules are mounted at /etc/tollgate/rules, but --config-dir is "/etc/tollgate"`},
		{"unknown flag", "kubernetes/tollgate.yaml", "--log-format=json", "--log-fmt=json", "tollgate serve has no flag --log-fmt"},
		{"root", "kubernetes/tollgate.yaml", "runAsUser: 65532", "runAsUser: 0", "runAsUser is 0"},
		{"writable root", "kubernetes/redis.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "container redis/redis: readOnlyRootFilesystem is not true"},
		{"pdb blocks eviction", "kubernetes/tollgate.yaml", "minAvailable: 1", "minAvailable: 2", "minAvailable must be a number below the 2 replicas"},
		{"redis elsewhere", "kubernetes/tollgate.yaml", "--redis-addrs=redis:6379", "--redis-addrs=redis-master:6379", `--redis-addrs host "redis-master" is not the Service redis`},
		{"grpc port", "kubernetes/tollgate.yaml", "containerPort: 8081", "containerPort: 9091", `container port "grpc" is 9091, tollgate listens on 8081`},
		{"stale rules", "kubernetes/rules.yaml", "requests_per_unit: 60", "requests_per_unit: 61", "key access-lists.yaml does not hold config-examples/access-lists.yaml as it is"},
		{"wrong namespace", "kubernetes/redis.yaml", "namespace: tollgate", "namespace: default", `redis is in namespace "default", want "tollgate"`},
		{"admin on every interface", "kubernetes/tollgate.yaml", "--log-format=json", "--log-format=json\n            - --admin-addr=:8082", `--admin-addr ":8082": want the pod's loopback`},
		{"admin token in the manifest", "kubernetes/tollgate.yaml", "valueFrom:\n                secretKeyRef:\n                  name: tollgate-admin\n                  key: token\n                  optional: true", "value: changeme-0123456789abcdef", "env TOLLGATE_ADMIN_TOKEN: a secret, want it from a Secret"},
		{"policy admits every port", "kubernetes/tollgate.yaml", "      ports:\n        - port: grpc\n          protocol: TCP\n", "", "ingress rule 0 admits every port or every peer"},
		{"policy port not the pod's", "kubernetes/tollgate.yaml", "        - port: http\n          protocol: TCP\n", "        - port: metrics\n          protocol: TCP\n", "no container port metrics"},
		{"scraped from every pod", "kubernetes/tollgate.yaml", "          podSelector:\n            matchLabels:\n              app.kubernetes.io/name: prometheus\n", "", "admits HTTP from every pod of a namespace"},
		{"redis open to a namespace", "kubernetes/redis.yaml", "        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: tollgate\n", "        - namespaceSelector: {}\n", "admits a peer other than tollgate's pods"},
		{"redis without a policy", "kubernetes/redis.yaml", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: redis\n  policyTypes", "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: redi\n  policyTypes", "no NetworkPolicy selects Deployment redis"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, repl := tt.old, tt.new
			files := maps.Clone(good)
			text := string(files[tt.file])
			if !strings.Contains(text, old) {
				t.Fatalf("%s has no %q", tt.file, old)
			}
			files[tt.file] = []byte(strings.Replace(text, old, repl, 1))
			var problems []string
			if o, err := decodeManifests(files); err != nil {
				problems = []string{err.Error()}
			} else {
				problems = manifestProblems(o, facts)
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

// TestRulesConfigMapIsCurrent checks that kubernetes/rules.yaml holds
// config-examples/ exactly; -update rewrites it.
func TestRulesConfigMapIsCurrent(t *testing.T) {
	want, err := rulesConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(rulesFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from config-examples/; run go test ./envoy -run TestRulesConfigMapIsCurrent -update", rulesFile)
	}
}

// rulesConfigMap renders config-examples/ as the ConfigMap of rules.
func rulesConfigMap() ([]byte, error) {
	entries, err := os.ReadDir(configExamples)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`# tollgate's rules: config-examples/, one key per file. Generated by
#   go test ./envoy -run TestRulesConfigMapIsCurrent -update
# so edit the files there. tollgate mounts the whole ConfigMap as its
# --config-dir and reloads when kubelet swaps in an update (within about a
# minute of kubectl apply). For your own rules:
#   kubectl -n tollgate create configmap tollgate-rules --from-file=RULES_DIR/ \
#     --dry-run=client -o yaml | kubectl apply -f -
apiVersion: v1
kind: ConfigMap
metadata:
  name: tollgate-rules
  namespace: tollgate
  labels:
    app.kubernetes.io/name: tollgate
data:
`)
	for _, e := range entries {
		if e.IsDir() { // the rules and the values files they name
			continue
		}
		data, err := os.ReadFile(path.Join(configExamples, e.Name()))
		if err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(data, []byte("\n")) || bytes.Contains(data, []byte("\t")) || bytes.Contains(data, []byte(" \n")) {
			return nil, fmt.Errorf("%s: a literal block needs a final newline and no tabs or trailing blanks", e.Name())
		}
		fmt.Fprintf(&b, "  %s: |\n", e.Name())
		for _, line := range strings.SplitAfter(strings.TrimSuffix(string(data), "\n"), "\n") {
			if strings.TrimSpace(line) == "" {
				b.WriteString("\n")
				continue
			}
			b.WriteString("    " + line)
		}
		b.WriteString("\n")
	}
	return b.Bytes(), nil
}

// parseArgs reads `serve --name=value` arguments into a map.
func parseArgs(args []string) (map[string]string, error) {
	if len(args) == 0 || args[0] != "serve" {
		return nil, fmt.Errorf("args %q: want the serve command first", args)
	}
	out := map[string]string{}
	for _, a := range args[1:] {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			return nil, fmt.Errorf("arg %q: write flags as --name=value", a)
		}
		out[name] = value
	}
	return out, nil
}

// portOf returns the port of a listen address such as ":8081".
func portOf(addr string) (uint32, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return uint32(n), err
}

var flagName = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// serveFlags returns the flag names that `tollgate serve --help` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.MainEnv(context.Background(), []string{"serve", "--help"}, &out, &errOut, os.Getenv); code != 0 {
		t.Fatalf("tollgate serve --help: exit %d: %s", code, errOut.String())
	}
	known := map[string]bool{}
	for _, m := range flagName.FindAllStringSubmatch(out.String()+errOut.String(), -1) {
		known[m[1]] = true
	}
	if !known["config-dir"] {
		t.Fatalf("tollgate serve --help lists no --config-dir:\n%s%s", out.String(), errOut.String())
	}
	return known
}

// containerPort resolves a port reference, by name or number, among the
// ports of containers.
func containerPort(containers []corev1.Container, ref intstr.IntOrString) (int32, error) {
	for _, c := range containers {
		for _, p := range c.Ports {
			if (ref.Type == intstr.String && p.Name == ref.StrVal) || (ref.Type == intstr.Int && p.ContainerPort == ref.IntVal) {
				return p.ContainerPort, nil
			}
		}
	}
	return 0, fmt.Errorf("no container port %s", ref.String())
}

func runAsUser(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) *int64 {
	if c != nil && c.RunAsUser != nil {
		return c.RunAsUser
	}
	if pod != nil {
		return pod.RunAsUser
	}
	return nil
}

// securityProblems lists what keeps a container from running as the
// restricted Pod Security Standard asks, with a read-only root.
func securityProblems(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) []string {
	var problems []string
	nonRoot := (c != nil && c.RunAsNonRoot != nil && *c.RunAsNonRoot) || (pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
	if !nonRoot {
		problems = append(problems, "runAsNonRoot is not true")
	}
	if uid := runAsUser(pod, c); uid != nil && *uid == 0 {
		problems = append(problems, "runAsUser is 0")
	}
	if c == nil {
		return append(problems, "no securityContext")
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		problems = append(problems, "readOnlyRootFilesystem is not true")
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		problems = append(problems, "allowPrivilegeEscalation is not false")
	}
	if c.Capabilities == nil || !slices.Contains(c.Capabilities.Drop, "ALL") {
		problems = append(problems, "capabilities do not drop ALL")
	}
	seccomp := (c.SeccompProfile != nil) || (pod != nil && pod.SeccompProfile != nil)
	if !seccomp {
		problems = append(problems, "no seccompProfile")
	}
	return problems
}

// metaOf returns the ObjectMeta of a decoded object.
func metaOf(obj any) (metav1.ObjectMeta, error) {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m := o.GetObjectMeta()
		return metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace()}, nil
	}
	return metav1.ObjectMeta{}, fmt.Errorf("%T has no ObjectMeta", obj)
}

// alertsFile is the demo's Prometheus rule file, which alertsRule wraps
// in a PrometheusRule.
const (
	alertsFile = "observability/alerts.yaml"
	alertsRule = "kubernetes/alerts.yaml"
)

// prometheusRule is the Prometheus Operator's PrometheusRule, the fields
// the manifests use; its groups are checked by Prometheus's rule parser.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []json.RawMessage `json:"groups"`
	} `json:"spec"`
}

// TestPrometheusRuleIsCurrent checks that kubernetes/alerts.yaml is the
// PrometheusRule of observability/alerts.yaml, whose groups Prometheus's
// rule parser accepts; -update rewrites it.
func TestPrometheusRuleIsCurrent(t *testing.T) {
	want, err := alertsPrometheusRule()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(alertsRule, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(alertsRule)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the PrometheusRule of %s: go test ./envoy -run TestPrometheusRuleIsCurrent -update", alertsRule, alertsFile)
	}
	o := loadManifests(t)
	if len(o.alerts) != 1 || o.alerts[0].Name != "tollgate" {
		t.Fatalf("want one PrometheusRule tollgate, got %d", len(o.alerts))
	}
	groups, err := yaml.Marshal(map[string]any{"groups": o.alerts[0].Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := rulefmt.Parse(groups, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler)); len(errs) > 0 {
		t.Fatalf("%s: %v", alertsRule, errors.Join(errs...))
	}
}

// alertsPrometheusRule returns observability/alerts.yaml's groups as a
// PrometheusRule in the namespace tollgate.
func alertsPrometheusRule() ([]byte, error) {
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		return nil, err
	}
	i := bytes.Index(data, []byte("\ngroups:\n"))
	if i < 0 {
		return nil, fmt.Errorf("%s: no top-level groups", alertsFile)
	}
	var b bytes.Buffer
	b.WriteString(`# tollgate's alerting rules for the Prometheus Operator: the groups of
# envoy/observability/alerts.yaml, generated by
#   go test ./envoy -run TestPrometheusRuleIsCurrent -update
# so edit them there. Each alert's runbook_url is a section of docs/runbooks.md.
# The label release selects it for a kube-prometheus-stack whose
# ruleSelector asks for it; change it to what your Prometheus selects.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: tollgate
  namespace: tollgate
  labels:
    app.kubernetes.io/name: tollgate
    release: kube-prometheus-stack
spec:
`)
	for _, line := range strings.SplitAfter(string(data[i+1:]), "\n") {
		if strings.TrimSpace(line) == "" {
			b.WriteString(line)
			continue
		}
		b.WriteString("  " + line)
	}
	return b.Bytes(), nil
}
