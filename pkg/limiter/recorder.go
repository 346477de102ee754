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

// Recorders returns one Recorder that hands every request to each of rs
// in turn, so that the engine's one Options.Recorder slot can serve
// several, such as the traffic recorder and a shadow rule set. Nil
// Recorders in rs are skipped: with none left it returns nil, so that
// the engine pays nothing, and with one it returns that one itself.
func Recorders(rs ...Recorder) Recorder {
	var all recorders
	for _, r := range rs {
		if r != nil {
			all = append(all, r)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}

// recorders is the Recorder of Recorders.
type recorders []Recorder

// Record hands the request to every Recorder, in order.
func (rs recorders) Record(now time.Time, dom *descriptor.Domain, req *Request, resp *Response) {
	for _, r := range rs {
		r.Record(now, dom, req, resp)
	}
}
