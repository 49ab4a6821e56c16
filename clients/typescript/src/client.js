// WalletClient: one async method per operation of the wallet service's API,
// with the retries every caller needs built in.
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { decode, ShapeError } from "./decode.js";
import {
  problemError,
  UnexpectedResponseError,
  WalletProblemError,
  WalletTransportError,
} from "./errors.js";

export const CLIENT_VERSION = "0.1.0";

const DEFAULTS = Object.freeze({
  maxAttempts: 8,
  maxTotalTime: 30_000,
  requestTimeout: 10_000,
  backoffInitial: 100,
  backoffMax: 2_000,
});

export class WalletClient {
  #baseUrl;
  #apiKey;
  #fetch;
  #userAgent;
  #onRetry;
  #stats = { calls: 0, attempts: 0, retries: 0, retriesByReason: {} };

  constructor(options) {
    if (typeof options !== "object" || options === null) throw new TypeError("WalletClient needs options");
    const { baseUrl, apiKey } = options;
    if (typeof baseUrl !== "string" || !/^https?:\/\//.test(baseUrl)) {
      throw new TypeError("baseUrl must be an http:// or https:// URL");
    }
    if (apiKey !== undefined && apiKey !== null && typeof apiKey !== "string") throw new TypeError("apiKey must be a string");
    this.#baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = apiKey ?? null;
    this.maxAttempts = positiveInteger(options.maxAttempts ?? DEFAULTS.maxAttempts, "maxAttempts");
    this.maxTotalTime = nonNegativeNumber(options.maxTotalTime ?? DEFAULTS.maxTotalTime, "maxTotalTime");
    this.requestTimeout = positiveNumber(options.requestTimeout ?? DEFAULTS.requestTimeout, "requestTimeout");
    this.backoffInitial = nonNegativeNumber(options.backoffInitial ?? DEFAULTS.backoffInitial, "backoffInitial");
    this.backoffMax = nonNegativeNumber(options.backoffMax ?? DEFAULTS.backoffMax, "backoffMax");
    this.#fetch = options.fetch ?? globalThis.fetch;
    if (typeof this.#fetch !== "function") throw new TypeError("no fetch: use Node 18 or later, or pass options.fetch");
    this.#userAgent = options.userAgent ?? `wallet-client-typescript/${CLIENT_VERSION}`;
    this.#onRetry = typeof options.onRetry === "function" ? options.onRetry : null;
  }

  get baseUrl() {
    return this.#baseUrl;
  }

  /** Retries made by this client so far, over all calls. */
  get retryCount() {
    return this.#stats.retries;
  }

  /** A copy of the counters: calls, attempts, retries and retries by reason. */
  get stats() {
    return { ...this.#stats, retriesByReason: { ...this.#stats.retriesByReason } };
  }

  resetStats() {
    this.#stats = { calls: 0, attempts: 0, retries: 0, retriesByReason: {} };
  }

  // Credits (the app backend's key, scope `credit`).

  async createCredit(request, options) {
    return this.#call("createCredit", "POST", "/v1/credits", { body: request, shape: "CreditResponse", options });
  }

  async getCredit(flowNo, options) {
    return this.#call("getCredit", "GET", `/v1/credits/${segment(flowNo, "flowNo")}`, {
      shape: "CreditLookupResponse", options,
    });
  }

