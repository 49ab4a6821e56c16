// The app backend's purchase handler: the app says "player U bought product P
// in store transaction T"; the backend credits it through the wallet and tells
// the app whether to finish the transaction.
//
// The rules it follows are the service's own (docs/api.md and docs/errors.md,
// docs/appstore-go-live.md "When the app may finish() a transaction"):
//   - the flowNO is the store's transaction id, so the same purchase reported
//     twice is credited once and the second call is a replay;
//   - the coins come from the catalog: the backend sends the product id the
//     app names and never an amount;
//   - a store keeps an unfinished transaction and offers it again on the next
//     launch, so the app finishes it only on a final answer.
import {
  AmountMismatchError,
  FlowNoConflictError,
  ForbiddenError,
  PurchasePendingError,
  RateLimitedError,
  UnauthorizedError,
  UnexpectedResponseError,
  UnknownProductError,
  ValidationFailedError,
  VerificationFailedError,
  WalletClient,
  WalletProblemError,
  WalletTransportError,
  type CreditRequest,
} from "../../../clients/typescript/index.js";

/** What the app reports once the store says the payment went through. */
export interface PurchaseReport {
  /** The signed-in player, from the app's session (not from the request body). */
  userId: string;
  /** The store's product id, as the app bought it. */
  productId: string;
  /** The App Store transactionId or Google Play orderId: the wallet's flowNO. */
  transactionId: string;
  /** StoreKit 2's signed transaction, when the wallet verifies App Store purchases itself. */
  signedTransaction?: string;
}

export type Outcome =
  | "credited" // new coins
  | "already_credited" // a replay: the coins were given the first time
  | "not_valid" // the store's evidence does not hold: never credited here
  | "needs_support" // the purchase is someone else's: a person must look
  | "retry_later" // nothing was decided: the app reports it again later
  | "blocked"; // a fault or a setting of ours: fixed first, then retried

/** What the backend answers the app, and who else must hear of it. */
export interface PurchaseAnswer {
  outcome: Outcome;
  /** Whether the app finishes (StoreKit) or consumes (Play Billing) the store transaction now. */
  finishTransaction: boolean;
  /** For the player's screen. */
  message: string;
  /** For operations or support, when someone must act; null when nobody need. */
  alert: string | null;
  /** The wallet's problem code behind a refusal. */
  code: string | null;
  /** Coins the purchase gave, and the balance the wallet answered with. */
  coins: number | null;
  balance: number | null;
  /** When to report it again, for `retry_later`. */
  retryAfterSeconds: number | null;
}

// Reasons of verification_failed that another try cannot change. Two are not
// final: transaction_not_found (the store may not know the transaction yet)
// and mode_not_enabled (the wallet is not set up for this kind of evidence).
const RETRYABLE_VERIFICATION_REASONS = new Set(["transaction_not_found"]);
const SETTING_VERIFICATION_REASONS = new Set(["mode_not_enabled"]);

/** Credits one reported purchase and says what the app should do with it. */
export async function handlePurchase(wallet: WalletClient, report: PurchaseReport): Promise<PurchaseAnswer> {
  const request: CreditRequest = {
    user_id: report.userId,
    flow_no: report.transactionId,
    product_id: report.productId,
  };
  if (report.signedTransaction !== undefined) request.signed_transaction = report.signedTransaction;
  try {
    // 503s with Retry-After, outcome_unknown and dropped connections are
    // retried inside the client with the same flowNO, which makes them safe.
    const result = await wallet.createCredit(request);
    const coins = result.credit.amount;
    if (result.replayed) {
      // Nothing was written this time. The answer shows the credit and the
      // balance as they are now: a refund since then shows in its status.
      const refunded = result.credit.status !== "credited";
      return answer(
        "already_credited",
        true,
        refunded ? "This purchase was credited, then refunded." : `Your ${coins} coins were already added.`,
        { coins, balance: result.balance.balance },
      );
    }
    return answer("credited", true, `+${coins} coins.`, { coins, balance: result.balance.balance });
  } catch (error) {
    return refusal(report, error);
  }
}

