// Package temporalconn is how every oncerun process reaches Temporal.
//
// [Load] reads the client's options as the temporal CLI does, with
// Temporal's own envconfig: the variables TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS and TEMPORAL_TLS_*,
// TEMPORAL_GRPC_META_*, and the TOML profile named by TEMPORAL_PROFILE in
// TEMPORAL_CONFIG_FILE (or the user's temporal.toml). It loads every
// certificate and key at once, so that one that does not load is an error
// naming the variable (or the profile's field) and the path.
//
// [Dial] connects, waiting with backoff only for a server that is not there
// yet. A server that refuses us (a TLS handshake that fails, a missing or
// wrong API key or client certificate) fails at once, saying what failed
// and which variables to check.
//
// Secrets (an API key, a key's PEM data) stay in the client's options: no
// error, log line or [Describe] text of this package contains them.
package temporalconn
