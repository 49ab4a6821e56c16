// Type declarations for the wallet service's client. Member names are the
// API document's own (snake_case); amounts and ids are JSON integers, read
// as numbers (exact up to 2^53, far above the service's 10^12 amount limit).

// ---------------------------------------------------------------------------
// Values the service returns

/** RFC 3339 UTC with microseconds, e.g. `2026-12-02T12:45:46.195317Z`. */
export type Timestamp = string;

/** A wallet's balance in one currency. */
export interface Balance {
  user_id: string;
  currency: string;
  balance: number;
  held: number;
  /** `balance` - `held`: what debits and new holds may take. */
  available: number;
}

export type CreditStatus = "credited" | "partially_refunded" | "refunded";

/** The credit of one store transaction. */
export interface Credit {
  flow_no: string;
  user_id: string;
  product_id: string;
  quantity: number;
  currency: string;
  /** Catalog amount x quantity at the time of the credit. */
  amount: number;
  status: CreditStatus | (string & {});
  entry_id: number;
  created_at: Timestamp;
}

export type CreditSource =
  | "caller"
  | "appstore-jws"
  | "appstore-receipt"
  | "appstore-api"
  | "appstore-notification"
  | "googleplay";

/** One of the product's other lines a credit got: coins of another currency. */
export interface CreditLine {
  currency: string;
  amount: number;
  /** What refunds took back of this line so far. */
  refunded_amount: number;
}

/** A credit as it is now, with how it was verified. */
export interface CreditRecord extends Credit {
  source: CreditSource | (string & {});
  environment: string | null;
  refunded_amount: number | null;
  /** The product's other lines this credit got, in currency order; empty for a one-currency product. */
  lines: CreditLine[];
}

export interface CreditResponse {
  credit: Credit;
  balance: Balance;
}

export interface CreditLookupResponse {
  credit: CreditRecord;
}

export interface CreditsPage {
  credits: CreditRecord[];
  next_cursor: string | null;
}

export interface Debit {
  id: number;
  user_id: string;
  currency: string;
  amount: number;
  reason: string | null;
  entry_id: number;
  created_at: Timestamp;
}

export interface DebitResponse {
  debit: Debit;
  balance: Balance;
}

export interface Grant {
  id: number;
  user_id: string;
  currency: string;
  amount: number;
  reason: string;
  expires_at: Timestamp | null;
  entry_id: number;
  created_at: Timestamp;
}

export interface GrantResponse {
  grant: Grant;
  balance: Balance;
}

export interface NextExpiry {
  amount: number;
  at: Timestamp;
}

export interface WalletBalance {
  currency: string;
  /** `paid` + `free` - `debt`. */
  balance: number;
  held: number;
  available: number;
  paid: number;
  free: number;
  debt: number;
  next_expiry: NextExpiry | null;
}

export interface Wallet {
  user_id: string;
  /** Sorted by currency; always includes `coin`. */
  balances: WalletBalance[];
}

export type EntryKind =
  | "credit"
  | "debit"
  | "refund"
  | "refund_reversal"
  | "grant"
  | "revoke"
  | "expire"
  | "bonus";

export interface Entry {
  id: number;
  currency: string;
  /** Signed: negative for what the entry took. */
  amount: number;
  balance_after: number;
  kind: EntryKind | (string & {});
  /** The flowNO of a credit, the Idempotency-Key of a debit, `hold:<id>` of a capture. */
  reference: string;
  created_at: Timestamp;
}

export interface EntriesPage {
  entries: Entry[];
  next_cursor: string | null;
}

export type HoldStatus = "held" | "captured" | "released" | "expired";

export interface Hold {
  id: number;
  user_id: string;
  currency: string;
  amount: number;
  status: HoldStatus | (string & {});
  expires_at: Timestamp;
  created_at: Timestamp;
  reason?: string | null;
  metadata?: Record<string, unknown> | null;
  captured_amount?: number | null;
  captured_at?: Timestamp | null;
  released_at?: Timestamp | null;
  expired_at?: Timestamp | null;
}

export interface HoldsPage {
  holds: Hold[];
  next_cursor: string | null;
}

export interface HoldResponse {
  hold: Hold;
  balance: Balance;
}

