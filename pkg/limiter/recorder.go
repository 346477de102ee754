package limiter

import (
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// Recorder hears every request the engine decides, such as the traffic
// recorder of package record. Options.Recorder sets it; without one the
// engine pays nothing.
type Recorder interface {
	// Record is called once per decided request, after its answer is
	// complete: with the instant the decision was made (the engine's
	// clock, read once per request), the request's domain in the live
	// rules (nil for a domain they do not know, answered OK), the request
	// and its answer. Invalid requests, and checks made before any rules
	// were loaded or cut short by their context, are not decided and not
	// recorded, nor are requests marked Unrecorded. req and resp belong to the caller: Record must copy what
	// it keeps, and must not block. It is called concurrently.
	Record(now time.Time, dom *descriptor.Domain, req *Request, resp *Response)
}
