// Package cached is the store behind precision: cached. It stands in front
// of the shared store (Redis) and decides most hits of a rule from a
// lease: a budget of hits this instance reserved from the shared counter
// in one call, charged to that counter at the grant, and spent here with
// no I/O.
//
// Placeholder: the full design doc follows.
package cached
