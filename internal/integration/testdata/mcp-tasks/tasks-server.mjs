// A test MCP server of oncerun's, written with the official TypeScript SDK,
// whose tools run as MCP tasks (the 2025-11-25 specification):
//
//   ship_parcel {order_id, seconds}   ships a parcel once its task has run
//                                     for seconds, writing it to the ledger
//   ask_parcel {order_id}             asks which size (elicitation, while
//                                     the task waits for input), then ships
//   failing_job {}                    a task that ends failed
//   forgetful_job {}                  a task the server forgets (its time to
//                                     live is half a second)
//   cancelled_job {}                  a task cancelled at the server, by
//                                     somebody else, after it began
//   stalling_job {}                   a task whose tasks/get, once it has
//                                     begun, is never answered
//
// Run it as `node tasks-server.mjs stdio`, or `node tasks-server.mjs http`
// with PORT set (it prints "listening on PORT" when it is ready). LEDGER
// names the file each shipped parcel is appended to, one JSON line each: the
// server's own record of its effects.
import fs from "node:fs";
import http from "node:http";
import { randomUUID } from "node:crypto";
import { z } from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from "@modelcontextprotocol/sdk/experimental/tasks";
import { ElicitResultSchema } from "@modelcontextprotocol/sdk/types.js";

const ledger = process.env.LEDGER;

function ship(parcel) {
  if (ledger) fs.appendFileSync(ledger, JSON.stringify(parcel) + "\n");
  return { content: [{ type: "text", text: JSON.stringify(parcel) }], structuredContent: parcel };
}

// stalled are the tasks whose tasks/get the server never answers.
const stalled = new Set();

class StallingTaskStore extends InMemoryTaskStore {
  async getTask(taskId, sessionId) {
    if (stalled.has(taskId)) return new Promise(() => {});
    return super.getTask(taskId, sessionId);
  }
}

function newServer() {
  const taskStore = new StallingTaskStore();
  const server = new McpServer({ name: "oncerun-test-tasks", version: "1.0.0" }, {
    capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
    taskStore,
    taskMessageQueue: new InMemoryTaskMessageQueue(),
  });
  // job registers a tool that runs as a task: start begins its work once
  // the task is created (the tool answers at once with the task).
  const job = (name, description, inputSchema, start, ttl = 600000, pollInterval = 200) =>
    server.experimental.tasks.registerToolTask(name, {
      description,
      inputSchema,
      execution: { taskSupport: "required" },
      annotations: { readOnlyHint: false, destructiveHint: false },
    }, {
      createTask: async (args, extra) => {
        const task = await extra.taskStore.createTask({ ttl, pollInterval });
        start(task.taskId, args, extra.taskStore, extra);
        return { task };
      },
      getTask: (args, extra) => extra.taskStore.getTask(extra.taskId),
      getTaskResult: (args, extra) => extra.taskStore.getTaskResult(extra.taskId),
    });
  const later = (ms, f) => setTimeout(() => Promise.resolve().then(f).catch(() => {}), ms);

  job("ship_parcel", "Ship a parcel for an order; runs as a task.",
    { order_id: z.string(), seconds: z.number().default(1) },
    (id, args, tasks) => later(args.seconds * 1000, () =>
      tasks.storeTaskResult(id, "completed", ship({ parcel: "pc_" + id.slice(0, 8), order_id: args.order_id }))));

  job("ask_parcel", "Ship a parcel for an order in the size a person chooses; runs as a task.",
    { order_id: z.string() },
    (id, args, tasks, extra) => (async () => {
      await tasks.updateTaskStatus(id, "input_required", "Which size?");
      const answer = await extra.sendRequest({
        method: "elicitation/create",
        params: {
          message: "Which size should the parcel's shirt be?",
          requestedSchema: { type: "object", required: ["size"], properties: { size: { type: "string", enum: ["S", "M", "L"] } } },
        },
      }, ElicitResultSchema, { relatedTask: { taskId: id } });
      if (answer.action !== "accept") {
        await tasks.storeTaskResult(id, "completed", {
          isError: true, content: [{ type: "text", text: "nothing shipped: the question was " + answer.action }],
        });
        return;
      }
      const parcel = { parcel: "pc_" + id.slice(0, 8), order_id: args.order_id, size: answer.content.size };
      await tasks.storeTaskResult(id, "completed", ship(parcel));
    })().catch((e) => tasks.updateTaskStatus(id, "failed", String(e)).catch(() => {})));

  job("failing_job", "A job that fails.", {}, (id, args, tasks) => later(300, () =>
    tasks.storeTaskResult(id, "failed", { isError: true, content: [{ type: "text", text: "the warehouse refused the job" }] })));

  job("forgetful_job", "A job whose task the server forgets.", {}, () => {}, 500, 2000);

  job("cancelled_job", "A job cancelled at the server after it began.", {}, (id, args, tasks) => later(300, () =>
    tasks.updateTaskStatus(id, "cancelled", "cancelled at the warehouse")));

  job("stalling_job", "A job whose status the server stops answering.", {}, (id) => later(100, () => stalled.add(id)));
  return { server, taskStore };
}

if (process.argv[2] === "stdio") {
  await newServer().server.connect(new StdioServerTransport());
} else {
  const sessions = new Map();
  const httpServer = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
    const id = req.headers["mcp-session-id"];
    let transport = id && sessions.get(id);
    if (!transport) {
      if (id || req.method !== "POST") {
        res.writeHead(404).end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }));
        return;
      }
      const { server, taskStore } = newServer();
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => sessions.set(sid, transport),
      });
      transport.onclose = () => { sessions.delete(transport.sessionId); taskStore.cleanup(); };
      await server.connect(transport);
    }
    await transport.handleRequest(req, res, body);
  });
  httpServer.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
    console.log("listening on " + httpServer.address().port);
  });
}
