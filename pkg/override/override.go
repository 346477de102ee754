// Package override holds the limits operators set live through the admin
// API: an override raises, lowers or multiplies the limits of the rules a
// descriptor prefix resolves to, until it expires.
package override

import (
	"errors"
	"time"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
)

// Limit is an absolute override: it replaces the limits of the rules the
// entries resolve to.
type Limit struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

// Override is one live exception to a domain's rules. Exactly one of Limit
// and Multiplier is set.
type Override struct {
	ID     string `json:"id"`
	Domain string `json:"domain"`
	// Entries are a prefix of the descriptors the override applies to:
	// tenant=acme applies to every descriptor that begins with it.
	Entries    []descriptor.Entry `json:"entries"`
	Limit      *Limit             `json:"limit,omitempty"`
	Multiplier float64            `json:"multiplier,omitempty"`
	ExpiresAt  time.Time          `json:"expires_at"`
	Reason     string             `json:"reason,omitempty"`
	// CreatedBy names the admin token that created the override, never
	// the token itself.
	CreatedBy string    `json:"created_by,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// The errors of override registries. ErrInvalid wraps every reason an
// override is refused (the admin API answers it 400); ErrNotFound names an
// id that no live override has (404).
var (
	ErrInvalid  = errors.New("invalid override")
	ErrNotFound = errors.New("override not found")
)
