// Checks a response body against the shape the API document gives it.
// Every required member must be there with its type: nothing missing is
// filled in with a default. Members the client does not know are kept.

const I = "integer";
const S = "string";
const O = "object";
const nullable = (type) => ({ nullable: type });
const arrayOf = (type) => ({ arrayOf: type });

const Balance = { user_id: S, currency: S, balance: I, held: I, available: I };

const Credit = {
  flow_no: S, user_id: S, product_id: S, quantity: I, currency: S, amount: I, status: S, entry_id: I, created_at: S,
};

const CreditLine = { currency: S, amount: I, refunded_amount: I };

const CreditRecord = {
  ...Credit, source: S, environment: nullable(S), refunded_amount: nullable(I), lines: arrayOf(CreditLine),
};

const Debit = { id: I, user_id: S, currency: S, amount: I, reason: nullable(S), entry_id: I, created_at: S };

const Grant = {
  id: I, user_id: S, currency: S, amount: I, reason: S, expires_at: nullable(S), entry_id: I, created_at: S,
};

const Hold = {
  id: I, user_id: S, currency: S, amount: I, status: S, expires_at: S, created_at: S,
  "reason?": nullable(S), "metadata?": nullable(O), "captured_amount?": nullable(I),
  "captured_at?": nullable(S), "released_at?": nullable(S), "expired_at?": nullable(S),
};

const CaptureDebit = { id: I, entry_id: I, user_id: S, currency: S, amount: I, "reason?": nullable(S), created_at: S };

const WalletBalance = {
  currency: S, balance: I, held: I, available: I, paid: I, free: I, debt: I,
  next_expiry: nullable({ amount: I, at: S }),
};

const Entry = { id: I, currency: S, amount: I, balance_after: I, kind: S, reference: S, created_at: S };

const WalletEvent = {
  id: I, type: S, user_id: S, currency: S, amount: I, balance_after: I, held: I, available: I,
  entry_id: nullable(I), hold_id: nullable(I), flow_no: nullable(S), created_at: S, data: O,
};

/** The shape of each operation's successful body. */
export const SHAPES = Object.freeze({
  CreditResponse: { credit: Credit, balance: Balance },
  CreditLookupResponse: { credit: CreditRecord },
  CreditsPage: { credits: arrayOf(CreditRecord), next_cursor: nullable(S) },
  DebitResponse: { debit: Debit, balance: Balance },
  GrantResponse: { grant: Grant, balance: Balance },
  Wallet: { user_id: S, balances: arrayOf(WalletBalance) },
  EntriesPage: { entries: arrayOf(Entry), next_cursor: nullable(S) },
  HoldsPage: { holds: arrayOf(Hold), next_cursor: nullable(S) },
  AccountTokens: { user_id: S, apple_app_account_token: nullable(S), google_obfuscated_account_id: S },
  HoldResponse: { hold: Hold, balance: Balance },
  HoldReleaseResponse: { hold: Hold, balance: Balance },
  HoldActionResponse: { hold: Hold, debit: CaptureDebit, balance: Balance },
  HoldLookupResponse: { hold: Hold },
  EventsPage: { events: arrayOf(WalletEvent), next_after: I },
  HealthStatus: { status: S },
  ReadyStatus: { status: S },
  OpenAPIDocument: { openapi: S, paths: O },
});

export class ShapeError extends Error {}

/** Returns `value` when it has the shape; throws ShapeError naming the first fault. */
export function decode(value, shapeName) {
  const shape = SHAPES[shapeName];
  if (!shape) throw new ShapeError(`no shape named ${shapeName}`);
  check(value, shape, shapeName);
  return value;
}

function check(value, type, path) {
  if (typeof type === "string") {
    const ok = type === I ? Number.isInteger(value)
      : type === S ? typeof value === "string"
      : type === O ? typeof value === "object" && value !== null && !Array.isArray(value)
      : false;
    if (!ok) throw new ShapeError(`${path}: expected ${type}, got ${describe(value)}`);
    return;
  }
  if ("nullable" in type) {
    if (value !== null) check(value, type.nullable, path);
    return;
  }
  if ("arrayOf" in type) {
    if (!Array.isArray(value)) throw new ShapeError(`${path}: expected an array, got ${describe(value)}`);
    value.forEach((item, index) => check(item, type.arrayOf, `${path}[${index}]`));
    return;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ShapeError(`${path}: expected an object, got ${describe(value)}`);
  }
  for (const [key, memberType] of Object.entries(type)) {
    const optional = key.endsWith("?");
    const name = optional ? key.slice(0, -1) : key;
    if (!Object.prototype.hasOwnProperty.call(value, name)) {
      if (optional) continue;
      throw new ShapeError(`${path}.${name}: required member missing`);
    }
    check(value[name], memberType, `${path}.${name}`);
  }
}

function describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "number" && !Number.isInteger(value)) return `the number ${value}`;
  return typeof value;
}
