package idempotency

// RunHoldsNoKeySQL is a condition, for the statements of other packages,
// that run $run of tenant $tenant (two SQL expressions, put in with
// fmt.Sprintf) holds no key: the statements on the keys' table stay here.
const RunHoldsNoKeySQL = `NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.run_id = %[1]s AND k.tenant = %[2]s)`
