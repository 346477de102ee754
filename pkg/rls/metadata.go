package rls

import (
	"strconv"
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tollgatehq/tollgate/pkg/descriptor"
	"github.com/tollgatehq/tollgate/pkg/limiter"
)

// The response's dynamic_metadata is a Struct that Envoy's rate-limit filter
// hands to the filters after it (and to access logs, as
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:KEY)%). It holds up to two
// parts, each switched by an Option:
//
// envoyproxy/ratelimit's (Options.ResponseDynamicMetadata, off by default),
// the same keys and types as its RESPONSE_DYNAMIC_METADATA=true:
//
//	domain       string: the request's domain
//	descriptors  list, one per request descriptor, in order, of Structs:
//	               entries     list of "key=value" strings, as sent
//	               limit       string: the override in protobuf text form, when sent
//	               hitsAddend  number: the descriptor's hits_addend, when sent (0 too)
//	hitsAddend   number: the request's hits_addend, unless 0
//	metadata     Struct: the rules' metadata merged over the descriptors
//	             answered OK whose own rule's limits were counted (not
//	             unlimited, allow or deny lists, overrides or replaced
//	             limits), in request order: mappings under one key
//	             merged recursively, else the first value of a key
//	             winning; absent when empty
//
// tollgate's own (on unless Options.OmitDecisionMetadata), under DecisionKey,
// a list with one Struct per request descriptor, in order, for at most the
// first MaxDecisionDescriptors:
//
//	tollgate: [
//	  {rule: "per_key", code: "OVER_LIMIT", remaining: 0},
//	  {code: "OK"},             a descriptor no rule decided (no match, replaced)
//	  {code: "OK", remaining: 6},  an Envoy override decided
//	]
//
// rule is the name of the limit reported as the descriptor's current_limit,
// or, when it has none, the rule's path in the tree (such as
// "api_key=*/endpoint=/search"), cut to MaxDecisionRuleLen bytes; both come
// from the configuration, never from the request. remaining is the status's
// limit_remaining, present whenever a rule or an override decided. Its size
// is therefore bounded by the bounds, whatever the request: well under 4 KiB.

// DecisionKey is the key of tollgate's own part of the dynamic metadata.
const DecisionKey = "tollgate"

// MaxDecisionDescriptors bounds the descriptors described under
// DecisionKey: those after the first MaxDecisionDescriptors are left out.
const MaxDecisionDescriptors = 16

// MaxDecisionRuleLen bounds the bytes of a rule name or path under
// DecisionKey; a longer one is cut at a character boundary.
const MaxDecisionRuleLen = 128

// The codes as the decision metadata spells them, those of Envoy's enum.
const (
	codeOK        = "OK"
	codeOverLimit = "OVER_LIMIT"
)

// dynamicMetadata builds the dynamic metadata of the answer r to req, or
// returns nil when both parts are off.
func (s *Server) dynamicMetadata(req *rlsv3.RateLimitRequest, r *limiter.Response) *structpb.Struct {
	if !s.ratelimitMetadata && s.omitDecisions {
		return nil
	}
	if s.omitDecisions {
		root := &structpb.Struct{Fields: make(map[string]*structpb.Value, 4)}
		addRatelimitMetadata(root.Fields, req, r)
		return root
	}
	b := newDecisions(r.Statuses)
	if s.ratelimitMetadata {
		addRatelimitMetadata(b.root.Fields, req, r)
	}
	return &b.root
}

// decisionBlock holds the values of the metadata that every answer has,
// allocated at once, with room for one descriptor.
type decisionBlock struct {
	root  structpb.Struct
	list  structpb.Value
	listV structpb.Value_ListValue
	lv    structpb.ListValue
	ptrs  [1]*structpb.Value
	one   [1]decision
}

// decision holds the values describing one descriptor, allocated together
// for all of them.
type decision struct {
	value     structpb.Value
	structV   structpb.Value_StructValue
	st        structpb.Struct
	rule      structpb.Value
	ruleV     structpb.Value_StringValue
	code      structpb.Value
	codeV     structpb.Value_StringValue
	remaining structpb.Value
	remV      structpb.Value_NumberValue
}

