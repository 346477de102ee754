package xds

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing/fstest"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// TypeURL is the xDS resource type of Envoy Gateway's rate-limit rules.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// dir is the directory of the in-memory file system Build renders the
// resources into; errors name files in it.
const dir = "xds"

// ErrUnsupported reports a resource the conversion cannot represent
// faithfully: a field this version of the protos does not know, or a
// resource of another type.
var ErrUnsupported = errors.New("unsupported resource")

// Build turns one state-of-the-world update, the full set of
// RateLimitConfig resources, into a descriptor tree. Each resource becomes
// the envoyproxy/ratelimit YAML file it stands for, xds/<name>.yaml, and
// the files are loaded with descriptor.LoadFS and opts, exactly as a
// configuration directory is: the same validation, and errors that name
// the resource's file, line and descriptor path.
//
// Rules over xDS come without files: RateLimitConfig has no field for a
// values file, and the loader is told to refuse values_file besides
// (descriptor.Options.RefuseValuesFiles), so that no rendering could make
// it read one.
func Build(resources []*anypb.Any, opts descriptor.Options) (*descriptor.Tree, error) {
	fsys, err := Render(resources)
	if err != nil {
		return nil, err
	}
	return descriptor.LoadFS(fsys, loadOptions(opts))
}

// loadOptions returns opts for rules delivered over xDS.
func loadOptions(opts descriptor.Options) descriptor.Options {
	opts.RefuseValuesFiles = "xDS"
	return opts
}

// Render returns the file system Build loads: one YAML file per resource,
// named after it. It fails on a resource it cannot represent.
func Render(resources []*anypb.Any) (fstest.MapFS, error) {
	fsys := fstest.MapFS{}
	owner := map[string]string{} // file name → resource name
	var errs []error
	for i, res := range resources {
		cfg, err := unpack(res)
		if err != nil {
			errs = append(errs, fmt.Errorf("resource %d: %w", i, err))
			continue
		}
		name := dir + "/" + fileName(cfg.GetName()) + ".yaml"
		if prev, ok := owner[name]; ok {
			errs = append(errs, fmt.Errorf("resources %q and %q: both map to %s; resource names must differ", prev, cfg.GetName(), name))
			continue
		}
		owner[name] = cfg.GetName()
		data, err := yaml.Marshal(fileOf(cfg))
		if err != nil {
			errs = append(errs, fmt.Errorf("resource %q: rendering YAML: %w", cfg.GetName(), err))
			continue
		}
		fsys[name] = &fstest.MapFile{Data: data}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return fsys, nil
}

// unpack decodes one resource and refuses fields it would drop.
func unpack(res *anypb.Any) (*rlsconfv3.RateLimitConfig, error) {
	if got := res.GetTypeUrl(); got != TypeURL {
		return nil, fmt.Errorf("%w: type %q, want %q", ErrUnsupported, got, TypeURL)
	}
	cfg := &rlsconfv3.RateLimitConfig{}
	if err := proto.Unmarshal(res.GetValue(), cfg); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if path := unknownField(cfg.ProtoReflect(), cfg.GetName()); path != "" {
		return nil, fmt.Errorf("%w: %s has a field this version of tollgate does not know", ErrUnsupported, path)
	}
	return cfg, nil
}

// unknownField returns the path of the first message under m, named at,
// holding fields its proto definition lacks, or "".
func unknownField(m protoreflect.Message, at string) string {
	if len(m.GetUnknown()) > 0 {
		return at
	}
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil && !fd.IsMap() {
			return true
		}
		if fd.IsMap() {
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				found = unknownField(mv.Message(), fmt.Sprintf("%s.%s[%q]", at, fd.Name(), k.String()))
				return found == ""
			})
			return found == ""
		}
		if fd.IsList() {
			for i := range v.List().Len() {
				if found = unknownField(v.List().Get(i).Message(), fmt.Sprintf("%s.%s[%d]", at, fd.Name(), i)); found != "" {
					return false
				}
			}
			return true
		}
		found = unknownField(v.Message(), at+"."+string(fd.Name()))
		return found == ""
	})
	return found
}