export interface HoldReleaseResponse {
  hold: Hold;
  balance: Balance;
}

/** The debit a capture made. */
export interface CaptureDebit {
  id: number;
  entry_id: number;
  user_id: string;
  currency: string;
  amount: number;
  reason?: string | null;
  created_at: Timestamp;
}

export interface HoldActionResponse {
  hold: Hold;
  debit: CaptureDebit;
  balance: Balance;
}

export interface HoldLookupResponse {
  hold: Hold;
}

export interface AccountTokens {
  user_id: string;
  /** Null while the service has no account token namespace configured. */
  apple_app_account_token: string | null;
  google_obfuscated_account_id: string;
}

export type EventType =
  | "credit.created"
  | "credit.refunded"
  | "credit.refund_reversed"
  | "debit.created"
  | "hold.placed"
  | "hold.captured"
  | "hold.released"
  | "hold.expired"
  | "grant.created"
  | "revoke.created"
  | "balance.negative"
  | "coins.expired"
  | "bonus.created";

/** One change to one wallet (named so as not to clash with the DOM's Event). */
export interface WalletEvent {
  /** The cursor: strictly increasing. */
  id: number;
  type: EventType | (string & {});
  user_id: string;
  currency: string;
  /** What the change added to the balance (negative when it took). */
  amount: number;
  balance_after: number;
  held: number;
  available: number;
  entry_id: number | null;
  hold_id: number | null;
  flow_no: string | null;
  created_at: Timestamp;
  /** Always `client` and `reference`; more by type. */
  data: { client?: string; reference?: string; [member: string]: unknown };
}

export interface EventsPage {
  events: WalletEvent[];
  /** The `after` for the next page. */
  next_after: number;
}

export interface HealthStatus {
  status: "ok" | (string & {});
}

export interface ReadyStatus {
  status: "ready" | (string & {});
}

/** The OpenAPI 3.1 document the service serves. */
export interface OpenAPIDocument {
  openapi: string;
  paths: Record<string, Record<string, unknown>>;
  components?: { schemas?: Record<string, unknown>; [member: string]: unknown };
  [member: string]: unknown;
}

// ---------------------------------------------------------------------------
// Results that say how the answer came

/** What every idempotent write's result adds to the body. */
export interface IdempotentResult {
  /** The Idempotency-Key sent on every attempt of the call: the caller's, or a generated UUID v4. */
  idempotencyKey: string;
  /** True when the answer was a stored one, replayed (`Idempotent-Replayed: true`). */
  replayed: boolean;
  /** The answer's `X-Request-Id`. */
  requestId: string | null;
}

export type DebitResult = DebitResponse & IdempotentResult;
export type GrantResult = GrantResponse & IdempotentResult;
export type HoldResult = HoldResponse & IdempotentResult;
export type CaptureResult = HoldActionResponse & IdempotentResult;
export type ReleaseResult = HoldReleaseResponse & IdempotentResult;

/** A credit's result: `replayed` when the flowNO was already credited the same way (200). */
export type CreditResult = CreditResponse & {
  replayed: boolean;
  requestId: string | null;
};

// ---------------------------------------------------------------------------
// Requests

export interface CreditRequest {
  user_id: string;
  /** Required except with `google_purchase_token`. */
  flow_no?: string;
  product_id: string;
  /** 1-10; 1 when absent. */
  quantity?: number | null;
  /** Only checked against catalog amount x quantity (`amount_mismatch`). */
  amount?: number | null;
  /** StoreKit 2 JWSTransaction, compact JWS. */
  signed_transaction?: string | null;
  /** StoreKit 1 base64 app receipt. */
  receipt_data?: string | null;
  /** Google Play purchase token of a one-time product. */
  google_purchase_token?: string | null;
}

export interface DebitRequest {
  user_id: string;
  amount: number;
  /** `coin` when absent. */
  currency?: string | null;
  reason?: string | null;
  metadata?: Record<string, unknown> | null;
}

export interface GrantRequest {
  user_id: string;
  amount: number;
  reason: string;
  currency?: string | null;
  /** 1-3650; never expires when absent. */
  expires_in_days?: number | null;
}

