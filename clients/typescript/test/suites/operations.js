// Every operation of the client through the real service.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  AmountExceedsHoldError,
  AmountMismatchError,
  FlowNoConflictError,
  ForbiddenError,
  GrantLimitExceededError,
  HoldNotActiveError,
  IdempotencyKeyReusedError,
  InsufficientFundsError,
  NotFoundError,
  UnauthorizedError,
  UnknownCurrencyError,
  UnknownProductError,
  ValidationFailedError,
  VerificationFailedError,
  WalletClient,
  WalletProblemError,
} from "../../index.js";
import { ctx } from "../support/context.js";

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

// ctx.app: the app backend (credit, read); ctx.game: the game server (debit,
// grant, read); ctx.feed: the events reader (events, read).

describe("operations endpoints", () => {
  test("health, readiness and the API document", async () => {
    const anonymous = new WalletClient({ baseUrl: ctx.service.url });
    assert.equal((await anonymous.getHealth()).status, "ok");
    assert.equal((await anonymous.getReadiness()).status, "ready");
    const document = await anonymous.getOpenAPIDocument();
    assert.match(document.openapi, /^3\.1/);
    assert.ok(document.paths["/v1/debits"]);
  });
});

describe("credits", () => {
  test("a credit, then its replay", async () => {
    const first = await ctx.app.createCredit({ user_id: "alice", flow_no: "1000000000000001", product_id: "guodong600" });
    assert.equal(first.replayed, false);
    assert.equal(first.credit.amount, 600);
    assert.equal(first.credit.quantity, 1);
    assert.equal(first.credit.status, "credited");
    assert.equal(first.balance.balance, 600);
    assert.ok(first.requestId);

    const again = await ctx.app.createCredit({ user_id: "alice", flow_no: "1000000000000001", product_id: "guodong600" });
    assert.equal(again.replayed, true);
    assert.deepEqual(again.credit, first.credit);
    assert.equal(again.balance.balance, 600);
  });

  test("a credit with a quantity and a matching amount", async () => {
    const made = await ctx.app.createCredit({
      user_id: "alice", flow_no: "1000000000000002", product_id: "guodong1200", quantity: 2, amount: 2400,
    });
    assert.equal(made.credit.amount, 2400);
    assert.equal(made.balance.balance, 3000);
  });

  test("amount_mismatch, caught by name", async () => {
    await assert.rejects(
      ctx.app.createCredit({ user_id: "alice", flow_no: "1000000000000003", product_id: "guodong600", amount: 60000 }),
      (error) => {
        assert.ok(error instanceof AmountMismatchError);
        assert.ok(error instanceof WalletProblemError);
        assert.equal(error.status, 422);
        assert.equal(error.code, "amount_mismatch");
        assert.equal(error.expected_amount, 600);
        assert.equal(error.body.expected_amount, 600);
        assert.equal(error.attempts, 1);
        return true;
      });
  });

  test("verification_failed for a signed transaction this service cannot accept", async () => {
    await assert.rejects(
      ctx.app.createCredit({
        user_id: "alice", flow_no: "1000000000000004", product_id: "guodong600",
        signed_transaction: "eyJhbGciOiJub25lIn0.eyJ0cmFuc2FjdGlvbklkIjoiMSJ9.c2ln",
      }),
      (error) => {
        assert.ok(error instanceof VerificationFailedError);
        assert.equal(typeof error.reason, "string");
        assert.ok(error.reason.length > 0);
        return true;
      });
  });

  test("flow_no_conflict, caught by name", async () => {
    await assert.rejects(
      ctx.app.createCredit({ user_id: "bob", flow_no: "1000000000000001", product_id: "guodong600" }),
      FlowNoConflictError);
  });

  test("unknown_product", async () => {
    await assert.rejects(
      ctx.app.createCredit({ user_id: "alice", flow_no: "1000000000000005", product_id: "no-such-product" }),
      UnknownProductError);
  });

  test("one credit, as it is now", async () => {
    const { credit } = await ctx.app.getCredit("1000000000000001");
    assert.equal(credit.flow_no, "1000000000000001");
    assert.equal(credit.user_id, "alice");
    assert.equal(credit.source, "caller");
    assert.equal(credit.refunded_amount, null);
    assert.deepEqual(credit.lines, []);
    assert.ok("environment" in credit);
    await assert.rejects(ctx.app.getCredit("9999999999"), NotFoundError);
  });

  test("a player's credits, page by page", async () => {
    for (let i = 0; i < 3; i++) {
      await ctx.app.createCredit({ user_id: "carol", flow_no: `2000000000000${i}`, product_id: "guodong600" });
    }
    const firstPage = await ctx.app.listCredits("carol", { limit: 2 });
    assert.equal(firstPage.credits.length, 2);
    assert.equal(typeof firstPage.next_cursor, "string");
    const all = [];
    for await (const credit of ctx.app.iterateCredits("carol", { limit: 1 })) all.push(credit.flow_no);
    assert.deepEqual(all, ["20000000000002", "20000000000001", "20000000000000"]);
  });

  test("account tokens", async () => {
    const tokens = await ctx.app.getAccountTokens("alice");
    assert.equal(tokens.user_id, "alice");
    assert.equal(tokens.google_obfuscated_account_id, createHash("sha256").update("alice").digest("hex"));
    assert.ok(tokens.apple_app_account_token === null || typeof tokens.apple_app_account_token === "string");
  });
});

