// Package payments is a sandbox payment provider: a small HTTP server whose
// refunds API behaves like Stripe's, including the ways a real provider
// fails, so that oncerun's once-only guarantees can be tried against an
// honest opponent. It runs as its own program (see [Command]) or in a test
// (see [Start]) and shares nothing with oncerun's database.
//
// # API
//
// JSON everywhere; every request carries "Authorization: Bearer <key>"
// ([Config.APIKey]), else 401 authentication_error.
//
//	POST /v1/refunds              {"payment_id","amount","currency"} + Idempotency-Key header
//	GET  /v1/refunds              ?payment_id= &idempotency_key= &created_gte=<unix seconds>
//	POST /v1/sandbox/payments     one payment object or an array of them
//	GET  /v1/sandbox/payments
//	POST /v1/sandbox/faults       {"mode","count"}
//	GET  /v1/sandbox/faults
//
// Errors are {"error":{"type","code","message","param"}} with the types
// authentication_error, invalid_request_error, idempotency_error and
// api_error. Lists are {"data":[...]}; refunds are ordered by creation time,
// then id. Unknown body fields and unknown query parameters are 400s.
//
// # Refunds and idempotency keys
//
// The Idempotency-Key header is required (1 to 255 characters). A refund
// draws on a seeded payment in the payment's currency (given in either case,
// stored in lower case) and may not exceed what is left of it: otherwise 404
// resource_missing, 400 currency_mismatch or 400 amount_too_large, and
// nothing is applied.
//
// A successful refund binds its key for [Config.KeyRetention], counted from
// that request. Within it, the same key with the same payment_id, amount and
// currency returns the first refund again (with the header
// "Idempotent-Replayed: true"); with different values it is a 422
// idempotency_error; while a request with the key is still being processed
// it is a 409 idempotency_error request_in_progress. After the retention the
// key is forgotten and the same request makes a new refund, as real
// providers do; the old refund stays in the ledger and can still be listed
// by its key.
//
// Unlike Stripe, which also remembers a key's 4xx answers, only successful
// refunds bind a key here: a request that failed may be retried with the
// same key and a corrected body.
//
// # Faults
//
// A fault hits one request when named in its Sandbox-Fault header, or the
// next N requests when queued with POST /v1/sandbox/faults or
// [Server.SetFault] (count 0 clears a mode). The header wins and consumes
// nothing queued. Queued faults are consumed by well-formed requests only
// (authenticated, valid key and body or query), oldest mode first.
//
//	drop_after_apply    apply, then close the connection without an answer
//	error_after_apply   apply, then answer 500 api_error
//	error_before_apply  answer 500 api_error; nothing is applied
//	delay=<duration>    hold the request (its key is in progress), then
//	                    apply and answer normally
//	read_unavailable    GET /v1/refunds answers 503 api_error unavailable
//
// The first four hit POST /v1/refunds; read_unavailable hits GET
// /v1/refunds. The "after" faults replace whatever the answer would have
// been, including a refusal: the client cannot tell what happened.
//
// # Durability
//
// The ledger (payments, every refund, retained keys) is the file
// ledger.json in [Config.DataDir], rewritten atomically (temporary file,
// fsync, rename) after every change and before the answer is written or the
// connection dropped. A new server on the same directory sees all of it.
// Queued faults live in memory only.
package payments
