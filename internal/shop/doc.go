// Package shop holds the business writes of oncerun's demo domain, a support
// agent for an online shop: store credits (made once by a natural key) and
// order notes (made once by the idempotency key that commits with them).
//
// The functions take a pgx.Tx so that they can join the dedup store's
// transaction in [idempotency.Store.Do].
package shop
