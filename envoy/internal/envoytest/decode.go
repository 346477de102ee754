// Package envoytest checks Envoy configuration where no Envoy binary runs.
//
// DecodeYAML turns YAML into a go-control-plane proto as strictly as Envoy
// reads its bootstrap: an unknown or misspelled field, a duplicate key, or
// an Any whose type is not linked into the test binary is an error (the
// test blank-imports every extension it expects). Validate runs the
// protos' generated validation and, because that stops at every
// google.protobuf.Any, unpacks each typed_config and validates it too.
//
// Descriptors computes what the HTTP rate-limit filter would send for one
// request, for the subset of route actions tollgate's examples use; an
// action outside that subset is an error, never a silent guess. What this
// package cannot show is how a real Envoy behaves at run time: that is for
// the docker-compose demo.
package envoytest

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// DecodeYAML decodes YAML (or JSON) into m, rejecting duplicate keys,
// unknown fields and Any types that are not registered.
func DecodeYAML(data []byte, m proto.Message) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("converting YAML to JSON: %w", err)
	}
	return DecodeJSON(js, m)
}

// DecodeJSON decodes JSON into m as DecodeYAML does.
func DecodeJSON(js []byte, m proto.Message) error {
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, m); err != nil {
		return fmt.Errorf("decoding %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// validator is what protoc-gen-validate generates for every message.
type validator interface {
	ValidateAll() error
}

// Validate runs ValidateAll on m and on the content of every Any found in
// it, however deeply nested, and joins the errors, each naming where the
// failing message sits.
func Validate(m proto.Message) error {
	var errs []error
	if err := validate("", m); err != nil {
		errs = append(errs, err)
	}
	err := Walk(m, func(path string, msg proto.Message, packed bool) error {
		if packed {
			if err := validate(path, msg); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func validate(path string, m proto.Message) error {
	v, ok := m.(validator)
	if !ok {
		return fmt.Errorf("%s: %s has no generated validation", where(path), m.ProtoReflect().Descriptor().FullName())
	}
	if err := v.ValidateAll(); err != nil {
		return fmt.Errorf("%s: %w", where(path), err)
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

// Walk calls fn for m and for every message nested in it, depth first,
// with a path such as "static_resources.listeners[0].filter_chains[0]".
// The content of an Any is unpacked and walked too: fn sees it with packed
// true, at the Any's own path. An Any that cannot be unpacked is an error.
func Walk(m proto.Message, fn func(path string, m proto.Message, packed bool) error) error {
	return walk("", m.ProtoReflect(), false, fn)
}

func walk(path string, m protoreflect.Message, packed bool, fn func(string, proto.Message, bool) error) error {
	if err := fn(path, m.Interface(), packed); err != nil {
		return err
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: unpacking %s: %w", where(path), a.GetTypeUrl(), err)
		}
		return walk(path, inner.ProtoReflect(), true, fn)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := join(path, string(fd.Name()))
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				if err = walk(fmt.Sprintf("%s[%d]", name, i), l.Get(i).Message(), false, fn); err != nil {
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				err = walk(fmt.Sprintf("%s[%s]", name, k.String()), mv.Message(), false, fn)
				return err == nil
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			err = walk(name, v.Message(), false, fn)
		}
		return err == nil
	})
	return err
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Find returns every message of type T in m, Any contents included, in
// the order Walk visits them.
func Find[T proto.Message](m proto.Message) ([]T, error) {
	var out []T
	err := Walk(m, func(_ string, msg proto.Message, _ bool) error {
		if t, ok := msg.(T); ok {
			out = append(out, t)
		}
		return nil
	})
	return out, err
}
