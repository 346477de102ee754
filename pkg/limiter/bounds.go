package limiter

import "fmt"

// bounds are the request bounds of Options, defaults applied.
type bounds struct {
	descriptors, entries, keyLen, valueLen int
	hits                                   uint64
}

// orDefault returns v, or def when v is 0.
func orDefault[T int | uint64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// validate reports whether req is well formed and within b, with an error
// wrapping ErrInvalidRequest that names the offending descriptor and entry,
// and whether any descriptor carries a ChargeKey entry.
func (b *bounds) validate(req *Request) (marked bool, err error) {
	switch {
	case req == nil:
		return false, fmt.Errorf("%w: no request", ErrInvalidRequest)
	case req.Domain == "":
		return false, fmt.Errorf("%w: empty domain", ErrInvalidRequest)
	case len(req.Domain) > b.keyLen:
		return false, fmt.Errorf("%w: domain longer than %d bytes", ErrInvalidRequest, b.keyLen)
	case len(req.Descriptors) == 0:
		return false, fmt.Errorf("%w: no descriptors", ErrInvalidRequest)
	case len(req.Descriptors) > b.descriptors:
		return false, fmt.Errorf("%w: %d descriptors exceed the limit of %d", ErrInvalidRequest, len(req.Descriptors), b.descriptors)
	case uint64(req.Hits) > b.hits:
		return false, fmt.Errorf("%w: hits_addend %d exceeds the limit of %d", ErrInvalidRequest, req.Hits, b.hits)
	}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		switch {
		case len(d.Entries) == 0:
			return false, fmt.Errorf("%w: descriptors[%d]: no entries", ErrInvalidRequest, i)
		case len(d.Entries) > b.entries:
			return false, fmt.Errorf("%w: descriptors[%d]: %d entries exceed the limit of %d", ErrInvalidRequest, i, len(d.Entries), b.entries)
		case d.HasHits && d.Hits > b.hits:
			return false, fmt.Errorf("%w: descriptors[%d].hits_addend: %d exceeds the limit of %d", ErrInvalidRequest, i, d.Hits, b.hits)
		}
		markers := 0
		for j := range d.Entries {
			e := &d.Entries[j]
			switch {
			case e.Key == "":
				return false, fmt.Errorf("%w: descriptors[%d].entries[%d]: empty key", ErrInvalidRequest, i, j)
			case len(e.Key) > b.keyLen:
				return false, fmt.Errorf("%w: descriptors[%d].entries[%d]: key longer than %d bytes", ErrInvalidRequest, i, j, b.keyLen)
			case len(e.Value) > b.valueLen:
				return false, fmt.Errorf("%w: descriptors[%d].entries[%d]: value longer than %d bytes", ErrInvalidRequest, i, j, b.valueLen)
			case e.Key == ChargeKey:
				if e.Value != ChargeAlwaysValue {
					return false, fmt.Errorf("%w: descriptors[%d]: %s must be %q, got %q", ErrInvalidRequest, i, ChargeKey, ChargeAlwaysValue, e.Value)
				}
				markers++
			}
		}
		if req.Untrusted && (markers > 0 || d.Refund) {
			return false, fmt.Errorf("%w: descriptors[%d]: %w", ErrInvalidRequest, i, ErrUntrusted)
		}
		if markers > 0 {
			if markers == len(d.Entries) {
				return false, fmt.Errorf("%w: descriptors[%d]: no entries but %s", ErrInvalidRequest, i, ChargeKey)
			}
			marked = true
		}
		if o := d.Override; o != nil && o.Unit.Duration() == 0 {
			return false, fmt.Errorf("%w: descriptors[%d].limit: invalid unit %d", ErrInvalidRequest, i, o.Unit)
		}
	}
	return marked, nil
}
