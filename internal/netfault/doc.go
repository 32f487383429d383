// Package netfault is a TCP proxy that puts a bad network between two parts
// of oncerun, for the chaos harness and for tests: a worker's connections to
// PostgreSQL, to Temporal's frontend, to a provider, to an MCP server or to
// an SMTP server go through a [Proxy], and the proxy's [Fault] decides what
// the network does with them.
//
// # Faults
//
// A fault is what production networks do that a process kill does not:
//
//   - a black hole ([Fault.Hold]): the connection stays open and nothing
//     arrives, in one direction or both, as behind a firewall that drops
//     packets, a dead NAT entry or a partitioned zone. Bytes already sent
//     wait in the proxy and arrive when the fault heals, as TCP's
//     retransmissions would; a connection opened during the fault is
//     accepted and joined to its destination only once it heals.
//   - a slow link ([Fault.Latency], [Fault.Jitter], [Fault.Bandwidth]).
//   - refused connections ([Fault.Refuse]): new connections are reset at
//     once.
//   - reset connections ([Proxy.Reset]): every open connection is reset,
//     as by a restarted load balancer.
//
// A proxy without a fault forwards bytes as they come. [Proxy.Set] changes
// the fault of every connection, open or new, at once.
package netfault
