// Retries with real faults: a loopback proxy in front of the real service
// answers 503 with Retry-After, drops connections, stalls, or replaces an
// answer with outcome_unknown after the service did the work.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  OutcomeUnknownError,
  RateLimitedError,
  ShuttingDownError,
  WalletClient,
  WalletTransportError,
} from "../../index.js";
import { ctx } from "../support/context.js";
import { FaultProxy } from "../support/proxy.js";

let proxy;
let direct;

const debits = (req) => req.method === "POST" && req.url === "/v1/debits";

function throughProxy(options = {}) {
  const retries = [];
  const client = new WalletClient({
    baseUrl: proxy.url,
    apiKey: ctx.service.keys.game,
    onRetry: (info) => retries.push(info),
    ...options,
  });
  return { client, retries };
}

async function debitEntries(userId, reference) {
  const found = [];
  for await (const entry of direct.iterateEntries(userId, { limit: 100, maxPages: 50 })) {
    if (entry.kind === "debit" && entry.reference === reference) found.push(entry);
  }
  return found;
}

describe("retries through a faulty proxy", () => {
  before(async () => {
    proxy = await new FaultProxy(ctx.service.url).listen();
    direct = ctx.game;
    await ctx.app.createCredit({ user_id: "retry-player", flow_no: "3000000000000001", product_id: "guodong5000" });
  });

  after(async () => {
    await proxy?.close();
  });

  test("a 503 with Retry-After, then a dropped connection, then the answer: one key, one debit", async () => {
    proxy.reset();
    proxy.inject([{ kind: "503", retryAfter: 1, code: "overloaded" }, { kind: "drop" }], debits);
    const { client, retries } = throughProxy();
    const result = await client.createDebit({ user_id: "retry-player", amount: 11, reason: "through the proxy" });

    assert.equal(result.replayed, false);
    assert.equal(result.debit.amount, 11);
    const attempts = proxy.seen.filter((seen) => seen.method === "POST");
    assert.equal(attempts.length, 3);
    for (const seen of attempts) assert.equal(seen.headers["idempotency-key"], result.idempotencyKey);

    // Retry-After: 1 was honoured (a generous bound: at least 0.9 s between the first two attempts).
    const waited = attempts[1].at - attempts[0].at;
    assert.ok(waited >= 900, `waited only ${waited.toFixed(0)} ms after Retry-After: 1`);
    assert.ok(waited < 10_000, `waited ${waited.toFixed(0)} ms`);

    assert.equal(client.retryCount, 2);
    assert.deepEqual(retries.map((info) => info.reason), ["overloaded", "connection"]);
    assert.ok(retries[0].pause >= 1000);
    // The drop surfaced as undici's "fetch failed" with the socket error as its cause.
    const dropped = retries[1].error;
    assert.ok(dropped instanceof WalletTransportError);
    assert.ok(dropped.cause instanceof TypeError);
    assert.ok(dropped.cause.cause, "the fetch failure carries its cause");
    assert.deepEqual(client.stats.retriesByReason, { overloaded: 1, connection: 1 });

    assert.equal((await debitEntries("retry-player", result.idempotencyKey)).length, 1);
  });

  test("outcome_unknown after the service applied the debit: the retry replays it", async () => {
    proxy.reset();
    proxy.inject([{ kind: "forwardThenOutcomeUnknown" }], debits);
    const { client, retries } = throughProxy();
    const result = await client.createDebit({ user_id: "retry-player", amount: 12 }, { idempotencyKey: "retry-outcome-1" });
    assert.equal(result.replayed, true);
    assert.equal(result.idempotencyKey, "retry-outcome-1");
    assert.deepEqual(retries.map((info) => info.reason), ["outcome_unknown"]);
    assert.ok(retries[0].error instanceof OutcomeUnknownError);
    const attempts = proxy.seen.filter((seen) => seen.method === "POST");
    assert.deepEqual(attempts.map((seen) => seen.headers["idempotency-key"]), ["retry-outcome-1", "retry-outcome-1"]);
    assert.equal((await debitEntries("retry-player", "retry-outcome-1")).length, 1);
  });

  test("a connection kept alive and then cut is retried", async () => {
    proxy.reset();
    const { client, retries } = throughProxy();
    await client.getWallet("retry-player");
    // Let the pool take the connection back; the next request goes out on it, and the proxy cuts it.
    await new Promise((done) => setTimeout(done, 20));
    proxy.inject([{ kind: "drop" }]);
    const wallet = await client.getWallet("retry-player");
    assert.equal(wallet.user_id, "retry-player");
    assert.equal(proxy.seen.length, 3);
    assert.equal(proxy.seen[1].reusedConnection, true);
    assert.deepEqual(retries.map((info) => info.reason), ["connection"]);
  });

  test("an attempt that gets no answer times out and is retried", async () => {
    proxy.reset();
    proxy.inject([{ kind: "hang" }], debits);
    const { client, retries } = throughProxy({ requestTimeout: 300 });
    const started = performance.now();
    const result = await client.createDebit({ user_id: "retry-player", amount: 13 });
    assert.ok(performance.now() - started < 5_000);
    assert.deepEqual(retries.map((info) => info.reason), ["timeout"]);
    assert.equal(result.replayed, false);
    assert.equal((await debitEntries("retry-player", result.idempotencyKey)).length, 1);
  });

  test("not retried: a 503 without Retry-After, a 429 with one", async () => {
    proxy.reset();
    proxy.inject([{ kind: "503", code: "shutting_down" }, { kind: "status", status: 429, code: "rate_limited", retryAfter: 1 }]);
    const { client } = throughProxy();
    await assert.rejects(client.createDebit({ user_id: "retry-player", amount: 1 }), (error) => {
      assert.ok(error instanceof ShuttingDownError);
      assert.equal(error.attempts, 1);
      assert.equal(error.retryAfter, null);
      assert.match(error.idempotencyKey, /^[0-9a-f-]{36}$/);
      return true;
    });
    await assert.rejects(client.getWallet("retry-player"), (error) => {
      assert.ok(error instanceof RateLimitedError);
      assert.equal(error.retryAfter, 1);
      assert.equal(error.attempts, 1);
      return true;
    });
    assert.equal(proxy.seen.length, 2);
    assert.equal(client.retryCount, 0);
  });

  test("maxAttempts bounds a call; the transport error carries the cause and the count", async () => {
    proxy.reset();
    proxy.inject([{ kind: "drop" }, { kind: "drop" }, { kind: "drop" }], debits);
    const { client } = throughProxy({ maxAttempts: 3, backoffInitial: 10, backoffMax: 20 });
    await assert.rejects(client.createDebit({ user_id: "retry-player", amount: 14 }, { idempotencyKey: "retry-bounded-1" }), (error) => {
      assert.ok(error instanceof WalletTransportError);
      assert.equal(error.attempts, 3);
      assert.equal(error.idempotencyKey, "retry-bounded-1");
      assert.ok(error.cause instanceof TypeError);
      return true;
    });
    assert.deepEqual(proxy.seen.map((seen) => seen.headers["idempotency-key"]),
      ["retry-bounded-1", "retry-bounded-1", "retry-bounded-1"]);
    assert.equal(client.retryCount, 2);
    // Nothing reached the service; the same key later applies it once.
    assert.equal((await debitEntries("retry-player", "retry-bounded-1")).length, 0);
    const later = await client.createDebit({ user_id: "retry-player", amount: 14 }, { idempotencyKey: "retry-bounded-1" });
    assert.equal(later.replayed, false);
  });

  test("maxTotalTime caps a long Retry-After pause", async () => {
    proxy.reset();
    proxy.inject([{ kind: "503", retryAfter: 30, code: "wallet_busy" }], debits);
    const { client, retries } = throughProxy({ maxTotalTime: 400 });
    const started = performance.now();
    const result = await client.createDebit({ user_id: "retry-player", amount: 15 });
    const took = performance.now() - started;
    assert.ok(took < 5_000, `took ${took.toFixed(0)} ms`);
    assert.ok(retries[0].pause <= 400);
    assert.equal(result.debit.amount, 15);

    proxy.inject([{ kind: "503", retryAfter: 30, code: "wallet_busy" }, { kind: "503", retryAfter: 30, code: "wallet_busy" }], debits);
    await assert.rejects(client.createDebit({ user_id: "retry-player", amount: 16 }), (error) => {
      assert.equal(error.code, "wallet_busy");
      assert.equal(error.attempts, 2);
      return true;
    });
  });
});