describe("debits", () => {
  test("a debit with a key, and its replay", async () => {
    const first = await ctx.game.createDebit({ user_id: "alice", amount: 100, reason: "sword" }, { idempotencyKey: "order-1" });
    assert.equal(first.idempotencyKey, "order-1");
    assert.equal(first.replayed, false);
    assert.equal(first.debit.amount, 100);
    assert.equal(first.debit.reason, "sword");
    assert.equal(first.balance.balance, 2900);

    const again = await ctx.game.createDebit({ user_id: "alice", amount: 100, reason: "sword" }, { idempotencyKey: "order-1" });
    assert.equal(again.replayed, true);
    assert.deepEqual(again.debit, first.debit);
    assert.deepEqual(again.balance, first.balance);
  });

  test("a debit without a key gets a UUID v4 of its own", async () => {
    const made = await ctx.game.createDebit({ user_id: "alice", amount: 50, metadata: { item: "shield", level: 3 } });
    assert.match(made.idempotencyKey, UUID_V4);
    assert.equal(made.replayed, false);
    assert.equal(made.balance.balance, 2850);
    const other = await ctx.game.createDebit({ user_id: "alice", amount: 50 });
    assert.notEqual(other.idempotencyKey, made.idempotencyKey);
    assert.equal(other.balance.balance, 2800);
  });

  test("insufficient_funds, caught by name, and replayed under its key", async () => {
    const attempt = () => ctx.game.createDebit({ user_id: "alice", amount: 1_000_000 }, { idempotencyKey: "too-much-1" });
    let first;
    await assert.rejects(attempt(), (error) => {
      assert.ok(error instanceof InsufficientFundsError);
      assert.equal(error.status, 409);
      assert.equal(error.balance, 2800);
      assert.equal(error.available, 2800);
      assert.equal(error.replayed, false);
      first = error;
      return true;
    });
    await assert.rejects(attempt(), (error) => {
      assert.ok(error instanceof InsufficientFundsError);
      assert.equal(error.replayed, true);
      assert.equal(error.instance, first.instance);
      return true;
    });
  });

  test("idempotency_key_reused, caught by name", async () => {
    await assert.rejects(
      ctx.game.createDebit({ user_id: "alice", amount: 101, reason: "sword" }, { idempotencyKey: "order-1" }),
      IdempotencyKeyReusedError);
  });

  test("validation_failed names the fields", async () => {
    await assert.rejects(ctx.game.createDebit({ user_id: "alice", amount: 0 }), (error) => {
      assert.ok(error instanceof ValidationFailedError);
      assert.ok(Array.isArray(error.errors));
      assert.ok(error.errors.some((fault) => fault.field === "amount"));
      return true;
    });
  });

  test("unknown_currency", async () => {
    await assert.rejects(ctx.game.createDebit({ user_id: "alice", amount: 1, currency: "gems" }), UnknownCurrencyError);
    await assert.rejects(ctx.game.getWallet("alice", { currency: "gems" }), UnknownCurrencyError);
  });

  test("a key without the scope, and no key at all", async () => {
    await assert.rejects(ctx.app.createDebit({ user_id: "alice", amount: 1 }), ForbiddenError);
    const stranger = new WalletClient({ baseUrl: ctx.service.url, apiKey: "wk_not-a-key" });
    await assert.rejects(stranger.getWallet("alice"), UnauthorizedError);
  });

  test("ids that a URL cannot carry are refused before sending", async () => {
    await assert.rejects(ctx.game.getWallet(".."), RangeError);
    await assert.rejects(ctx.game.getWallet(""), RangeError);
  });

  test("a key no header can carry fails at once, without retries", async () => {
    const before = ctx.game.retryCount;
    await assert.rejects(ctx.game.createDebit({ user_id: "alice", amount: 1 }, { idempotencyKey: "line\nbreak" }), TypeError);
    assert.equal(ctx.game.retryCount, before);
  });
});

