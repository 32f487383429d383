package approvalstore

// StepRequest is what every request about one step says, a decision's and
// an answer's alike, and what its audit row records of who sent it.
type StepRequest struct {
	Tenant string
	RunID  string
	Step   int64
	// Round is the round of the step the request is about. For a
	// decision, the round of the approval the approver saw; 0 is the
	// first, and a request for another round than the one the step waits
	// in is refused ([ErrRoundChanged]): so a decision that names no round
	// (a client from before rounds, a retry of an approve under the tool's
	// rule) never decides a later round, where an approve is an exception
	// to a spend limit. For an answer, 0 means the step's latest round.
	Round int
	// By names who asks, and Role their role, recorded as given.
	By   string
	Role string
	// May says whether Role lets the requester decide or answer. A request
	// that may not is recorded as forbidden and refused: [ErrForbidden].
	May bool
	// RemoteAddr, UserAgent and Via (ViaAPI, ViaInbox or ViaCLI) say where
	// the request came from.
	RemoteAddr string
	UserAgent  string
	Via        string
	// Invalid, when set, is what the caller found wrong with the request's
	// values (a body that does not decode, a malformed args hash, a comment
	// with control characters). Such a request is recorded as invalid and
	// refused with [ErrInvalid], after the checks that leave no row or a
	// forbidden one.
	Invalid error
}

// Local is a request of by's from this machine without the approvals
// service (the CLI with the database's URL): role local, which may decide
// and answer.
func Local(tenant, runID string, step int64, by string) StepRequest {
	return StepRequest{Tenant: tenant, RunID: runID, Step: step, By: by, Role: RoleLocal, May: true, RemoteAddr: RemoteLocal, Via: ViaCLI}
}