export interface HoldRequest {
  user_id: string;
  amount: number;
  currency?: string | null;
  reason?: string | null;
  metadata?: Record<string, unknown> | null;
  /** 1-86400; 300 when absent. */
  expires_in_seconds?: number | null;
}

export interface CaptureRequest {
  /** All of the hold when absent. */
  amount?: number | null;
}

export interface WalletQuery {
  currency?: string;
}

export interface EntriesQuery {
  currency?: string;
  /** 1-500 (50). */
  limit?: number;
  cursor?: string;
}

export type HoldListStatus = "active" | "captured" | "released" | "expired";

export interface HoldsQuery {
  status?: HoldListStatus;
  limit?: number;
  cursor?: string;
}

export interface CreditsQuery {
  limit?: number;
  cursor?: string;
}

export interface EventsQuery {
  /** Events with ids above this one (0, the default: the oldest kept). */
  after?: number;
  /** 1-1000 (100). */
  limit?: number;
  user_id?: string;
  type?: EventType;
}

/** Paging helpers stop after this many pages (unbounded when absent). */
export interface PagingBound {
  maxPages?: number;
}

/** Per-call options; the bounds override the client's for this call. */
export interface CallOptions {
  signal?: AbortSignal;
  /** Sent as `X-Request-Id`. */
  requestId?: string;
  maxAttempts?: number;
  /** Milliseconds. */
  maxTotalTime?: number;
  /** Milliseconds. */
  requestTimeout?: number;
}

export interface IdempotentCallOptions extends CallOptions {
  /** 1-255 printable ASCII. A UUID v4 is generated for the call when absent. */
  idempotencyKey?: string;
}

// ---------------------------------------------------------------------------
// The client

export type RetryReason = "outcome_unknown" | "connection" | "timeout" | (string & {});

export interface RetryInfo {
  operation: OperationId;
  /** The attempt that failed (1 for the first). */
  attempt: number;
  reason: RetryReason;
  /** Milliseconds waited before the next attempt. */
  pause: number;
  error: WalletError;
  idempotencyKey: string | null;
}

export interface WalletClientOptions {
  /** E.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** `wk_...`; omit for the operations endpoints only. */
  apiKey?: string | null;
  /** Attempts per call, the first included (8). */
  maxAttempts?: number;
  /** Milliseconds one call may spend retrying (30000). */
  maxTotalTime?: number;
  /** Milliseconds each attempt may take, the body read included (10000). */
  requestTimeout?: number;
  /** First backoff pause in milliseconds (100), doubling up to `backoffMax` (2000), with jitter. */
  backoffInitial?: number;
  backoffMax?: number;
  /** Another fetch implementation (the global one by default). */
  fetch?: (input: string, init: {
    method: string;
    headers: Record<string, string>;
    body?: string;
    signal: AbortSignal;
    redirect: "manual";
  }) => Promise<{
    status: number;
    headers: { get(name: string): string | null };
    text(): Promise<string>;
  }>;
  userAgent?: string;
  /** Called before each retry's pause. */
  onRetry?: (info: RetryInfo) => void;
}

export interface ClientStats {
  calls: number;
  attempts: number;
  retries: number;
  retriesByReason: Record<string, number>;
}

/** The events feed as an async iterator that remembers where it got to. */
export interface EventStream extends AsyncIterableIterator<WalletEvent> {
  /** The `after` to resume from: the last page's `next_after`. */
  readonly after: number;
}

export declare const CLIENT_VERSION: string;

export declare class WalletClient {
  constructor(options: WalletClientOptions);

  readonly baseUrl: string;
  maxAttempts: number;
  maxTotalTime: number;
  requestTimeout: number;
  backoffInitial: number;
  backoffMax: number;

  /** Retries made by this client so far, over all its calls. */
  readonly retryCount: number;
  readonly stats: ClientStats;
  resetStats(): void;

  createCredit(request: CreditRequest, options?: CallOptions): Promise<CreditResult>;
  getCredit(flowNo: string, options?: CallOptions): Promise<CreditLookupResponse>;
  getAccountTokens(userId: string, options?: CallOptions): Promise<AccountTokens>;

