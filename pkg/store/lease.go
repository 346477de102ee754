package store

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// LeaseRequest asks a store that leases budgets for a lease on the counter
// Counter counts against (its Cost is ignored). The store grants what
// algorithm.Reserve grants: at most Want hits, lasting at most Lifetime.
type LeaseRequest struct {
	Counter  Hit
	Want     int64
	Lifetime time.Duration
}

// LeaseReturn gives back Unspent hits of a Lease granted on the counter
// Counter counts against, as algorithm.Return does.
type LeaseReturn struct {
	Counter Hit
	Lease   algorithm.Lease
	Unspent int64
}