  async getAccountTokens(userId, options) {
    return this.#call("getAccountTokens", "GET", `/v1/wallets/${segment(userId, "userId")}/account-tokens`, {
      shape: "AccountTokens", options,
    });
  }

  // Spending and rewards (the game server's key, scopes `debit` and `grant`).

  async createDebit(request, options) {
    return this.#call("createDebit", "POST", "/v1/debits", {
      body: request, shape: "DebitResponse", idempotent: true, options,
    });
  }

  async createGrant(request, options) {
    return this.#call("createGrant", "POST", "/v1/grants", {
      body: request, shape: "GrantResponse", idempotent: true, options,
    });
  }

  async createHold(request, options) {
    return this.#call("createHold", "POST", "/v1/holds", {
      body: request, shape: "HoldResponse", idempotent: true, options,
    });
  }

  async captureHold(holdId, request, options) {
    const body = request === undefined || request === null ? {} : request;
    return this.#call("captureHold", "POST", `/v1/holds/${segment(holdId, "holdId")}/capture`, {
      body, shape: "HoldActionResponse", idempotent: true, options,
    });
  }

  async releaseHold(holdId, options) {
    return this.#call("releaseHold", "POST", `/v1/holds/${segment(holdId, "holdId")}/release`, {
      body: {}, shape: "HoldReleaseResponse", idempotent: true, options,
    });
  }

  async getHold(holdId, options) {
    return this.#call("getHold", "GET", `/v1/holds/${segment(holdId, "holdId")}`, { shape: "HoldLookupResponse", options });
  }

  // Reads (scope `read`).

  async getWallet(userId, query, options) {
    return this.#call("getWallet", "GET", `/v1/wallets/${segment(userId, "userId")}`, {
      query: pick(query, ["currency"]), shape: "Wallet", options,
    });
  }

  async listEntries(userId, query, options) {
    return this.#call("listEntries", "GET", `/v1/wallets/${segment(userId, "userId")}/entries`, {
      query: pick(query, ["currency", "limit", "cursor"]), shape: "EntriesPage", options,
    });
  }

  async listHolds(userId, query, options) {
    return this.#call("listHolds", "GET", `/v1/wallets/${segment(userId, "userId")}/holds`, {
      query: pick(query, ["status", "limit", "cursor"]), shape: "HoldsPage", options,
    });
  }

  async listCredits(userId, query, options) {
    return this.#call("listCredits", "GET", `/v1/wallets/${segment(userId, "userId")}/credits`, {
      query: pick(query, ["limit", "cursor"]), shape: "CreditsPage", options,
    });
  }

  // The events feed (scope `events`).

  async listEvents(query, options) {
    return this.#call("listEvents", "GET", "/v1/events", {
      query: pick(query, ["after", "limit", "user_id", "type"]), shape: "EventsPage", options,
    });
  }

  // Operations (no key).

  async getHealth(options) {
    return this.#call("getHealth", "GET", "/healthz", { shape: "HealthStatus", options });
  }

  async getReadiness(options) {
    return this.#call("getReadiness", "GET", "/readyz", { shape: "ReadyStatus", options });
  }

  async getOpenAPIDocument(options) {
    return this.#call("getOpenAPIDocument", "GET", "/openapi.json", { shape: "OpenAPIDocument", options });
  }

  // Paging helpers.

  /** Every entry of a wallet, newest first, following `next_cursor` until it is null. */
  iterateEntries(userId, query = {}, options) {
    return this.#walk((cursor) => this.listEntries(userId, { ...query, cursor }, options), "entries", query, options);
  }

  /** Every hold of a wallet this key may see, newest first. */
  iterateHolds(userId, query = {}, options) {
    return this.#walk((cursor) => this.listHolds(userId, { ...query, cursor }, options), "holds", query, options);
  }

  /** Every credit of a wallet, newest first. */
  iterateCredits(userId, query = {}, options) {
    return this.#walk((cursor) => this.listCredits(userId, { ...query, cursor }, options), "credits", query, options);
  }

  /**
   * The events feed from `after` (0: the oldest kept), page by page, each
   * page's `next_after` the next page's `after`, until a page is empty
   * (caught up). The returned iterator's `after` is where to resume.
   */
  iterateEvents(query = {}, options) {
    return new EventStream(this, query, options);
  }

  async *#walk(fetchPage, member, query, options) {
    const maxPages = pagesBound(query, options);
    let cursor = typeof query.cursor === "string" && query.cursor !== "" ? query.cursor : undefined;
    const seen = new Set();
    for (let pages = 0; pages < maxPages; pages++) {
      const page = await fetchPage(cursor);
      yield* page[member];
      if (page.next_cursor === null) return;
      if (seen.has(page.next_cursor)) throw new UnexpectedResponseError(`the cursor ${page.next_cursor} came back twice`, 200, "");
      seen.add(page.next_cursor);
      cursor = page.next_cursor;
    }
  }

  // One call: attempts until an answer that is not retried, or a bound.

  async #call(operation, method, path, { query, body, shape, idempotent = false, options = {} }) {
    options = options ?? {};
    const signal = options.signal;
    const url = this.#baseUrl + path + queryString(query);
    const headers = { Accept: "application/json", "User-Agent": this.#userAgent };
    if (this.#apiKey !== null) headers.Authorization = `Bearer ${this.#apiKey}`;
    if (typeof options.requestId === "string") headers["X-Request-Id"] = options.requestId;
    let idempotencyKey = null;
    if (idempotent) {
      idempotencyKey = options.idempotencyKey ?? randomUUID();
      if (typeof idempotencyKey !== "string") throw new TypeError("idempotencyKey must be a string");
      headers["Idempotency-Key"] = idempotencyKey;
    }
    let payload;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers["Content-Type"] = "application/json";
    }
    const maxAttempts = options.maxAttempts ?? this.maxAttempts;
    const deadline = Date.now() + (options.maxTotalTime ?? this.maxTotalTime);
    const requestTimeout = options.requestTimeout ?? this.requestTimeout;
    this.#stats.calls++;

    for (let attempt = 1; ; attempt++) {
      this.#stats.attempts++;
      const outcome = await this.#attempt(url, method, headers, payload, requestTimeout, signal);
      let error;
      let delay;
      let reason;
      if (outcome.answer) {
        const answer = outcome.answer;
        if (answer.status >= 200 && answer.status < 300) {
          try {
            return this.#result(answer, shape, idempotent, idempotencyKey);
          } catch (error) {
            error.attempts = attempt;
            error.idempotencyKey = idempotencyKey;
            throw error;
          }
        }
        error = answerError(answer);
        error.attempts = attempt;
        error.idempotencyKey = idempotencyKey;
        const retried = error instanceof WalletProblemError
          && (error.code === "outcome_unknown" || (answer.status === 503 && error.retryAfter !== null));
        if (!retried) throw error;
        reason = error.code;
        delay = error.retryAfter !== null ? error.retryAfter * 1000 : this.#backoff(attempt);
      } else {
        error = new WalletTransportError(
          `${method} ${path}: ${outcome.timedOut ? `no answer within ${requestTimeout} ms` : describeCause(outcome.cause)}`
            + ` (attempt ${attempt})`,
          outcome.cause, attempt);
        error.idempotencyKey = idempotencyKey;
        reason = outcome.timedOut ? "timeout" : "connection";
        delay = this.#backoff(attempt);
      }
      const remaining = deadline - Date.now();
      if (attempt >= maxAttempts || remaining <= 0) throw error;
      const pause = Math.max(0, Math.min(delay, remaining));
      this.#stats.retries++;
      this.#stats.retriesByReason[reason] = (this.#stats.retriesByReason[reason] ?? 0) + 1;
      if (this.#onRetry) {
        try {
          this.#onRetry({ operation, attempt, reason, pause, error, idempotencyKey });
        } catch {
          // A hook's failure does not change the call.
        }
      }
      if (pause > 0) await sleep(pause, undefined, signal ? { signal } : undefined);
      else if (signal?.aborted) throw signal.reason;
    }
  }

  /**
   * One HTTP exchange with its own timeout. Resolves with the answer (its
   * body read whole) or with the transport failure; rejects only when the
   * caller's signal aborted it.
   */
  async #attempt(url, method, headers, payload, timeout, signal) {
    if (signal?.aborted) throw signal.reason;
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeout);
    const forward = () => controller.abort();
    signal?.addEventListener("abort", forward, { once: true });
    try {
      const response = await this.#fetch(url, { method, headers, body: payload, signal: controller.signal, redirect: "manual" });
      const text = await response.text();
      return {
        answer: {
          status: response.status,
          text,
          contentType: response.headers.get("content-type") ?? "",
          requestId: response.headers.get("x-request-id"),
          replayed: response.headers.get("idempotent-replayed") === "true",
          retryAfter: parseRetryAfter(response.headers.get("retry-after")),
        },
      };
    } catch (cause) {
      if (signal?.aborted && !timedOut) throw signal.reason;
      if (timedOut || isConnectionFailure(cause)) return { cause, timedOut };
      // Anything else (a header fetch refuses, say) is a fault of the call, not of the network.
      throw cause;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", forward);
    }
  }

  #result(answer, shape, idempotent, idempotencyKey) {
    let body;
    try {
      body = decode(JSON.parse(answer.text), shape);
    } catch (error) {
      const why = error instanceof ShapeError ? error.message : "the body is not JSON";
      throw new UnexpectedResponseError(`${answer.status} answer not as documented: ${why}`, answer.status, answer.text, answer);
    }
    if (shape === "OpenAPIDocument") return body;
    if (idempotent) return { ...body, idempotencyKey, replayed: answer.replayed, requestId: answer.requestId };
    if (shape === "CreditResponse") return { ...body, replayed: answer.replayed, requestId: answer.requestId };
    return body;
  }

  #backoff(attempt) {
    const ceiling = Math.min(this.backoffMax, this.backoffInitial * 2 ** (attempt - 1));
    return ceiling / 2 + Math.random() * (ceiling / 2);
  }
}