  createDebit(request: DebitRequest, options?: IdempotentCallOptions): Promise<DebitResult>;
  createGrant(request: GrantRequest, options?: IdempotentCallOptions): Promise<GrantResult>;
  createHold(request: HoldRequest, options?: IdempotentCallOptions): Promise<HoldResult>;
  captureHold(holdId: number | string, request?: CaptureRequest | null, options?: IdempotentCallOptions): Promise<CaptureResult>;
  releaseHold(holdId: number | string, options?: IdempotentCallOptions): Promise<ReleaseResult>;
  getHold(holdId: number | string, options?: CallOptions): Promise<HoldLookupResponse>;

  getWallet(userId: string, query?: WalletQuery, options?: CallOptions): Promise<Wallet>;
  listEntries(userId: string, query?: EntriesQuery, options?: CallOptions): Promise<EntriesPage>;
  listHolds(userId: string, query?: HoldsQuery, options?: CallOptions): Promise<HoldsPage>;
  listCredits(userId: string, query?: CreditsQuery, options?: CallOptions): Promise<CreditsPage>;

  listEvents(query?: EventsQuery, options?: CallOptions): Promise<EventsPage>;

  getHealth(options?: CallOptions): Promise<HealthStatus>;
  getReadiness(options?: CallOptions): Promise<ReadyStatus>;
  getOpenAPIDocument(options?: CallOptions): Promise<OpenAPIDocument>;

  iterateEntries(userId: string, query?: EntriesQuery & PagingBound, options?: CallOptions): AsyncGenerator<Entry, void, undefined>;
  iterateHolds(userId: string, query?: HoldsQuery & PagingBound, options?: CallOptions): AsyncGenerator<Hold, void, undefined>;
  iterateCredits(userId: string, query?: CreditsQuery & PagingBound, options?: CallOptions): AsyncGenerator<CreditRecord, void, undefined>;
  iterateEvents(query?: EventsQuery & PagingBound, options?: CallOptions): EventStream;
}

// ---------------------------------------------------------------------------
// Errors

/** The base of every error the client raises. */
export declare class WalletError extends Error {
  /** Attempts the call made before giving up with this error. */
  attempts: number;
  /** The Idempotency-Key a write sent on every attempt (null for other calls): retry later with the same one. */
  idempotencyKey: string | null;
}

/** Facts of the HTTP answer a problem came with. */
export interface AnswerFacts {
  requestId?: string | null;
  retryAfter?: number | null;
  replayed?: boolean;
}

/** The common members of every problem document. */
export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail: string;
  code: string;
  instance: string;
  [member: string]: unknown;
}

export interface FieldError {
  field: string;
  message: string;
}

/** The service answered with an RFC 9457 problem document: branch on the class or on `code`. */
export declare class WalletProblemError extends WalletError {
  constructor(status: number, body: ProblemBody, answer?: AnswerFacts);
  readonly status: number;
  readonly code: string;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  /** The request id of the request that got this answer. */
  readonly instance: string;
  /** The whole problem document, members this client does not know included. */
  readonly body: ProblemBody;
  /** The answer's `X-Request-Id`. */
  readonly requestId: string | null;
  /** The answer's `Retry-After`, in seconds. */
  readonly retryAfter: number | null;
  /** True for a problem stored under the Idempotency-Key and replayed. */
  readonly replayed: boolean;
}

/** A problem whose code this client does not know. */
export declare class UnknownProblemError extends WalletProblemError {}

/** An answer that is neither the documented result nor a problem document. */
export declare class UnexpectedResponseError extends WalletError {
  constructor(message: string, status: number, bodyText: string, answer?: AnswerFacts);
  readonly status: number;
  readonly bodyText: string;
  readonly requestId: string | null;
}

/** No answer on any attempt (refused, reset, closed, timed out); `cause` is the last failure. */
export declare class WalletTransportError extends WalletError {
  constructor(message: string, cause: unknown, attempts: number);
  readonly cause: unknown;
}

