// A small HTTP proxy on loopback in front of the real service. It forwards
// every request unless a fault is queued for it: a 503 with Retry-After, a
// dropped connection, a request left unanswered, or an answer replaced by
// `outcome_unknown` after the service did the work. It records what arrived.
import { createServer, request as httpRequest } from "node:http";

const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "te", "trailer"]);

function problemBody(status, code, detail) {
  return JSON.stringify({ type: `urn:problem:${code}`, title: code, status, detail, code, instance: "proxy" });
}

export class FaultProxy {
  constructor(targetUrl) {
    this.target = new URL(targetUrl);
    /** Every request that arrived: method, path, headers, when, and whether its connection was reused. */
    this.seen = [];
    this.faults = [];
    this.sockets = new Set();
    this.server = createServer((req, res) => this.#handle(req, res));
    this.server.keepAliveTimeout = 30_000;
    this.server.on("connection", (socket) => {
      socket.requests = 0;
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
  }

  async listen() {
    await new Promise((done) => this.server.listen(0, "127.0.0.1", done));
    this.url = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  /** Queues faults for the next matching requests, in order; `match(req)` picks which requests count. */
  inject(faults, match = () => true) {
    for (const fault of faults) this.faults.push({ fault, match });
  }

  reset() {
    this.seen = [];
    this.faults = [];
  }

  async close() {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((done) => this.server.close(() => done()));
  }

  #handle(req, res) {
    const chunks = [];
    req.on("data", (chunk) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      req.socket.requests++;
      this.seen.push({
        method: req.method,
        path: req.url,
        headers: { ...req.headers },
        at: performance.now(),
        reusedConnection: req.socket.requests > 1,
      });
      const index = this.faults.findIndex((entry) => entry.match(req));
      const fault = index >= 0 ? this.faults.splice(index, 1)[0].fault : { kind: "forward" };
      switch (fault.kind) {
        case "503":
          res.writeHead(503, {
            "Content-Type": "application/problem+json",
            ...(fault.retryAfter === undefined ? {} : { "Retry-After": String(fault.retryAfter) }),
          });
          res.end(problemBody(503, fault.code ?? "overloaded", "injected by the test proxy"));
          return;
        case "status":
          res.writeHead(fault.status, {
            "Content-Type": "application/problem+json",
            ...(fault.retryAfter === undefined ? {} : { "Retry-After": String(fault.retryAfter) }),
          });
          res.end(problemBody(fault.status, fault.code, "injected by the test proxy"));
          return;
        case "drop":
          // The connection closes with no answer at all.
          req.socket.destroy();
          return;
        case "hang":
          // No answer until the client gives up (or the proxy closes).
          return;
        case "forwardThenOutcomeUnknown":
          this.#forward(req, body, (status, headers, answer) => {
            res.writeHead(503, { "Content-Type": "application/problem+json", ...(fault.retryAfter === undefined ? {} : { "Retry-After": String(fault.retryAfter) }) });
            res.end(problemBody(503, "outcome_unknown", `the service answered ${status}; the proxy says the outcome is unknown`));
          }, res);
          return;
        default:
          this.#forward(req, body, (status, headers, answer) => {
            res.writeHead(status, headers);
            res.end(answer);
          }, res);
      }
    });
  }

  #forward(req, body, reply, res) {
    const headers = {};
    for (const [name, value] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(name)) headers[name] = value;
    headers.host = this.target.host;
    const upstream = httpRequest({
      host: this.target.hostname,
      port: this.target.port,
      method: req.method,
      path: req.url,
      headers: { ...headers, "content-length": String(body.length) },
    }, (answer) => {
      const chunks = [];
      answer.on("data", (chunk) => chunks.push(chunk));
      answer.on("end", () => {
        const out = {};
        for (const [name, value] of Object.entries(answer.headers)) if (!HOP_BY_HOP.has(name)) out[name] = value;
        reply(answer.statusCode, out, Buffer.concat(chunks));
      });
    });
    upstream.setTimeout(10_000, () => upstream.destroy(new Error("upstream timed out")));
    upstream.on("error", () => res.socket?.destroy());
    upstream.end(body);
  }
}
