package descriptor

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/tollgatehq/tollgate/pkg/algorithm"
)

// dumpWriter is what the dump is written to: a strings.Builder, or a
// bufio.Writer in front of the hash.
type dumpWriter interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

// String returns the dump that WriteTo writes.
func (t *Tree) String() string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	t.write(&b)
	return b.String()
}

func (t *Tree) write(w dumpWriter) {
	for i, name := range t.names {
		if i > 0 {
			w.WriteByte('\n')
		}
		t.domains[name].write(w)
	}
}

// digest returns the hex SHA-256 of t's dump.
func (t *Tree) digest() string {
	return digest(t.write)
}

// digest returns the hex SHA-256 of d's part of its tree's dump.
func (d *Domain) digest() string {
	return digest(d.write)
}

// digest returns the hex SHA-256 of what write writes. It streams the dump
// into the hash rather than building it as a string, a few MB for a large
// tree.
func digest(write func(dumpWriter)) string {
	h := sha256.New()
	w := bufio.NewWriterSize(h, 16<<10)
	write(w)
	w.Flush() // writing to a hash never fails
	return hex.EncodeToString(h.Sum(nil))
}

// WriteTo writes a readable dump of t: every domain in name order, then
// every descriptor in configuration order with its resolved rule and
// limits, including the algorithm each limit resolved to, its charge
// when it is not admitted and its precision when it is not strict
// (tollgate's rule, like a burst of 0, goes unsaid, so a configuration
// keeps its hash). Strings that could be misread are quoted, so the dump
// is also the canonical form that Hash digests. A dump looks like this:
//
//	domain api
//	  shard_by api_key
//	  defaults algorithm=token_bucket failure_mode=open
//	  api_key=sk_internal_*: allow, failure_mode=open
//	  api_key: no rule
//	  api_key/endpoint="/search": limit, failure_mode=closed
//	    30 per minute, sliding_window_counter
//	  api_key/endpoint="/chat": limit, failure_mode=open
//	    100000 per day, fixed_window, charge always
//	  api_key/endpoint="/list": limit, failure_mode=open
//	    5000 per minute, fixed_window, precision cached
//	  api_key in "lists/revoked.txt" (20000 values, 2 patterns, digest 5e1f0c2a9b7d3e48): deny, failure_mode=open
//
// A values file is summed up rather than listed: its name, how many
// exact values and patterns it holds and a digest of them, so that an
// edit of the file changes the hash.
func (t *Tree) WriteTo(w io.Writer) (int64, error) {
	n, err := io.WriteString(w, t.String())
	return int64(n), err
}

func (d *Domain) write(b dumpWriter) {
	fmt.Fprintf(b, "domain %s\n", quote(d.name))
	if d.shardBy != "" {
		fmt.Fprintf(b, "  shard_by %s\n", quote(d.shardBy))
	}
	if df := d.defaults; df.algorithm != "" || df.failureMode != "" || df.charge != "" || df.precision != "" || df.hasBurst || df.penalty != nil {
		b.WriteString("  defaults")
		if df.algorithm != "" {
			b.WriteString(" algorithm=" + df.algorithm)
		}
		if df.failureMode != "" {
			b.WriteString(" failure_mode=" + df.failureMode)
		}
		if df.charge != "" {
			b.WriteString(" charge=" + df.charge)
		}
		if df.precision != "" {
			b.WriteString(" precision=" + df.precision)
		}
		if df.hasBurst {
			fmt.Fprintf(b, " burst=%d", df.burst)
		}
		if df.penalty != nil {
			b.WriteByte(' ')
			writePenalty(b, df.penalty)
		}
		b.WriteByte('\n')
	}
	for _, n := range d.nodes {
		b.WriteString("  ")
		b.WriteString(n.quotedPath)
		if n.list != nil {
			b.WriteString(" (")
			b.WriteString(n.list.summary())
			b.WriteByte(')')
		}
		if n.rule == nil {
			b.WriteString(": no rule\n")
			continue
		}
		b.WriteString(": ")
		writeRule(b, n.rule, "    ")
	}
}

// writeRule writes the attributes of r on the current line and its limits
// on lines of their own, indented by indent.
func writeRule(b dumpWriter, r *Rule, indent string) {
	switch {
	case r.Action != ActionLimit:
		b.WriteString(r.Action.String())
	case r.Unlimited:
		b.WriteString("unlimited")
	default:
		b.WriteString("limit")
	}
	b.WriteString(", failure_mode=")
	b.WriteString(r.FailureMode.String())
	for _, f := range [...]struct {
		on   bool
		name string
	}{
		{r.ShadowMode, "shadow_mode"},
		{r.QuotaMode, "quota_mode"},
		{r.DetailedMetric, "detailed_metric"},
		{r.ValueToMetric, "value_to_metric"},
	} {
		if f.on {
			b.WriteString(", ")
			b.WriteString(f.name)
		}
	}
	for i, s := range r.Shared {
		if s != "" {
			fmt.Fprintf(b, ", shared[%d]=%s", i, quote(s))
		}
	}
	if len(r.Replaces) > 0 {
		b.WriteString(", replaces=")
		for i, name := range r.Replaces {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quote(name))
		}
	}
	if len(r.Metadata) > 0 {
		// Finite numbers, strings, bools, nulls, lists and mappings:
		// always JSON, its keys sorted.
		md, _ := json.Marshal(r.Metadata)
		b.WriteString(", metadata=" + string(md))
	}
	b.WriteByte('\n')
	for _, l := range r.Limits {
		b.WriteString(indent)
		l.write(b)
		b.WriteByte('\n')
	}
}

// String describes l readably, such as "5 per 5 minutes, token_bucket,
// burst 10" or "1000 per minute, token_bucket, charge always, precision
// cached".
func (l Limit) String() string {
	var b strings.Builder
	l.write(&b)
	return b.String()
}

func (l Limit) write(b dumpWriter) {
	b.WriteString(strconv.FormatUint(uint64(l.RequestsPerUnit), 10))
	b.WriteString(" per ")
	if m := max(l.UnitMultiplier, 1); m == 1 {
		b.WriteString(l.Unit.String())
	} else {
		fmt.Fprintf(b, "%d %ss", m, l.Unit)
	}
	b.WriteString(", ")
	b.WriteString(l.Algorithm.String())
	if l.Burst > 0 {
		fmt.Fprintf(b, ", burst %d", l.Burst)
	}
	if l.Charge != algorithm.ChargeAdmitted {
		b.WriteString(", charge ")
		b.WriteString(l.Charge.String())
	}
	if l.Precision != PrecisionStrict {
		b.WriteString(", precision ")
		b.WriteString(l.Precision.String())
	}
	if l.Penalty != nil {
		b.WriteString(", ")
		writePenalty(b, l.Penalty)
	}
	if l.Name != "" {
		b.WriteString(", name ")
		b.WriteString(quote(l.Name))
	}
}

// quote returns s as is when it is plain, else as a Go string literal.
func quote(s string) string {
	plain := s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r) || strings.ContainsRune(`"\/=:,{}[]`, r)
	})
	if plain {
		return s
	}
	return strconv.Quote(s)
}