export declare class AmountExceedsHoldError extends WalletProblemError {
  readonly code: "amount_exceeds_hold";
  /** What the hold keeps. */
  readonly held_amount: number;
}
export declare class AmountMismatchError extends WalletProblemError {
  readonly code: "amount_mismatch";
  /** Catalog amount x quantity. */
  readonly expected_amount: number;
}
export declare class BadRequestError extends WalletProblemError {
  readonly code: "bad_request";
}
export declare class CursorExpiredError extends WalletProblemError {
  readonly code: "cursor_expired";
}
export declare class DatabaseUnavailableError extends WalletProblemError {
  readonly code: "database_unavailable";
}
export declare class FlowNoConflictError extends WalletProblemError {
  readonly code: "flow_no_conflict";
}
export declare class ForbiddenError extends WalletProblemError {
  readonly code: "forbidden";
}
export declare class GrantLimitExceededError extends WalletProblemError {
  readonly code: "grant_limit_exceeded";
  readonly max_amount: number;
}
export declare class HeadersTooLargeError extends WalletProblemError {
  readonly code: "headers_too_large";
  readonly limit_bytes: number;
}
export declare class HoldNotActiveError extends WalletProblemError {
  readonly code: "hold_not_active";
  readonly hold_status: "captured" | "released" | "expired" | (string & {});
}
export declare class IdempotencyKeyRequiredError extends WalletProblemError {
  readonly code: "idempotency_key_required";
}
export declare class IdempotencyKeyReusedError extends WalletProblemError {
  readonly code: "idempotency_key_reused";
}
export declare class InsufficientFundsError extends WalletProblemError {
  readonly code: "insufficient_funds";
  /** The balance when the operation was refused. */
  readonly balance: number;
  /** The balance less active holds then. */
  readonly available: number;
}
export declare class InternalError extends WalletProblemError {
  readonly code: "internal";
}
export declare class MalformedJsonError extends WalletProblemError {
  readonly code: "malformed_json";
}
export declare class MalformedNotificationError extends WalletProblemError {
  readonly code: "malformed_notification";
}
export declare class MethodNotAllowedError extends WalletProblemError {
  readonly code: "method_not_allowed";
}
export declare class NotFoundError extends WalletProblemError {
  readonly code: "not_found";
}
export declare class OutcomeUnknownError extends WalletProblemError {
  readonly code: "outcome_unknown";
}
export declare class OverloadedError extends WalletProblemError {
  readonly code: "overloaded";
}
export declare class PaidCurrencyNotGrantableError extends WalletProblemError {
  readonly code: "paid_currency_not_grantable";
}
export declare class PayloadTooLargeError extends WalletProblemError {
  readonly code: "payload_too_large";
  readonly limit_bytes: number;
}
export declare class PurchasePendingError extends WalletProblemError {
  readonly code: "purchase_pending";
}
export declare class RateLimitedError extends WalletProblemError {
  readonly code: "rate_limited";
}
export declare class RequestTimeoutError extends WalletProblemError {
  readonly code: "request_timeout";
}
export declare class ShuttingDownError extends WalletProblemError {
  readonly code: "shutting_down";
}
export declare class UnauthorizedError extends WalletProblemError {
  readonly code: "unauthorized";
  /** For a refused Google Play push token, the check that failed. */
  readonly reason: string | undefined;
}
export declare class UnknownCurrencyError extends WalletProblemError {
  readonly code: "unknown_currency";
}
export declare class UnknownProductError extends WalletProblemError {
  readonly code: "unknown_product";
}
export declare class UnsupportedMediaTypeError extends WalletProblemError {
  readonly code: "unsupported_media_type";
}
export declare class UnsupportedTransferEncodingError extends WalletProblemError {
  readonly code: "unsupported_transfer_encoding";
}
export declare class ValidationFailedError extends WalletProblemError {
  readonly code: "validation_failed";
  /** Every invalid field, missing field and unknown member. */
  readonly errors: FieldError[];
}
export type VerificationFailureReason =
  | "mode_not_enabled"
  | "not_consumable"
  | "revoked"
  | "transaction_mismatch"
  | "product_mismatch"
  | "account_mismatch"
  | "malformed"
  | "bad_algorithm"
  | "bad_chain"
  | "untrusted_root"
  | "missing_apple_oid"
  | "bad_signature"
  | "bundle_mismatch"
  | "environment_not_allowed"
  | "receipt_invalid"
  | "transaction_not_found"
  | "quantity_out_of_range";
