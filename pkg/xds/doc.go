// Package xds receives rate-limit rules over xDS, as Envoy Gateway delivers
// them to envoyproxy/ratelimit.
//
// A Client opens an aggregated discovery stream
// (envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources,
// state of the world) and subscribes, as a node with an id and metadata, to
// RateLimitConfig resources (TypeURL). Every response carries the full set
// of resources. Build renders each resource as the envoyproxy/ratelimit
// YAML file it stands for, xds/<resource name>.yaml in an in-memory file
// system, and loads them with descriptor.LoadFS: xDS rules pass exactly the
// validation a configuration directory passes, and an error names the
// resource's file, line and descriptor path. The tree goes to Rules
// (a reload.Reloader), which swaps it in all or nothing.
//
// Guarantees:
//
//   - An update that loads is ACKed with its version; one that does not is
//     NACKed with the last ACKed version, the response's nonce and the
//     validation errors in error_detail, and the previous rules stay live.
//   - go-control-plane's server answers a NACK by offering the same
//     version again at once. An update offered again unchanged after its
//     NACK is refused from memory, without being built or counted again,
//     and the refusal is held back for Options.RetryInterval, so the two
//     sides do not spin; a newer version reaches the client at most that
//     much later.
//   - A resource field the compiled protos do not know is a NACK, never
//     dropped silently.
//   - A failed stream is reopened after a wait that starts at
//     Options.RetryInterval, doubles per failed attempt up to
//     Options.MaxRetryInterval and is jittered; the rules last applied
//     answer meanwhile. A new stream asks without a version, so the server
//     resends its current resources.
//
// Not guaranteed: the protos of module
// github.com/envoyproxy/go-control-plane/ratelimit v0.1.0 name the units
// SECOND to DAY only; a unit beyond them arrives as a number and is
// rejected as an unknown unit. Incremental (delta) xDS and the older
// RateLimitConfigDiscoveryService are not spoken.
package xds