/** The events feed as an async iterator that remembers where it is. */
class EventStream {
  #client;
  #query;
  #options;
  #after;
  #buffer = [];
  #done = false;
  #pages = 0;
  #maxPages;

  constructor(client, query, options) {
    this.#client = client;
    this.#query = pick(query, ["limit", "user_id", "type"]);
    this.#options = options;
    this.#after = query.after ?? 0;
    this.#maxPages = pagesBound(query, options);
  }

  /** The `after` to resume from: the `next_after` of the last page read. */
  get after() {
    return this.#after;
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  async next() {
    while (this.#buffer.length === 0) {
      if (this.#done || this.#pages >= this.#maxPages) {
        this.#done = true;
        return { value: undefined, done: true };
      }
      const page = await this.#client.listEvents({ ...this.#query, after: this.#after }, this.#options);
      this.#pages++;
      if (page.events.length === 0) {
        this.#done = true;
        if (page.next_after > this.#after) this.#after = page.next_after;
        return { value: undefined, done: true };
      }
      if (!(page.next_after > this.#after)) {
        throw new UnexpectedResponseError(`next_after ${page.next_after} does not move past ${this.#after}`, 200, "");
      }
      this.#after = page.next_after;
      this.#buffer.push(...page.events);
    }
    return { value: this.#buffer.shift(), done: false };
  }

  async return() {
    this.#done = true;
    this.#buffer = [];
    return { value: undefined, done: true };
  }
}

function answerError(answer) {
  let body;
  try {
    body = JSON.parse(answer.text);
  } catch {
    body = undefined;
  }
  if (typeof body === "object" && body !== null && !Array.isArray(body) && typeof body.code === "string") {
    return problemError(answer.status, body, answer);
  }
  return new UnexpectedResponseError(
    `${answer.status} answer without a problem document${answer.contentType ? ` (${answer.contentType})` : ""}`,
    answer.status, answer.text, answer);
}

/** Delay-seconds, or an HTTP date; null when absent or unreadable. */
function parseRetryAfter(value) {
  if (value === null) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const at = Date.parse(text);
  if (Number.isNaN(at)) return null;
  return Math.max(0, (at - Date.now()) / 1000);
}

const NETWORK_CODES = /^(ECONNREFUSED|ECONNRESET|ECONNABORTED|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENETDOWN|EAI_AGAIN|UND_ERR_)/;

/**
 * Whether fetch failed for want of an answer: undici reports a refused,
 * reset or closed connection as `TypeError: fetch failed` (or, while the
 * body is read, `TypeError: terminated`) with the socket error as `cause`.
 */
function isConnectionFailure(error) {
  if (error instanceof TypeError && error.cause !== undefined
      && (error.message === "fetch failed" || error.message === "terminated")) return true;
  const code = error?.code ?? error?.cause?.code;
  return typeof code === "string" && NETWORK_CODES.test(code);
}

function describeCause(cause) {
  if (!cause) return "connection failed";
  const inner = cause.cause;
  const code = inner?.code ?? cause.code;
  const message = inner?.message ?? cause.message ?? String(cause);
  return code ? `${code}: ${message}` : message;
}

/** A path segment, percent-encoded; `.` and `..` would be read as a path step, so they are refused. */
function segment(value, name) {
  if (typeof value !== "string" && !(typeof value === "number" && Number.isSafeInteger(value))) {
    throw new TypeError(`${name} must be a string${name === "holdId" ? " or an integer" : ""}`);
  }
  const text = String(value);
  if (text === "" || text === "." || text === "..") {
    throw new RangeError(`${name} ${JSON.stringify(text)} cannot be sent as a URL path segment`);
  }
  return encodeURIComponent(text);
}

function pick(query, names) {
  const out = {};
  if (query === undefined || query === null) return out;
  for (const name of names) if (query[name] !== undefined && query[name] !== null) out[name] = query[name];
  return out;
}

function queryString(query) {
  if (!query) return "";
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) params.append(name, String(value));
  const text = params.toString();
  return text ? `?${text}` : "";
}

function pagesBound(query, options) {
  const bound = options?.maxPages ?? query?.maxPages;
  return bound === undefined ? Infinity : positiveInteger(bound, "maxPages");
}

function positiveInteger(value, name) {
  if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer`);
  return value;
}

function positiveNumber(value, name) {
  if (typeof value !== "number" || !(value > 0)) throw new RangeError(`${name} must be a positive number`);
  return value;
}

function nonNegativeNumber(value, name) {
  if (typeof value !== "number" || !(value >= 0)) throw new RangeError(`${name} must be a number of at least 0`);
  return value;
}