describe("grants", () => {
  test("a reward that expires, and its replay", async () => {
    const first = await ctx.game.createGrant(
      { user_id: "alice", amount: 50, reason: "daily login", expires_in_days: 7 },
      { idempotencyKey: "login-2026-12-07-alice" });
    assert.equal(first.grant.amount, 50);
    assert.equal(first.grant.reason, "daily login");
    assert.equal(typeof first.grant.expires_at, "string");
    assert.equal(first.balance.balance, 2850);
    const again = await ctx.game.createGrant(
      { user_id: "alice", amount: 50, reason: "daily login", expires_in_days: 7 },
      { idempotencyKey: "login-2026-12-07-alice" });
    assert.equal(again.replayed, true);
    assert.deepEqual(again.grant, first.grant);
  });

  test("grant_limit_exceeded", async () => {
    await assert.rejects(ctx.game.createGrant({ user_id: "alice", amount: 1_000_001, reason: "too generous" }), (error) => {
      assert.ok(error instanceof GrantLimitExceededError);
      assert.equal(typeof error.max_amount, "number");
      return true;
    });
  });

  test("the balance shows paid, free and what expires next", async () => {
    const wallet = await ctx.game.getWallet("alice");
    assert.equal(wallet.user_id, "alice");
    const coin = wallet.balances.find((balance) => balance.currency === "coin");
    assert.ok(coin);
    assert.equal(coin.balance, 2850);
    assert.equal(coin.paid + coin.free - coin.debt, coin.balance);
    assert.equal(coin.free, 50);
    assert.ok(coin.next_expiry);
    assert.equal(coin.next_expiry.amount, 50);
    const only = await ctx.game.getWallet("alice", { currency: "coin" });
    assert.equal(only.balances.length, 1);
    const stranger = await ctx.game.getWallet("never-seen");
    assert.equal(stranger.balances[0].balance, 0);
  });
});

describe("holds", () => {
  let captured;
  let released;

  test("placed, read, captured in part, and not captured twice", async () => {
    const placed = await ctx.game.createHold({ user_id: "alice", amount: 100, reason: "match 77 entry", expires_in_seconds: 600 });
    assert.match(placed.idempotencyKey, UUID_V4);
    assert.equal(placed.hold.status, "held");
    assert.equal(placed.balance.held, 100);
    assert.equal(placed.balance.available, placed.balance.balance - 100);
    captured = placed.hold.id;

    const read = await ctx.game.getHold(captured);
    assert.equal(read.hold.id, captured);
    assert.equal(read.hold.status, "held");

    const capture = await ctx.game.captureHold(captured, { amount: 60 }, { idempotencyKey: "match-77-start" });
    assert.equal(capture.hold.status, "captured");
    assert.equal(capture.hold.captured_amount, 60);
    assert.equal(capture.debit.amount, 60);
    assert.equal(capture.balance.held, 0);
    assert.equal(capture.balance.balance, placed.balance.balance - 60);

    const replay = await ctx.game.captureHold(captured, { amount: 60 }, { idempotencyKey: "match-77-start" });
    assert.equal(replay.replayed, true);
    assert.deepEqual(replay.debit, capture.debit);

    await assert.rejects(ctx.game.captureHold(captured), (error) => {
      assert.ok(error instanceof HoldNotActiveError);
      assert.equal(error.hold_status, "captured");
      return true;
    });
  });

  test("released, and a capture of more than the hold", async () => {
    const placed = await ctx.game.createHold({ user_id: "alice", amount: 30 });
    const release = await ctx.game.releaseHold(placed.hold.id);
    assert.equal(release.hold.status, "released");
    assert.equal(release.balance.held, 0);
    released = placed.hold.id;

    const other = await ctx.game.createHold({ user_id: "alice", amount: 20 }, { idempotencyKey: "hold-20" });
    await assert.rejects(ctx.game.captureHold(other.hold.id, { amount: 21 }), (error) => {
      assert.ok(error instanceof AmountExceedsHoldError);
      assert.equal(error.held_amount, 20);
      return true;
    });
    const whole = await ctx.game.captureHold(other.hold.id);
    assert.equal(whole.debit.amount, 20);

    await assert.rejects(ctx.game.releaseHold(released), HoldNotActiveError);
    await assert.rejects(ctx.game.getHold(999999), NotFoundError);
  });

  test("listed by status, and every page walked", async () => {
    const active = await ctx.game.createHold({ user_id: "alice", amount: 5 });
    const onlyActive = await ctx.game.listHolds("alice", { status: "active" });
    assert.deepEqual(onlyActive.holds.map((hold) => hold.id), [active.hold.id]);
    const capturedOnes = await ctx.game.listHolds("alice", { status: "captured" });
    assert.ok(capturedOnes.holds.some((hold) => hold.id === captured));

    const ids = [];
    for await (const hold of ctx.game.iterateHolds("alice", { limit: 1 })) ids.push(hold.id);
    assert.equal(ids.length, 4);
    assert.ok(ids.includes(released));
    assert.deepEqual([...ids].sort((a, b) => b - a), ids);
    await ctx.game.releaseHold(active.hold.id);
  });
});

