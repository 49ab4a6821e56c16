/// The fixed sets of values the ledger keeps in text columns, each once:
/// the ledger's CHECK constraints allow exactly these raw values, the
/// service compares the cases, and a metric that counts them takes its
/// labels from `allCases`.

/// Where a credit stands: the status column of `wallet.credits`.
public enum CreditStatus: String, Sendable, CaseIterable {
    case credited
    /// Part of a Google Play purchase was voided: its refunded coins are kept.
    case partiallyRefunded = "partially_refunded"
    case refunded
}

/// Where a hold stands: the status column of `wallet.holds`. A hold
/// `held` past its `expires_at` reads as `expired`.
public enum HoldStatus: String, Sendable, CaseIterable {
    case held, captured, released, expired
}

/// What a hold request does, as `wallet.hold_request`'s kind and, for
/// `capture` and `release`, the last segment of the API's path.
public enum HoldAction: String, Sendable, CaseIterable {
    case place, capture, release
}

/// What a ledger entry records: the kind column of `wallet.entries`.
public enum EntryKind: String, Sendable, CaseIterable {
    case credit, debit, refund
    case refundReversal = "refund_reversal"
    case grant, revoke
    /// Coins past their lot's expiry, taken out of the balance.
    case expire
    /// A product's bonus coins, beside its credit and under its flowNO.
    case bonus
}

/// What a refund does when the wallet holds fewer coins than it takes
/// back (WALLET_REFUND_DEBT).
public enum RefundDebt: String, Sendable, CaseIterable {
    /// Take it all: the balance goes below zero, a debt the next increases
    /// of the currency repay first.
    case allow
    /// Take what the wallet holds, never below zero, and record the rest
    /// as a shortfall (`wallet.refund_shortfalls`).
    case floor
}

/// The store environment a credit's purchase was made in: `Production` or
/// `Sandbox` for the App Store, `Production`, `Test` (a licence tester) or
/// `Promo` (a promo code) for Google Play.
public enum PurchaseEnvironment: String, Sendable, CaseIterable {
    case production = "Production"
    case sandbox = "Sandbox"
    case test = "Test"
    case promo = "Promo"
}

/// The kinds of Google Play real-time developer notification, as
/// `wallet.googleplay_notifications.kind` records them: a notification
/// carries one of the first four, or none (`other`; Google adds kinds).
public enum GooglePlayNotificationKind: String, Sendable, CaseIterable {
    case voidedPurchase = "voided_purchase"
    case oneTimeProduct = "one_time_product"
    case subscription
    case test
    case other
}

/// What an event tells: the type column of `wallet.events`, the `type` of
/// the feed's events and of webhook deliveries.
public enum EventType: String, Sendable, CaseIterable {
    case creditCreated = "credit.created"
    case creditRefunded = "credit.refunded"
    case creditRefundReversed = "credit.refund_reversed"
    case debitCreated = "debit.created"
    case holdPlaced = "hold.placed"
    case holdCaptured = "hold.captured"
    case holdReleased = "hold.released"
    case holdExpired = "hold.expired"
    case grantCreated = "grant.created"
    case revokeCreated = "revoke.created"
    /// Coins past their lot's expiry left the balance (an `expire` entry).
    case coinsExpired = "coins.expired"
    /// A product's bonus came with its credit (a `bonus` entry).
    case bonusCreated = "bonus.created"
    /// A change left the balance below zero; it follows that change's event.
    case balanceNegative = "balance.negative"
}

/// Where a webhook delivery stands: the status column of
/// `wallet.webhook_deliveries`.
public enum WebhookDeliveryStatus: String, Sendable, CaseIterable {
    /// Not yet answered with a 2xx; tried again after a pause.
    case pending
    case delivered
    /// Still not delivered at the end of the retry period.
    case failed
}
