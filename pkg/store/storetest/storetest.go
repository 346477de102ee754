package storetest

import (
	"context"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
	"github.com/tollgatehq/tollgate/pkg/store"
)

// Failing is a store that fails every batch with Err, such as
// store.ErrUnavailable for a store that is down.
type Failing struct{ Err error }

var _ store.Store = Failing{}

// Apply returns f.Err.
func (f Failing) Apply(context.Context, []store.Hit, []algorithm.Verdict) error { return f.Err }
