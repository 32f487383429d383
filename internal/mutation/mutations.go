package main

// Mutation is one small bug that a test must catch.
type Mutation struct {
	// Name identifies the mutation on the command line (-only).
	Name string `json:"name"`
	// Bug says, in words, what the mutated code gets wrong.
	Bug string `json:"bug"`
	// File is the mutated file, relative to the module's root: Go source,
	// or a file it embeds. The mutation reaches the tests' builds only (go
	// test -overlay), never the disk.
	File string `json:"file"`
	// Old is the snippet replaced; it must occur in File exactly once.
	Old string `json:"old"`
	// New replaces it.
	New string `json:"new"`
	// Import, when set, is an import path New needs that File does not
	// import yet; it is added to File's import block.
	Import string `json:"import,omitempty"`
	// Packages are the packages whose tests run, as go test names them.
	Packages []string `json:"packages"`
	// Tests are the test functions that should catch the bug, each defined
	// in one of Packages. They run with -run '^(Tests...)$'.
	Tests []string `json:"tests"`
}

// mutations is the table, one row per promise. Each replaces a snippet of
// the code that keeps the promise with the code of a plausible bug.
//
// To add a row: take as Old the smallest snippet that occurs once in its
// file (a line more if it is not unique), write the bug as New, and find
// the tests that fail on it with
//
//	go run ./internal/mutation -discover -only <name>
//
// then name the fastest of them in Tests. make test checks that every Old
// still occurs once and every named test exists.
var mutations = []Mutation{
	{
		Name:     "claim-conflict",
		Bug:      "the claim has no conflict handling: a second claim of a key fails on the unique index instead of meeting the first",
		File:     "internal/idempotency/row.go",
		Old:      "ON CONFLICT (tenant, key) DO NOTHING\nRETURNING attempts, lease_expiry",
		New:      "RETURNING attempts, lease_expiry",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestBeginCompleteReplay"},
	},
	{
		Name: "args-hash",
		Bug:  "a claim never compares the arguments hash: a key reused with other arguments replays the first call's result",
		File: "internal/idempotency/row.go",
		Old: "\tif r.ArgsHash != a.ArgsHash {\n" +
			"\t\treturn 0, &KeyReuseError{Key: a.key, StoredHash: r.ArgsHash, ProposedHash: a.ArgsHash}\n" +
			"\t}\n",
		New:      "",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestDoKeyReuseWithOtherArgs"},
	},
	{
		Name:     "in-flight-absent",
		Bug:      "a key in flight under a live lease is claimed again as if it were free, instead of answering in flight",
		File:     "internal/idempotency/row.go",
		Old:      "return decideInFlight, nil",
		New:      "return decideReclaim, nil",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestBeginLiveLeaseIsInFlight"},
	},
	{
		Name: "lease-expiry",
		Bug:  "a lease never expires: the key of a worker that died stays in flight for ever, and its outcome is never resolved",
		File: "internal/idempotency/row.go",
		Old: "\t\tif r.LeaseExpired {\n" +
			"\t\t\treturn decideUnknown, nil\n" +
			"\t\t}\n" +
			"\t\treturn decideInFlight, nil",
		New:      "\t\treturn decideInFlight, nil",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestExpiredLeaseIsTakenOverAndStaleOwnerFenced"},
	},
	{
		Name:     "no-claim-before-effect",
		Bug:      "a transactional call begins its transaction without claiming the key: a retry of a completed call runs its effect again",
		File:     "internal/idempotency/do.go",
		Old:      `return "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT idempotency_claim_in_tx('" + tenant + "', '" + key + "')", nil`,
		New:      `return "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT '" + tenant + key + "'", nil`,
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestDoReplaysSecondCall"},
	},
	{
		Name:     "claim-without-lock",
		Bug:      "the transactional claim looks for the key's row without holding the key's lock: concurrent duplicates all run their effect before one of them commits",
		File:     "migrations/010_transactional_claim.sql",
		Old:      "    PERFORM pg_advisory_xact_lock(hashtextextended(p_tenant || '/' || p_key, 1330001));\n",
		New:      "",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestDoConcurrentDuplicatesRunEffectOnce"},
	},
	{
		Name:     "claim-stable",
		Bug:      "the claim function is STABLE: its lookup sees the snapshot taken before the lock was granted, so a duplicate that waited misses the first call's row and runs its effect",
		File:     "migrations/010_transactional_claim.sql",
		Old:      "LANGUAGE plpgsql VOLATILE STRICT AS $$",
		New:      "LANGUAGE plpgsql STABLE STRICT AS $$",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestDoConcurrentDuplicatesRunEffectOnce"},
	},
	{
		Name:     "claim-unescaped",
		Bug:      "the claim's literals are not escaped: a quote in a tenant or key breaks the query, or injects SQL",
		File:     "internal/idempotency/do.go",
		Old:      "tenant, err := pc.EscapeString(a.Key.Tenant)",
		New:      "tenant, err := a.Key.Tenant, error(nil)",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestDoClaimsKeysWithQuotesAndBackslashes"},
	},
	{
		Name:     "key-row-unchecked",
		Bug:      "a transactional call's key row tolerates a row already there (an external call claimed the key meanwhile): the COMMIT makes the effect durable without its key",
		File:     "internal/idempotency/row.go",
		Old:      "VALUES ($1, $2, $3, $4, $5, 'completed', $6, $7, $8, statement_timestamp(), statement_timestamp() + $9::interval)\nRETURNING result",
		New:      "VALUES ($1, $2, $3, $4, $5, 'completed', $6, $7, $8, statement_timestamp(), statement_timestamp() + $9::interval)\nON CONFLICT (tenant, key) DO NOTHING\nRETURNING result",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestDoNeverCommitsEffectWithoutCompletedKey"},
	},
	{
		Name:     "random-key",
		Bug:      "the key holds a random part, so a retry derives another key and makes the effect again",
		File:     "internal/keys/key.go",
		Old:      "b.WriteString(strconv.FormatInt(k.Step, 10))",
		New:      `b.WriteString(strconv.FormatInt(k.Step, 10) + "-" + strconv.FormatUint(rand.Uint64(), 36))`,
		Import:   "math/rand/v2",
		Packages: []string{"./internal/keys"},
		Tests:    []string{"TestKeyString"},
	},
	{
		Name:     "silent-prune",
		Bug:      "the watchdog prunes a key of a live run without raising an alert",
		File:     "internal/watchdog/prune.go",
		Old:      "\n\t\t\t\tactions[k.Key] = PolicyPrune",
		New:      "",
		Packages: []string{"./internal/watchdog"},
		Tests:    []string{"TestPruneExpiredKeepsInFlightKeysAndSkipsUnknownRuns"},
	},
	{
		Name:     "conflicting-approval",
		Bug:      "a run applies a second decision that contradicts the first: only duplicates are ignored",
		File:     "workflows/approval.go",
		Old:      "if s.State != StepPendingApproval {\n\t\tswitch {",
		New:      "if s.State != StepPendingApproval && (s.Approval == nil || s.Approval.Decision == sig.Decision) {\n\t\tswitch {",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestApprovalSecondDecisionChangesNothing"},
	},
	{
		Name: "skip-paired-read",
		Bug:  "an external call whose earlier attempt's outcome is unknown never asks the tool's paired read",
		File: "activities/external.go",
		Old: "\tif tool.PairedRead != \"\" {\n" +
			"\t\text.Read = func(ctx context.Context) (bool, json.RawMessage, error) { return a.pairedRead(ctx, tool, call) }\n" +
			"\t}\n",
		New:      "",
		Packages: []string{"./activities"},
		Tests:    []string{"TestRunToolExternalPairedReadIsTriedAgain"},
	},
	{
		Name:     "resend-expired-key",
		Bug:      "an unknown outcome is resolved by sending again under the same key even after the provider has forgotten the key",
		File:     "internal/idempotency/external.go",
		Old:      "if ext.KeyLifetime > 0 && age < ext.KeyLifetime {",
		New:      "if ext.KeyLifetime > 0 {",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestExternalUnknownOutcomeWithoutRead"},
	},
	{
		Name: "approval-other-args",
		Bug:  "a run applies an approval given for other arguments than the step's",
		File: "workflows/approval.go",
		Old: "\tif sig.ArgsHash != s.ArgsHash {\n" +
			"\t\tlog.Warn(\"approval signal ignored: it was given for other arguments\", \"step\", sig.Step,\n" +
			"\t\t\t\"signal_args_hash\", sig.ArgsHash, \"step_args_hash\", s.ArgsHash, \"approver\", sig.Approver)\n" +
			"\t\treturn\n" +
			"\t}\n",
		New:      "",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestApprovalForOtherArgumentsDoesNotApply"},
	},
	// Neighbours of the promises above: the approvals service refuses a
	// conflicting decision as the run does (8), the check of a step whose
	// retries ran out must not take a key in flight for settled (3), and
	// the watchdog's alert is a log line too (7).
	{
		Name:     "conflicting-decision-api",
		Bug:      "the approvals service refuses a change of decision only from the approver who made it: another approver's contrary decision is answered as a repeat",
		File:     "internal/approvalstore/decide.go",
		Old:      "if orig.Decision != r.Decision {",
		New:      "if orig.Decision != r.Decision && orig.Approver == r.Approver {",
		Packages: []string{"./internal/approvalstore"},
		Tests:    []string{"TestDecideRecordsOneDecisionOfRecord"},
	},
	{
		Name:     "in-flight-settled",
		Bug:      "a step whose retries ran out while its key was in flight is reported failed, as if no attempt had made the effect, instead of waiting for a person",
		File:     "internal/idempotency/resolve.go",
		Old:      "\tcase StateInFlight:\n\t\treturn true\n",
		New:      "\tcase StateInFlight:\n\t\treturn false\n",
		Packages: []string{"./activities"},
		Tests:    []string{"TestCheckOutcomeIsUnknownWhileAnAttemptMayHaveMadeTheEffect"},
	},
	{
		Name:     "silent-prune-log",
		Bug:      "the watchdog logs its alert about a live run's key at debug level, unseen at the default level",
		File:     "internal/watchdog/prune.go",
		Old:      `a.log().Error("key expired while its run is alive",`,
		New:      `a.log().Debug("key expired while its run is alive",`,
		Packages: []string{"./internal/watchdog"},
		Tests:    []string{"TestKeyOfALiveRunExpiringLogsAnError"},
	},
	// A deployment's tools reach every entry point (issue 15).
	{
		Name:     "registry-drops-deployment-tools",
		Bug:      "the one registry leaves the deployment's own tools out: its workers, serve, dev and the plan checks refuse plans that call them",
		File:     "worker/run.go",
		Old:      "return slices.Concat(shop.Tools(shopCfg), externals, cfg.Tools), nil",
		New:      "return slices.Concat(shop.Tools(shopCfg), externals), nil",
		Packages: []string{"./worker"},
		Tests:    []string{"TestRegistryHoldsTheDeploymentsTools"},
	},
	{
		Name:     "cli-ignores-deployment",
		Bug:      "the CLI builds its worker configuration from the environment alone: serve, dev and start's plan check never see the deployment's tools",
		File:     "internal/cli/root.go",
		Old:      "\tif e.Configure != nil {\n\t\te.Configure(&cfg)\n\t}\n",
		New:      "",
		Packages: []string{"./internal/cli"},
		Tests:    []string{"TestStartChecksPlansAgainstTheDeploymentsRegistry"},
	},
	{
		Name:     "intent-twice",
		Bug:      "a run executes a repeated call of a keyed or external tool again: a re-planned refund is refunded twice",
		File:     "workflows/turn.go",
		Old:      "done := r.appliedIntent(s.Tool, s.ArgsHash)\n",
		New:      "done := (*Step)(nil)\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestRepeatedIntentIsADuplicateOfTheAppliedStep"},
	},
	{
		Name:     "edit-raises-amount",
		Bug:      "an edit may raise an amount the tool lets only go down: an approver refunds more than the agent proposed",
		File:     "tools/registry.go",
		Old:      "\tif e.Edits == EditNoIncrease {\n",
		New:      "\tif e.Edits == EditNoIncrease && false {\n",
		Packages: []string{"./tools"},
		Tests:    []string{"TestPrepareEditFollowsTheToolsRule"},
	},
	{
		Name:     "edit-runs-proposed",
		Bug:      "an applied edit leaves the step's arguments as proposed: the run executes what the approver changed",
		File:     "workflows/approval.go",
		Old:      "\ts.Args, s.ArgsHash = checked.Args, checked.ArgsHash\n",
		New:      "",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestEditedStepRunsOnceWithTheEditedArguments"},
	},
	{
		Name:     "deadline-unwarned",
		Bug:      "a step waits to its deadline without the warnings: nobody hears of it before it expires",
		File:     "workflows/approval.go",
		Old:      "\t\tr.warnDeadline(ctx, s, before, onExpiry)\n",
		New:      "",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestDeadlineWarningsComeOnceEachBeforeTheDeadline"},
	},
	{
		Name:     "mcp-keyless",
		Bug:      "an MCP tool call carries no idempotency key in its _meta: a server that honours keys applies a resent call again",
		File:     "internal/mcp/call.go",
		Old:      "Meta:      mcpsdk.Meta{MetaIdempotencyKey: key},",
		New:      "Meta:      mcpsdk.Meta{},",
		Packages: []string{"./internal/mcp"},
		Tests:    []string{"TestARefundUnderOneKeyIsAppliedOnceByAServerThatHonoursTheKey"},
	},
	{
		Name: "temporal-refusal-waited",
		Bug:  "a Temporal server that refuses our TLS is waited for like one that is not there: a wrong certificate costs TEMPORAL_CONNECT_WAIT and ends with a hint to wait longer",
		File: "internal/temporalconn/dial.go",
		Old: "\t\tif refused := Refusal(opts, err); refused != nil {\n\t\t\treturn nil, refused\n\t\t}\n" +
			"\t\tif refused := probeTLS(ctx, opts); refused != nil {\n\t\t\treturn nil, refused\n\t\t}\n",
		New:      "",
		Packages: []string{"./internal/temporalconn"},
		Tests:    []string{"TestDialFailsAtOnceWhenTheServerIsSignedByAnUnknownCA"},
	},
	{
		Name:     "temporal-cert-unchecked",
		Bug:      "a client certificate and a key that are not a pair are not checked at start: the error comes from the first dial, naming no variable",
		File:     "internal/temporalconn/load.go",
		Old:      "\tif len(certPEM) > 0 {\n\t\tif _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {",
		New:      "\tif false {\n\t\tif _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {",
		Packages: []string{"./internal/temporalconn"},
		Tests:    []string{"TestLoadNamesTheVariableAndPathOfWhatDoesNotLoad"},
	},
	{
		Name:     "temporal-env-ignored",
		Bug:      "the worker reads only TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE: an API key or TLS settings are dropped and Temporal Cloud cannot be reached",
		File:     "worker/dial.go",
		Old:      "\topts := c.TemporalOptions\n",
		New:      "\tvar opts client.Options\n",
		Packages: []string{"./worker"},
		Tests:    []string{"TestConfigFromEnvReachesTemporalAsTheTemporalCLIDoes"},
	},
	{
		Name:     "temporal-mtls-unprobed",
		Bug:      "a dial over TLS that met a broken pipe is not asked why: with TLS 1.3 a server that refuses our client certificate is waited for, for TEMPORAL_CONNECT_WAIT",
		File:     "internal/temporalconn/dial.go",
		Old:      "\t\tif refused := probeTLS(ctx, opts); refused != nil {\n\t\t\treturn nil, refused\n\t\t}\n",
		New:      "",
		Packages: []string{"./internal/integration"},
		Tests:    []string{"TestMutualTLSTemporal"},
	},
	{
		Name:     "unstorable-result-retried",
		Bug:      "an external call answered with a result the store refuses (a NUL) is not settled: its completion fails and the step is retried blind for the retry horizon, its status saying running",
		File:     "internal/idempotency/external.go",
		Old:      "\tif err == nil {\n\t\terr = CheckResult(result)\n\t}\n",
		New:      "",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestExternalLeavesAnAnsweredCallWhoseResultCannotBeStoredUnresolved"},
	},
	{
		Name:     "failure-unescaped",
		Bug:      "a failure is recorded as its message says: a provider's answer with a NUL keeps the failure from being written, and the key stays in flight",
		File:     "internal/idempotency/result.go",
		Old:      "\tf.Message = edge.Clean(f.Message, maxFailureBytes)\n",
		New:      "",
		Packages: []string{"./internal/idempotency"},
		Tests:    []string{"TestFailRecordsAMessageWhateverItHolds"},
	},
	{
		Name:     "resolve-compares-doubles",
		Bug:      "resolve results are compared through their RFC 8785 form: a 64-bit provider id sent twice is a conflict, or its neighbour a repeat",
		File:     "internal/approvalstore/resolve.go",
		Old:      "\tsame, err := edge.Equal(a, b)\n\treturn err == nil && same\n",
		New:      "\tca, errA := keys.Canonicalize(a)\n\tcb, errB := keys.Canonicalize(b)\n\treturn errA == nil && errB == nil && string(ca) == string(cb)\n",
		Packages: []string{"./internal/approvalstore"},
		Tests:    []string{"TestResolveRepeatsAnAnswerWithAnIntegerBeyondDoubles"},
	},
	{
		Name:     "edit-flips-sign",
		Bug:      "an edit may flip an amount's sign: a debit of 5000 becomes a credit",
		File:     "tools/registry.go",
		Old:      "\t\tcase before.Sign() != 0 && after.Sign() != 0 && before.Sign() != after.Sign():\n",
		New:      "\t\tcase false:\n",
		Packages: []string{"./tools"},
		Tests:    []string{"TestNoIncreaseIsARuleOnValues"},
	},
	{
		Name:     "amount-below-zero",
		Bug:      "an amount below zero is accepted where the schema does not allow it: an approver edits a 5000 voucher to -999999 and it is sent",
		File:     "tools/registry.go",
		Old:      "\tif err := e.checkAmountValues(canonical); err != nil {\n",
		New:      "\tif err := e.checkAmountValues(canonical); err != nil && false {\n",
		Packages: []string{"./tools"},
		Tests:    []string{"TestAnAmountBelowZeroIsRefusedUnlessTheSchemaAllowsIt"},
	},
	{
		Name:     "mcp-id-rounded",
		Bug:      "an MCP tool's structured content is kept as the SDK read it: a 64-bit id beyond 2^53 is recorded rounded",
		File:     "internal/mcp/call.go",
		Old:      "\t\treturn structured(res)\n",
		New:      "\t\treturn res.StructuredContent, nil\n",
		Packages: []string{"./internal/mcp"},
		Tests:    []string{"TestAnIntegerBeyondDoublesWithoutExactTextCannotBeKept"},
	},
	{
		Name:     "local-steps-in-old-runs",
		Bug:      "a run that began before database steps ran as local activities runs them locally on replay: its recorded activities no longer match and the run is stuck",
		File:     "workflows/local.go",
		Old:      "\treturn r.bundled && call.Local\n",
		New:      "\treturn call.Local\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestReplayRecordedHistories", "TestGenerationsKeepTheirRunsWays"},
	},
	{
		Name:     "compact-plan-loses-args",
		Bug:      "a compact planning answer is not filled in: a step whose arguments were already canonical runs with none",
		File:     "activities/plan.go",
		Old:      "\t\tc.Args = c.Proposed.Args\n",
		New:      "\t\t_ = c.Proposed.Args\n",
		Packages: []string{"./activities"},
		Tests:    []string{"TestPlanCompactAnswer"},
	},
	{
		Name:     "script-batch-never-continues-as-new",
		Bug:      "a script's batch of local steps runs to its end past the history limit: 32 steps' markers land in a history that was full",
		File:     "workflows/turn.go",
		Old:      "\t\t\tif i > 0 && r.in.Planner == planner.NameScript && r.historyFull(ctx) {\n",
		New:      "\t\t\tif i < 0 && r.in.Planner == planner.NameScript && r.historyFull(ctx) {\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestLocalStepsContinueAsNewWhenTheirMarkersFillTheHistory"},
	},
	{
		Name:     "parallel-turn-unbounded",
		Bug:      "a parallel turn runs every step at once, whatever limits.parallel says",
		File:     "workflows/turn.go",
		Old:      "slots := &turnSlots{limit: r.in.Limits.Parallel}",
		New:      "slots := &turnSlots{limit: len(jobs) + 1}",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestParallelTurnRunsAtMostLimitsParallelStepsAtOnce"},
	},
	{
		Name:     "parallel-turn-same-intent",
		Bug:      "two identical keyed calls of one parallel turn do not wait for each other: both run, two effects",
		File:     "workflows/turn.go",
		Old:      "\tif !parallel || !call.OncePerRun {\n",
		New:      "\tif true {\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestParallelTurnMakesTwoIdenticalKeyedCallsOneEffect"},
	},
	{
		Name:     "cancel-keeps-approvals",
		Bug:      "a cancel leaves the run's pending approvals waiting: the run neither ends nor withdraws them",
		File:     "workflows/control.go",
		Old:      "\t\tcase s.State == StepPendingApproval:\n",
		New:      "\t\tcase s.State == StepPendingApproval && false:\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestCancelWithdrawsApprovalsLetsRunningStepsEndAndStartsNothing"},
	},
	{
		Name:     "message-lost-at-done",
		Bug:      "a message accepted while the planner's last turn ran is dropped when the planner says done",
		File:     "workflows/turn.go",
		Old:      "\t\t\tif r.undelivered() > 0 {\n",
		New:      "\t\t\tif false {\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestAMessageThatComesWhileThePlannerEndsTheRunIsRead"},
	},
	{
		Name:     "parallel-turn-unversioned",
		Bug:      "a model's parallel turn is made one call after another again: runs recorded with parallel turns no longer replay",
		File:     "workflows/turn.go",
		Old:      "\t\tif plan.Parallel && r.in.Planner != planner.NameScript && len(plan.Calls) > 1 &&\n",
		New:      "\t\tif false && plan.Parallel && r.in.Planner != planner.NameScript && len(plan.Calls) > 1 &&\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestReplayRecordedHistories"},
	},
	{
		Name:     "parallel-edit-twice",
		Bug:      "a step of a parallel turn edited into a sibling's running intent does not wait for it: the same refund is made twice",
		File:     "workflows/turn.go",
		Old:      "\t\tif err := r.awaitIntentFree(ctx, s); err != nil {\n",
		New:      "\t\tif err := error(nil); err != nil {\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestAnEditThatMakesAParallelStepRepeatARunningOneIsADuplicate"},
	},
	{
		Name:     "parallel-failure-abandons-turn",
		Bug:      "a step that fails the run leaves its turn's other steps behind: approvals pending for good, effects in flight unreported",
		File:     "workflows/turn.go",
		Old:      "\tif err := workflow.Await(ctx, func() bool { return left == 0 }); err != nil {\n",
		New:      "\tif err := workflow.Await(ctx, func() bool { return left == 0 || runErr != nil }); err != nil {\n",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestAStepThatFailsTheRunLetsItsTurnEndFirst"},
	},
	{
		Name:     "decision-while-recorded-dropped",
		Bug:      "a step reads pending only after its request is recorded: a decision sent meanwhile is ignored and the step expires",
		File:     "workflows/approval.go",
		Old:      "\ts.State = StepPendingApproval\n\ts.Approval = &StepApproval{",
		New:      "\ts.Approval = &StepApproval{",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestADecisionThatComesWhileTheRequestIsRecordedApplies"},
	},
	{
		Name:     "spend-cap-unlocked",
		Bug:      "a charge reads a cap's total without locking the cap: charges racing for the last of a cap all fit and cross it",
		File:     "migrations/015_spend_limits.sql",
		Old:      "ORDER BY s.name FOR UPDATE LOOP",
		New:      "ORDER BY s.name LOOP",
		Packages: []string{"./internal/spend"},
		Tests:    []string{"TestChargesRacingForTheLastOfACapNeverCrossIt"},
	},
	{
		Name:     "spend-counted-twice",
		Bug:      "a step's key that counted already counts again: a retry or a replay spends twice",
		File:     "migrations/015_spend_limits.sql",
		Old:      "IF prior IS NOT NULL AND prior <> 'released' THEN",
		New:      "IF false THEN",
		Packages: []string{"./internal/spend"},
		Tests:    []string{"TestAStepCountsOnceWhateverRetries"},
	},
	{
		Name:     "spend-over-applies",
		Bug:      "a database step over a cap applies its effect anyway: the cap is crossed and nobody is asked",
		File:     "activities/tool.go",
		Old:      "\t\t\t\tif got.Over != nil {\n\t\t\t\t\treturn nil, &spend.OverError{Level: *got.Over}\n\t\t\t\t}\n",
		New:      "",
		Packages: []string{"./activities"},
		Tests:    []string{"TestADatabaseStepThatWouldCrossACapParksAndCommitsNothing"},
	},
	{
		Name:     "spend-not-applied-kept",
		Bug:      "a reservation of an external call that provably did not happen is kept: it counts against the cap for nothing",
		File:     "activities/tool.go",
		Old:      "\t\t\t\ta.release(ctx, claim, charge)\n",
		New:      "",
		Packages: []string{"./activities"},
		Tests:    []string{"TestAnExternalStepsReservationIsSettledByItsOutcome"},
	},
	{
		Name:     "limit-no-exception",
		Bug:      "an approve at a limit does not let the step past: it parks again for ever",
		File:     "workflows/approval.go",
		Old:      "\ts.Limit.Exception = s.Approval.Decision == DecisionApprove\n",
		New:      "",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestAStepAtALimitWaitsAndRunsOnceAsAnException"},
	},
	{
		Name:     "limit-stale-round",
		Bug:      "a decision of an earlier round applies to a later one: an approval under the tool's rule lets the step past the cap",
		File:     "workflows/approval.go",
		Old:      "\tif s.Approval.Round > 1 && sig.Round != s.Approval.Round {",
		New:      "\tif false {",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestAStepApprovedBeforeTheCapWaitsAgainInARoundOfItsOwn"},
	},
	{
		Name:     "limit-after-resolution-done",
		Bug:      "a step sent again after a person answered not_applied that parks at a limit is reported done without having run",
		File:     "workflows/turn.go",
		Old:      "\t\t// The limits may have been reached while a person looked.\n\t\tif o, ended, runErr := r.parkedAtLimit(ctx, s, sl, call, parallel, &out, &err); ended || runErr != nil {\n\t\t\treturn o, o.Outcome == planner.OutcomeDuplicate, runErr\n\t\t}\n",
		New:      "",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestAStepSentAgainAfterAResolutionCanParkAtALimit"},
	},
	{
		Name:     "limits-carry-dropped",
		Bug:      "Continue-As-New forgets whether the run began with limits: a run from before them starts parking in its next generation",
		File:     "workflows/agentrun.go",
		Old:      "v >= spendLimits && (c == nil || c.Limits)",
		New:      "v >= spendLimits",
		Packages: []string{"./workflows"},
		Tests:    []string{"TestGenerationsKeepTheirRunsAnswerOnLimits"},
	},
}
