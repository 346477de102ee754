package store

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// LeaseRequest asks a store that leases budgets for a lease on one counter,
// identified as a Hit's is by Domain, Entries, Limit.Kind and Limit.Period
// (Shard groups keys as in a Hit). The store grants what algorithm.Reserve
// grants: at most Want hits, lasting at most Lifetime.
type LeaseRequest struct {
	Domain   string
	Entries  []Entry
	Shard    string
	Limit    algorithm.Limit
	Want     int64
	Lifetime time.Duration
}

// LeaseReturn gives back Unspent hits of a Lease granted on a counter, as
// algorithm.Return does.
type LeaseReturn struct {
	Domain  string
	Entries []Entry
	Shard   string
	Limit   algorithm.Limit
	Lease   algorithm.Lease
	Unspent int64
}