export declare class VerificationFailedError extends WalletProblemError {
  readonly code: "verification_failed";
  readonly reason: VerificationFailureReason | (string & {});
}
export declare class VerificationUnavailableError extends WalletProblemError {
  readonly code: "verification_unavailable";
}
export declare class VoidNotConfirmedError extends WalletProblemError {
  readonly code: "void_not_confirmed";
}
export declare class WalletBusyError extends WalletProblemError {
  readonly code: "wallet_busy";
}

export type ProblemCode =
  | "amount_exceeds_hold"
  | "amount_mismatch"
  | "bad_request"
  | "cursor_expired"
  | "database_unavailable"
  | "flow_no_conflict"
  | "forbidden"
  | "grant_limit_exceeded"
  | "headers_too_large"
  | "hold_not_active"
  | "idempotency_key_required"
  | "idempotency_key_reused"
  | "insufficient_funds"
  | "internal"
  | "malformed_json"
  | "malformed_notification"
  | "method_not_allowed"
  | "not_found"
  | "outcome_unknown"
  | "overloaded"
  | "paid_currency_not_grantable"
  | "payload_too_large"
  | "purchase_pending"
  | "rate_limited"
  | "request_timeout"
  | "shutting_down"
  | "unauthorized"
  | "unknown_currency"
  | "unknown_product"
  | "unsupported_media_type"
  | "unsupported_transfer_encoding"
  | "validation_failed"
  | "verification_failed"
  | "verification_unavailable"
  | "void_not_confirmed"
  | "wallet_busy";

/** The error class of each problem code this client knows. */
export declare const PROBLEM_CLASSES: Readonly<Record<ProblemCode, typeof WalletProblemError>>;

/** The error for a problem body: the code's own class, or UnknownProblemError. */
export declare function problemError(status: number, body: ProblemBody, answer?: AnswerFacts): WalletProblemError;

// ---------------------------------------------------------------------------
// What the client covers of the API document

export type OperationId =
  | "createCredit"
  | "createDebit"
  | "createGrant"
  | "getWallet"
  | "listEntries"
  | "listHolds"
  | "listCredits"
  | "getAccountTokens"
  | "getCredit"
  | "createHold"
  | "captureHold"
  | "releaseHold"
  | "getHold"
  | "listEvents"
  | "getHealth"
  | "getReadiness"
  | "getOpenAPIDocument";

export interface Manifest {
  readonly service: string;
  readonly client: string;
  readonly operations: {
    readonly implemented: readonly string[];
    /** operationId: why the client leaves it out. */
    readonly excluded: Readonly<Record<string, string>>;
  };
  readonly problemCodes: readonly string[];
}

export interface DocumentComparison {
  /** In the document, neither implemented nor excluded. */
  missingOperations: string[];
  /** In the document's *Problem schemas, unknown to the client. */
  missingProblemCodes: string[];
  /** Listed by the client, gone from the document. */
  staleOperations: string[];
  staleProblemCodes: string[];
}

export declare const MANIFEST: Manifest;
export declare const IMPLEMENTED_OPERATIONS: readonly string[];
export declare const EXCLUDED_OPERATIONS: Readonly<Record<string, string>>;
export declare const KNOWN_PROBLEM_CODES: readonly string[];
export declare function operationIdsOf(document: unknown): string[];
export declare function problemCodesOf(document: unknown): string[];
export declare function compareWithDocument(document: unknown, known?: Manifest): DocumentComparison;

// ---------------------------------------------------------------------------
// Response checking

export type ShapeName =
  | "CreditResponse"
  | "CreditLookupResponse"
  | "CreditsPage"
  | "DebitResponse"
  | "GrantResponse"
  | "Wallet"
  | "EntriesPage"
  | "HoldsPage"
  | "AccountTokens"
  | "HoldResponse"
  | "HoldReleaseResponse"
  | "HoldActionResponse"
  | "HoldLookupResponse"
  | "EventsPage"
  | "HealthStatus"
  | "ReadyStatus"
  | "OpenAPIDocument";

/** A body that lacks a required member, or has one of another type. */
export declare class ShapeError extends Error {}
export declare const SHAPES: Readonly<Record<ShapeName, unknown>>;
/** Returns the value when it has the documented shape; throws ShapeError otherwise. */
export declare function decode(value: unknown, shape: ShapeName): unknown;
