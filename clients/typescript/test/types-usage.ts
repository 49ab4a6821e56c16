// A strict TypeScript program written against index.d.ts; test.sh compiles it
// with `tsc --noEmit --strict`. It is never run. Each `@ts-expect-error`
// line must be an error, so the declarations are shown to refuse misuse too.
import {
  AmountMismatchError,
  compareWithDocument,
  type CreditRecord,
  type DebitResult,
  type Entry,
  type EventStream,
  InsufficientFundsError,
  HoldNotActiveError,
  IdempotencyKeyReusedError,
  KNOWN_PROBLEM_CODES,
  MANIFEST,
  PROBLEM_CLASSES,
  UnknownProblemError,
  ValidationFailedError,
  VerificationFailedError,
  WalletClient,
  type WalletEvent,
  WalletProblemError,
  WalletTransportError,
} from "../index.js";

async function gameServer(client: WalletClient): Promise<number> {
  const debit: DebitResult = await client.createDebit(
    { user_id: "player-1", amount: 100, reason: "sword", metadata: { level: 3 } },
    { idempotencyKey: "order-1" },
  );
  const key: string = debit.idempotencyKey;
  const replayed: boolean = debit.replayed;
  const left: number = debit.balance.available;
  const reason: string | null = debit.debit.reason;

  const grant = await client.createGrant({ user_id: "player-1", amount: 50, reason: "daily login", expires_in_days: 7 });
  const expires: string | null = grant.grant.expires_at;

  const hold = await client.createHold({ user_id: "player-1", amount: 100, expires_in_seconds: 600 });
  const captured = await client.captureHold(hold.hold.id, { amount: 60 });
  const capturedAmount: number | null | undefined = captured.hold.captured_amount;
  const released = await client.releaseHold(hold.hold.id, { idempotencyKey: "release-1" });
  const status: string = released.hold.status;
  const read = await client.getHold(String(hold.hold.id));

  const wallet = await client.getWallet("player-1", { currency: "coin" });
  const next = wallet.balances[0].next_expiry;
  const expiring: number = next === null ? 0 : next.amount;

  const page = await client.listEntries("player-1", { limit: 10 });
  const cursor: string | null = page.next_cursor;
  const entries: Entry[] = [];
  for await (const entry of client.iterateEntries("player-1", { limit: 100, maxPages: 10 })) entries.push(entry);
  for await (const held of client.iterateHolds("player-1", { status: "active" })) entries.length += held.amount;

  try {
    await client.createDebit({ user_id: "player-1", amount: 1_000_000 });
  } catch (error) {
    if (error instanceof InsufficientFundsError) return error.available + error.balance;
    if (error instanceof IdempotencyKeyReusedError) return error.status;
    if (error instanceof HoldNotActiveError) return error.hold_status.length;
    if (error instanceof ValidationFailedError) return error.errors.map((fault) => fault.field).length;
    if (error instanceof UnknownProblemError) return error.body.status;
    if (error instanceof WalletProblemError) return error.retryAfter ?? error.attempts;
    if (error instanceof WalletTransportError) return error.attempts;
    throw error;
  }
  return key.length + Number(replayed) + left + (reason?.length ?? 0) + (expires?.length ?? 0)
    + (capturedAmount ?? 0) + status.length + read.hold.amount + expiring + (cursor?.length ?? 0) + entries.length;
}

async function appBackend(client: WalletClient): Promise<string> {
  const credit = await client.createCredit({ user_id: "player-1", flow_no: "1000000123456789", product_id: "guodong600" });
  if (credit.replayed) return credit.credit.flow_no;
  try {
    await client.createCredit({ user_id: "player-1", flow_no: "2", product_id: "guodong600", amount: 60000 });
  } catch (error) {
    if (error instanceof AmountMismatchError) return String(error.expected_amount);
    if (error instanceof VerificationFailedError) return error.reason;
  }
  const record: CreditRecord = (await client.getCredit("1000000123456789")).credit;
  const refunded: number | null = record.refunded_amount;
  const tokens = await client.getAccountTokens("player-1");
  const all: CreditRecord[] = [];
  for await (const one of client.iterateCredits("player-1", { limit: 50 })) all.push(one);
  return `${refunded}${tokens.google_obfuscated_account_id}${tokens.apple_app_account_token ?? ""}${all.length}`;
}

async function feedReader(client: WalletClient): Promise<number> {
  const stream: EventStream = client.iterateEvents({ after: 0, limit: 500, type: "credit.refunded" });
  let total = 0;
  for await (const event of stream) {
    const typed: WalletEvent = event;
    total += typed.amount + (typed.entry_id ?? 0);
  }
  const resumeFrom: number = stream.after;
  const page = await client.listEvents({ after: resumeFrom, user_id: "player-1" });
  return total + page.next_after;
}

async function operations(): Promise<void> {
  const anonymous = new WalletClient({ baseUrl: "http://127.0.0.1:8080" });
  const health = await anonymous.getHealth();
  const ready = await anonymous.getReadiness();
  const document = await anonymous.getOpenAPIDocument();
  const comparison = compareWithDocument(document);
  const missing: string[] = [...comparison.missingOperations, ...comparison.missingProblemCodes];
  const known: readonly string[] = KNOWN_PROBLEM_CODES;
  const excluded: string | undefined = MANIFEST.operations.excluded.getMetrics;
  const made = new PROBLEM_CLASSES.insufficient_funds(409, {
    type: "urn:problem:insufficient_funds", title: "t", status: 409, detail: "d", code: "insufficient_funds", instance: "i",
  });
  void [health.status, ready.status, missing, known, excluded, made.code];
}

const client = new WalletClient({
  baseUrl: "http://127.0.0.1:8080",
  apiKey: "wk_example",
  maxAttempts: 8,
  maxTotalTime: 30_000,
  requestTimeout: 10_000,
  onRetry: (info) => console.log(info.operation, info.attempt, info.reason, info.pause, info.error.message),
});
const retries: number = client.retryCount + client.stats.retriesByReason.connection;
void [gameServer(client), appBackend(client), feedReader(client), operations(), retries];

// Misuse the declarations refuse:
// @ts-expect-error user_id is required
void client.createDebit({ amount: 1 });
// @ts-expect-error amounts are numbers
void client.createDebit({ user_id: "p", amount: "5" });
// @ts-expect-error a grant needs a reason
void client.createGrant({ user_id: "p", amount: 5 });
// @ts-expect-error not a hold status the list takes
void client.listHolds("p", { status: "held" });
// @ts-expect-error not an event type
void client.listEvents({ type: "credit.made" });
// @ts-expect-error the client has no metrics method
void client.getMetrics();
// @ts-expect-error the key option is a string
void client.createHold({ user_id: "p", amount: 1 }, { idempotencyKey: 5 });
// @ts-expect-error baseUrl is required
void new WalletClient({ apiKey: "wk_example" });
