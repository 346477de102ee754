package app

import (
	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/record"
)

// ReplayOptions returns the options of a replay through the rules in dir
// (tuned by tune when it is not nil), loaded as serve loads its
// --config-dir with s, and decided by an engine of serve's settings:
// request bounds, shadow mode, the defaults of Envoy's limit overrides.
func ReplayOptions(s Settings, dir string, tune *descriptor.Tune) (record.ReplayOptions, error) {
	engine, err := s.engineOptions()
	if err != nil {
		return record.ReplayOptions{}, err
	}
	tree, err := ReplayRules(s, dir, tune)
	if err != nil {
		return record.ReplayOptions{}, err
	}
	return record.ReplayOptions{Rules: tree, Engine: engine}, nil
}

// ReplayRules loads the rules in dir as serve loads its --config-dir
// with s, tuned by tune when it is not nil.
func ReplayRules(s Settings, dir string, tune *descriptor.Tune) (*descriptor.Tree, error) {
	opts, err := s.descriptorOptions()
	if err != nil {
		return nil, err
	}
	opts.Tune = tune
	return descriptor.Load(dir, opts)
}