/** The app's instruction for each way a credit can fail. */
function refusal(report: PurchaseReport, error: unknown): PurchaseAnswer {
  const purchase = `transaction ${report.transactionId} (${report.productId} for ${report.userId})`;
  if (error instanceof FlowNoConflictError) {
    // Credited before to another player, product or quantity: retrying cannot
    // change that, so the store transaction is finished and support looks.
    return answer("needs_support", true, "This purchase is already linked to another account. Support will contact you.", {
      code: error.code,
      alert: `support: ${purchase} is already credited to another user, product or quantity (request ${error.instance})`,
    });
  }
  if (error instanceof VerificationFailedError) {
    const reason = String(error.reason);
    if (RETRYABLE_VERIFICATION_REASONS.has(reason)) {
      return answer("retry_later", false, "The store has not confirmed this purchase yet; it will be retried.", {
        code: `${error.code}/${reason}`,
      });
    }
    if (SETTING_VERIFICATION_REASONS.has(reason)) {
      return answer("blocked", false, "Your purchase is safe; the coins will arrive shortly.", {
        code: `${error.code}/${reason}`,
        alert: `ops: the wallet refuses this kind of purchase evidence (${reason}) for ${purchase}`,
      });
    }
    return answer("not_valid", true, "This purchase is not valid and was not credited.", {
      code: `${error.code}/${reason}`,
      alert: `fraud review: ${purchase} failed verification (${reason})`,
    });
  }
  if (error instanceof PurchasePendingError) {
    // Google Play has not been paid yet; the same report succeeds once it is.
    return answer("retry_later", false, "Your payment is still being processed; the coins will follow.", {
      code: error.code,
      retryAfterSeconds: error.retryAfter,
    });
  }
  if (error instanceof RateLimitedError) {
    return answer("retry_later", false, "Your purchase will be checked again shortly.", {
      code: error.code,
      retryAfterSeconds: error.retryAfter,
    });
  }
  if (error instanceof UnknownProductError) {
    return answer("blocked", false, "Your purchase is safe; the coins will arrive shortly.", {
      code: error.code,
      alert: `ops: product ${report.productId} is not an active catalog product; ${purchase} waits for it`,
    });
  }
  if (
    error instanceof ValidationFailedError ||
    error instanceof AmountMismatchError ||
    error instanceof UnauthorizedError ||
    error instanceof ForbiddenError
  ) {
    return answer("blocked", false, "Your purchase is safe; the coins will arrive shortly.", {
      code: error.code,
      alert: `ops: the wallet refused ${purchase}: ${error.code}: ${error.detail}`,
    });
  }
  if (error instanceof WalletProblemError && error.status === 503) {
    // The client already retried within its bounds; the flowNO keeps a later
    // report of the same purchase safe, whatever happened to this one.
    return answer("retry_later", false, "The coin service is busy; your purchase will be added shortly.", {
      code: error.code,
      retryAfterSeconds: error.retryAfter,
    });
  }
  if (error instanceof WalletTransportError) {
    return answer("retry_later", false, "The coin service is unreachable; your purchase will be added shortly.", {
      code: "unreachable",
    });
  }
  if (error instanceof WalletProblemError || error instanceof UnexpectedResponseError) {
    const code = error instanceof WalletProblemError ? error.code : "unexpected_response";
    return answer("blocked", false, "Your purchase is safe; the coins will arrive shortly.", {
      code,
      alert: `ops: ${purchase}: ${error.message}`,
    });
  }
  throw error;
}

function answer(
  outcome: Outcome,
  finishTransaction: boolean,
  message: string,
  more: Partial<Pick<PurchaseAnswer, "alert" | "code" | "coins" | "balance" | "retryAfterSeconds">> = {},
): PurchaseAnswer {
  return {
    outcome,
    finishTransaction,
    message,
    alert: more.alert ?? null,
    code: more.code ?? null,
    coins: more.coins ?? null,
    balance: more.balance ?? null,
    retryAfterSeconds: more.retryAfterSeconds ?? null,
  };
}

/** One line for the backend's log. */
export function describe(report: PurchaseReport, result: PurchaseAnswer): string {
  const head = `purchase ${report.transactionId} (${report.productId} for ${report.userId}): ${result.outcome}`;
  const detail: string[] = [];
  if (result.code !== null) detail.push(`wallet said ${result.code}`);
  if (result.coins !== null) detail.push(`${result.coins} coin`);
  if (result.balance !== null) detail.push(`balance ${result.balance}`);
  if (result.retryAfterSeconds !== null) detail.push(`retry after ${result.retryAfterSeconds} s`);
  const app = result.finishTransaction ? "finish the transaction" : "keep the transaction";
  const lines = [`${head}${detail.length > 0 ? ` (${detail.join(", ")})` : ""} -> app: ${app}; "${result.message}"`];
  if (result.alert !== null) lines.push(`  alert ${result.alert}`);
  return lines.join("\n");
}
