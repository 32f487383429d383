package approvalstore

// SQL of the steps that wait for a person (an approval, an answer, a
// resolution), for the queries of other packages that list runs by them:
// the statements on this package's tables stay here.
const (
	// WaitingRunsSQL selects the run_id of each run of tenant $1 with a
	// step waiting for a person.
	WaitingRunsSQL = `SELECT run_id FROM approvals WHERE tenant = $1 AND state = 'pending'
        UNION SELECT run_id FROM questions WHERE tenant = $1 AND state = 'pending'
        UNION SELECT run_id FROM resolutions WHERE tenant = $1 AND state = 'pending'`
	// WaitingStepsSQL counts the steps of run r.run_id of tenant r.tenant
	// that wait for a person: a scalar expression over a row r.
	WaitingStepsSQL = `((SELECT count(*) FROM approvals a WHERE a.tenant = r.tenant AND a.run_id = r.run_id AND a.state = 'pending')
  + (SELECT count(*) FROM questions q WHERE q.tenant = r.tenant AND q.run_id = r.run_id AND q.state = 'pending')
  + (SELECT count(*) FROM resolutions v WHERE v.tenant = r.tenant AND v.run_id = r.run_id AND v.state = 'pending'))`
)