// newDecisions returns a block whose root holds DecisionKey for statuses,
// with room for envoyproxy/ratelimit's keys beside it.
func newDecisions(statuses []limiter.Status) *decisionBlock {
	n := min(len(statuses), MaxDecisionDescriptors)
	b := new(decisionBlock)
	b.root.Fields = make(map[string]*structpb.Value, 5)
	var (
		ptrs []*structpb.Value
		ds   []decision
	)
	if n <= 1 {
		ptrs, ds = b.ptrs[:n:n], b.one[:n:n]
	} else {
		ptrs, ds = make([]*structpb.Value, n), make([]decision, n)
	}
	for i := range ds {
		st := &statuses[i]
		d := &ds[i]
		decided := st.Rule != nil || st.Limit != nil
		size := 1
		if decided {
			size = 2
			if st.Rule != nil {
				size = 3
			}
		}
		d.st.Fields = make(map[string]*structpb.Value, size)
		d.codeV.StringValue = codeOK
		if st.Code == limiter.OverLimit {
			d.codeV.StringValue = codeOverLimit
		}
		d.code.Kind = &d.codeV
		d.st.Fields["code"] = &d.code
		if st.Rule != nil {
			d.ruleV.StringValue = ruleName(st)
			d.rule.Kind = &d.ruleV
			d.st.Fields["rule"] = &d.rule
		}
		if decided {
			d.remV.NumberValue = float64(st.Remaining)
			d.remaining.Kind = &d.remV
			d.st.Fields["remaining"] = &d.remaining
		}
		d.structV.StructValue = &d.st
		d.value.Kind = &d.structV
		ptrs[i] = &d.value
	}
	b.lv.Values = ptrs
	b.listV.ListValue = &b.lv
	b.list.Kind = &b.listV
	b.root.Fields[DecisionKey] = &b.list
	return b
}

// ruleName returns what names the rule that decided st: the name of its
// current limit, else the rule's path, cut to MaxDecisionRuleLen bytes.
func ruleName(st *limiter.Status) string {
	name := st.Rule.Path
	if st.Limit != nil && st.Limit.Name != "" {
		name = st.Limit.Name
	}
	if len(name) <= MaxDecisionRuleLen {
		return name
	}
	cut := MaxDecisionRuleLen
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

// addRatelimitMetadata adds envoyproxy/ratelimit's keys for the answer r to
// req to fields.
func addRatelimitMetadata(fields map[string]*structpb.Value, req *rlsv3.RateLimitRequest, r *limiter.Response) {
	fields["domain"] = structpb.NewStringValue(req.GetDomain())
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var merged map[string]any
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if st.Code != limiter.OK || !countedRule(st.Rule) || len(st.Rule.Metadata) == 0 {
			continue
		}
		merged = mergeMetadata(merged, st.Rule.Metadata)
	}
	if len(merged) > 0 {
		// The loader admits only what a Struct holds (descriptor.Rule.Metadata).
		if md, err := structpb.NewStruct(merged); err == nil {
			fields["metadata"] = structpb.NewStructValue(md)
		}
	}
}

// mergeMetadata merges src under dst as envoyproxy/ratelimit does: a key
// dst lacks is added, two mappings under one key are merged recursively,
// and otherwise dst's value stays (the first descriptor's wins). It
// returns the merged mapping; neither argument changes, since both may be
// a rule's own.
func mergeMetadata(dst, src map[string]any) map[string]any {
	out := make(map[string]any, len(dst)+len(src))
	for k, v := range dst {
		out[k] = v
	}
	for k, v := range src {
		have, ok := out[k]
		if !ok {
			out[k] = v
			continue
		}
		haveMap, isMap := have.(map[string]any)
		srcMap, srcIsMap := v.(map[string]any)
		if isMap && srcIsMap {
			out[k] = mergeMetadata(haveMap, srcMap)
		}
	}
	return out
}

// countedRule reports whether rule's own limits were counted: what
// envoyproxy/ratelimit calls a limit that passed when it answers OK.
func countedRule(rule *descriptor.Rule) bool {
	return rule != nil && rule.Action == descriptor.ActionLimit && !rule.Unlimited
}

// descriptorStruct describes d as envoyproxy/ratelimit does.
func descriptorStruct(d *ratelimitv3.RateLimitDescriptor) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 3)
	entries := make([]*structpb.Value, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		entries[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
	}
	fields["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(overrideText(o))
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// overrideText returns o in the compact protobuf text form
// envoyproxy/ratelimit reports, "requests_per_unit:42 unit:HOUR", with
// single spaces: the Go protobuf library's own text output inserts random
// extra spaces, deliberately unstable.
func overrideText(o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) string {
	b := make([]byte, 0, 64)
	if v := o.GetRequestsPerUnit(); v != 0 {
		b = append(b, "requests_per_unit:"...)
		b = strconv.AppendUint(b, uint64(v), 10)
	}
	if u := o.GetUnit(); u != 0 {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, "unit:"...)
		b = append(b, u.String()...)
	}
	if m := o.GetUnitMultiplier(); m != nil {
		if len(b) > 0 {
			b = append(b, ' ')
		}
		b = append(b, "unit_multiplier:{"...)
		if m.GetValue() != 0 {
			b = append(b, "value:"...)
			b = strconv.AppendUint(b, uint64(m.GetValue()), 10)
		}
		b = append(b, '}')
	}
	return string(b)
}