// fileName turns a resource name into a file name that the loader reads
// and that cannot leave the directory: characters other than letters,
// digits, '-', '_' and '.' become '_', and so does a leading '.', which
// the loader would skip as hidden. An empty name becomes "_".
func fileName(name string) string {
	if name == "" {
		return "_"
	}
	b := []byte(name)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok || (i == 0 && c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// The YAML form of a resource, field for field the envoyproxy/ratelimit
// file format. Zero values are left out, as an absent proto3 field reads
// as its zero value, except where the file format gives absence another
// meaning (the domain, requests_per_unit).
type (
	yamlFile struct {
		Domain      string           `yaml:"domain"`
		Descriptors []yamlDescriptor `yaml:"descriptors,omitempty"`
	}
	yamlDescriptor struct {
		Key            string           `yaml:"key"`
		Value          string           `yaml:"value,omitempty"`
		RateLimit      *yamlRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool             `yaml:"shadow_mode,omitempty"`
		QuotaMode      bool             `yaml:"quota_mode,omitempty"`
		DetailedMetric bool             `yaml:"detailed_metric,omitempty"`
		Metadata       *yaml.Node       `yaml:"metadata,omitempty"`
	}
	yamlRateLimit struct {
		Unit            string        `yaml:"unit,omitempty"`
		RequestsPerUnit *uint32       `yaml:"requests_per_unit,omitempty"`
		Unlimited       bool          `yaml:"unlimited,omitempty"`
		Name            string        `yaml:"name,omitempty"`
		Replaces        []yamlReplace `yaml:"replaces,omitempty"`
	}
	yamlReplace struct {
		Name string `yaml:"name"`
	}
)

func fileOf(cfg *rlsconfv3.RateLimitConfig) yamlFile {
	return yamlFile{Domain: cfg.GetDomain(), Descriptors: descriptorsOf(cfg.GetDescriptors())}
}

func descriptorsOf(ds []*rlsconfv3.RateLimitDescriptor) []yamlDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]yamlDescriptor, len(ds))
	for i, d := range ds {
		out[i] = yamlDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			RateLimit:      rateLimitOf(d.GetRateLimit()),
			Descriptors:    descriptorsOf(d.GetDescriptors()),
			ShadowMode:     d.GetShadowMode(),
			QuotaMode:      d.GetQuotaMode(),
			DetailedMetric: d.GetDetailedMetric(),
			Metadata:       metadataOf(d.GetMetadata()),
		}
	}
	return out
}

func rateLimitOf(p *rlsconfv3.RateLimitPolicy) *yamlRateLimit {
	if p == nil {
		return nil
	}
	rl := &yamlRateLimit{Unlimited: p.GetUnlimited(), Name: p.GetName()}
	// An unlimited rule needs no unit or count; anything else gets both,
	// UNKNOWN and 0 included, so that validation judges them.
	if !p.GetUnlimited() || p.GetUnit() != rlsconfv3.RateLimitUnit_UNKNOWN {
		rl.Unit = strings.ToLower(p.GetUnit().String())
	}
	if rpu := p.GetRequestsPerUnit(); !p.GetUnlimited() || rpu != 0 {
		rl.RequestsPerUnit = &rpu
	}
	for _, r := range p.GetReplaces() {
		rl.Replaces = append(rl.Replaces, yamlReplace{Name: r.GetName()})
	}
	return rl
}

// metadataOf renders a rule's metadata so that the loader reads back
// exactly the Struct's values: every key and string double-quoted (the
// loader resolves unquoted scalars as YAML 1.1 does, where "yes" is a
// bool), numbers in Go's shortest form, which the loader reads as the
// same double. An empty Struct renders as nothing, as an absent one.
func metadataOf(md *structpb.Struct) *yaml.Node {
	if len(md.GetFields()) == 0 {
		return nil
	}
	return structNode(md)
}

func structNode(s *structpb.Struct) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range slices.Sorted(maps.Keys(s.GetFields())) {
		n.Content = append(n.Content, stringNode(k), valueNode(s.GetFields()[k]))
	}
	return n
}

func valueNode(v *structpb.Value) *yaml.Node {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return stringNode(k.StringValue)
	case *structpb.Value_NumberValue:
		// .inf and .nan are what the loader refuses, with the reason.
		text := strconv.FormatFloat(k.NumberValue, 'g', -1, 64)
		switch {
		case math.IsInf(k.NumberValue, 1):
			text = ".inf"
		case math.IsInf(k.NumberValue, -1):
			text = "-.inf"
		case math.IsNaN(k.NumberValue):
			text = ".nan"
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Value: text}
	case *structpb.Value_BoolValue:
		return &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatBool(k.BoolValue)}
	case *structpb.Value_StructValue:
		return structNode(k.StructValue)
	case *structpb.Value_ListValue:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, item := range k.ListValue.GetValues() {
			n.Content = append(n.Content, valueNode(item))
		}
		return n
	}
	// A null, or a Value with no kind set, which JSON reads as null.
	return &yaml.Node{Kind: yaml.ScalarNode, Value: "null"}
}

func stringNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Value: s}
}
