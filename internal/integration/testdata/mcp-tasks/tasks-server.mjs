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

function newServer() {
  const taskStore = new InMemoryTaskStore();
  const server = new McpServer({ name: "oncerun-test-tasks", version: "1.0.0" }, {
    capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
    taskStore,
    taskMessageQueue: new InMemoryTaskMessageQueue(),
  });
  const additive = { readOnlyHint: false, destructiveHint: false };
  const read = (args, extra) => extra.taskStore.getTask(extra.taskId);
  const result = (args, extra) => extra.taskStore.getTaskResult(extra.taskId);

  server.experimental.tasks.registerToolTask("ship_parcel", {
    description: "Ship a parcel for an order; runs as a task.",
    inputSchema: { order_id: z.string(), seconds: z.number().default(1) },
    execution: { taskSupport: "required" },
    annotations: additive,
  }, {
    createTask: async (args, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
      setTimeout(() => {
        const parcel = { parcel: "pc_" + task.taskId.slice(0, 8), order_id: args.order_id };
        extra.taskStore.storeTaskResult(task.taskId, "completed", ship(parcel)).catch(() => {});
      }, args.seconds * 1000);
      return { task };
    },
    getTask: read,
    getTaskResult: result,
  });

  server.experimental.tasks.registerToolTask("ask_parcel", {
    description: "Ship a parcel for an order in the size a person chooses; runs as a task.",
    inputSchema: { order_id: z.string() },
    execution: { taskSupport: "required" },
    annotations: additive,
  }, {
    createTask: async (args, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
      (async () => {
        await extra.taskStore.updateTaskStatus(task.taskId, "input_required", "Which size?");
        const answer = await extra.sendRequest({
          method: "elicitation/create",
          params: {
            message: "Which size should the parcel's shirt be?",
            requestedSchema: { type: "object", required: ["size"], properties: { size: { type: "string", enum: ["S", "M", "L"] } } },
          },
        }, ElicitResultSchema, { relatedTask: { taskId: task.taskId } });
        if (answer.action !== "accept") {
          await extra.taskStore.storeTaskResult(task.taskId, "completed", {
            isError: true, content: [{ type: "text", text: "nothing shipped: the question was " + answer.action }],
          });
          return;
        }
        const parcel = { parcel: "pc_" + task.taskId.slice(0, 8), order_id: args.order_id, size: answer.content.size };
        await extra.taskStore.storeTaskResult(task.taskId, "completed", ship(parcel));
      })().catch((e) => extra.taskStore.updateTaskStatus(task.taskId, "failed", String(e)).catch(() => {}));
      return { task };
    },
    getTask: read,
    getTaskResult: result,
  });

  server.experimental.tasks.registerToolTask("failing_job", {
    description: "A job that fails.",
    inputSchema: {},
    execution: { taskSupport: "required" },
    annotations: additive,
  }, {
    createTask: async (args, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 600000, pollInterval: 200 });
      setTimeout(() => {
        extra.taskStore.storeTaskResult(task.taskId, "failed", {
          isError: true, content: [{ type: "text", text: "the warehouse refused the job" }],
        }).catch(() => {});
      }, 300);
      return { task };
    },
    getTask: read,
    getTaskResult: result,
  });

  server.experimental.tasks.registerToolTask("forgetful_job", {
    description: "A job whose task the server forgets.",
    inputSchema: {},
    execution: { taskSupport: "required" },
    annotations: additive,
  }, {
    createTask: async (args, extra) => ({ task: await extra.taskStore.createTask({ ttl: 500, pollInterval: 2000 }) }),
    getTask: read,
    getTaskResult: result,
  });
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
