// @ts-check
// The walkthrough of docs/approvals.md through the client generated from
// approvals/openapi.json (schema.d.ts, with openapi-fetch): an operator
// starts a scripted refund whose credit needs approval, an approver finds
// the step in the approvals list and approves it, and the run is read
// until it has completed.
//
// ONCERUN_API is the service's address; ONCERUN_OPERATOR_TOKEN and
// ONCERUN_APPROVER_TOKEN are an operator's and an approver's tokens of one
// tenant; ONCERUN_RUN_ID is the run's id. It exits 1 at the first answer
// that is not the one expected, and prints one line per step otherwise.

import createClient from "openapi-fetch";

/** @typedef {import("./schema.js").paths} paths */

/** @type {Record<string, string | undefined>} */
const environ = /** @type {any} */ (globalThis).process.env;
const env = (/** @type {string} */ name) => {
  const v = environ[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const baseUrl = env("ONCERUN_API");
const runID = env("ONCERUN_RUN_ID");

/** @param {string} token */
const clientOf = (token) => createClient(/** @type {import("openapi-fetch").ClientOptions} */ ({
  baseUrl, headers: { Authorization: `Bearer ${token}` },
}));
/** @type {import("openapi-fetch").Client<paths>} */
const operator = clientOf(env("ONCERUN_OPERATOR_TOKEN"));
/** @type {import("openapi-fetch").Client<paths>} */
const approver = clientOf(env("ONCERUN_APPROVER_TOKEN"));
/** @type {import("openapi-fetch").Client<paths>} */
const anonymous = createClient({ baseUrl });

/**
 * @param {string} what
 * @param {{response: Response, error?: unknown}} res
 * @param {number} status
 */
function expect(what, res, status) {
  if (res.response.status !== status) {
    throw new Error(`${what}: ${res.response.status}, want ${status}: ${JSON.stringify(res.error)}`);
  }
}

/**
 * until asks again every 200 ms until ask returns a value, for a minute.
 * @template T
 * @param {string} what
 * @param {() => Promise<T | undefined>} ask
 * @returns {Promise<T>}
 */
async function until(what, ask) {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    const v = await ask();
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${what}: not within a minute`);
}

const doc = await anonymous.GET("/v1/openapi.json");
expect("GET /v1/openapi.json", doc, 200);
console.log(`document: OpenAPI ${doc.data?.openapi}`);

const started = await operator.POST("/v1/runs", {
  body: {
    run_id: runID,
    goal: "refund order 1001",
    plan: [
      { tool: "lookup_order", args: { order_id: "1001" } },
      { tool: "issue_credit", args: { order_id: "1001", reason: "damaged_in_transit", amount_cents: 25900, currency: "EUR" } },
    ],
  },
});
expect("POST /v1/runs", started, 201);
console.log(`started: ${started.data?.run_id} (${started.data?.status_url})`);

const refused = await approver.POST("/v1/runs", { body: { run_id: `${runID}-2`, goal: "refund" } });
expect("POST /v1/runs as an approver", refused, 403);
console.log(`refused: ${refused.error?.error.code}`);

const item = await until("the credit's approval", async () => {
  const list = await approver.GET("/v1/approvals", { params: { query: { state: "pending" } } });
  expect("GET /v1/approvals", list, 200);
  return list.data?.approvals.find((a) => a.run_id === runID && a.kind === "approval");
});
console.log(`pending: step ${item.step} ${item.tool} (${item.amounts?.map((m) => m.text).join(", ")}): ${item.reason}`);

const decided = await approver.POST("/v1/runs/{run_id}/steps/{step}/approve", {
  params: { path: { run_id: runID, step: item.step } },
  body: { args_hash: item.args_hash, comment: "the photos show the damage" },
});
expect("POST approve", decided, 202);
console.log(`approved: step ${decided.data?.decision.step} by ${decided.data?.decision.approver}`);

const status = await until("the run's completion", async () => {
  const st = await approver.GET("/v1/runs/{run_id}", { params: { path: { run_id: runID } } });
  expect("GET /v1/runs/{run_id}", st, 200);
  if (st.data?.state === "failed") throw new Error(`the run failed: ${st.data.error}`);
  return st.data?.state === "completed" ? st.data : undefined;
});
console.log(`completed: ${status.run_id}, steps ${(status.steps ?? []).map((s) => `${s.step} ${s.tool} ${s.state}`).join("; ")}`);