describe("history and the events feed", () => {
  test("entries, newest first, over several pages", async () => {
    const whole = await ctx.game.listEntries("alice", { limit: 500 });
    assert.equal(whole.next_cursor, null);
    assert.ok(whole.entries.length >= 8);
    const walked = [];
    for await (const entry of ctx.game.iterateEntries("alice", { limit: 3 })) walked.push(entry);
    assert.deepEqual(walked, whole.entries);
    assert.equal(walked[0].balance_after, (await ctx.game.getWallet("alice")).balances[0].balance);
    const kinds = new Set(walked.map((entry) => entry.kind));
    for (const kind of ["credit", "debit", "grant"]) assert.ok(kinds.has(kind), kind);
    const bounded = [];
    for await (const entry of ctx.game.iterateEntries("alice", { limit: 2, maxPages: 2 })) bounded.push(entry);
    assert.equal(bounded.length, 4);
  });

  test("the feed through the paging helper adds up to every balance", async () => {
    const stream = ctx.feed.iterateEvents({ limit: 4 });
    const events = [];
    for await (const event of stream) events.push(event);
    assert.ok(events.length > 10);
    for (let i = 1; i < events.length; i++) assert.ok(events[i].id > events[i - 1].id);
    assert.ok(stream.after >= events[events.length - 1].id);
    const types = new Set(events.map((event) => event.type));
    for (const type of ["credit.created", "debit.created", "grant.created", "hold.placed", "hold.captured", "hold.released"]) {
      assert.ok(types.has(type), type);
    }
    for (const user of ["alice", "carol"]) {
      const sum = events.filter((event) => event.user_id === user && event.currency === "coin")
        .reduce((total, event) => total + event.amount, 0);
      const wallet = await ctx.game.getWallet(user);
      assert.equal(sum, wallet.balances[0].balance, user);
    }

    // Caught up: nothing more until something changes, then only that.
    const idle = [];
    for await (const event of ctx.feed.iterateEvents({ after: stream.after })) idle.push(event);
    assert.deepEqual(idle, []);
    const debit = await ctx.game.createDebit({ user_id: "carol", amount: 7 });
    const fresh = [];
    for await (const event of ctx.feed.iterateEvents({ after: stream.after, user_id: "carol" })) fresh.push(event);
    assert.equal(fresh.length, 1);
    assert.equal(fresh[0].type, "debit.created");
    assert.equal(fresh[0].amount, -7);
    assert.equal(fresh[0].data.reference, debit.idempotencyKey);
  });

  test("a page of the feed filtered by type", async () => {
    const page = await ctx.feed.listEvents({ after: 0, limit: 1000, type: "credit.created" });
    assert.ok(page.events.length >= 5);
    assert.ok(page.events.every((event) => event.type === "credit.created"));
    assert.equal(typeof page.next_after, "number");
  });
});
