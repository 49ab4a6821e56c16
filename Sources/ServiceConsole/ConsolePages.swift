import Foundation
import HTTPServer
import Timestamps
import WalletCore
import WalletStore

/// The console's pages: plain HTML with links and forms, no script. Every
/// value from the ledger goes in through `HTML`'s escaping interpolation.
enum ConsolePages {
    /// Who is signed in, for the header's sign-out form.
    struct Chrome {
        var keyName: String
        var csrfToken: String
    }

    static func document(title: String, chrome: Chrome?, main: HTML) -> HTML {
        let header: HTML = chrome.map { chrome in
            """
            <header>
            <nav aria-label="Console"><a href="/admin">Overview</a> <a href="/admin/audit">Audit</a> \
            <a href="/admin/keys">Keys</a> <a href="/admin/webhooks">Webhooks</a> \
            <a href="/admin/unclaimed">Unclaimed</a></nav>
            <form role="search" method="get" action="/admin/search">\
            <label for="search">Player or flowNO</label> \
            <input id="search" name="q" type="search" maxlength="128" required> \
            <button type="submit">Search</button></form>
            <form class="signout" method="post" action="/admin/logout">\
            <input type="hidden" name="csrf" value="\(chrome.csrfToken)">\
            <span>Signed in as \(chrome.keyName)</span> <button type="submit">Sign out</button></form>
            </header>
            """
        } ?? ""
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(title) · wallet console</title>
            <link rel="stylesheet" href="/admin/static/console.css">
            </head>
            <body>
            \(header)
            <main>
            \(main)
            </main>
            </body>
            </html>

            """
    }

    // MARK: Sign-in and problems

    static func login(message: String?) -> HTML {
        let error: HTML = message.map { "<p class=\"error\" role=\"alert\">\($0)</p>" } ?? ""
        return document(title: "Sign in", chrome: nil, main: """
            <h1>Sign in</h1>
            <p>Sign in with an API key that has the <code>console</code> scope, or the <code>admin</code> scope.</p>
            \(error)
            <form class="login" method="post" action="/admin/login">
            <label for="api-key">API key</label>
            <input id="api-key" name="api_key" type="password" autocomplete="off" required>
            <button type="submit">Sign in</button>
            </form>
            """)
    }

    static func problem(_ problem: Problem, chrome: Chrome?) -> HTML {
        document(title: problem.title, chrome: chrome, main: """
            <h1>\(problem.title)</h1>
            <p>\(problem.detail)</p>
            <p><a href="/admin">Back to the overview</a></p>
            """)
    }

    static func nothingFound(_ query: String, chrome: Chrome) -> HTML {
        document(title: "Nothing found", chrome: chrome, main: """
            <h1>Nothing found</h1>
            <p>No player and no flowNO is <q>\(query)</q>. A player is found by the exact user id of a wallet or a \
            credit; a flowNO by the exact store transaction id (Apple's transaction id, Google's orderId) of a credit, a notification or a void.</p>
            """)
    }

    static func searchChoice(_ query: String, chrome: Chrome) -> HTML {
        let encoded = Forms.percentEncoded(query)
        return document(title: "Search", chrome: chrome, main: """
            <h1>Search</h1>
            <p><q>\(query)</q> is both a player and a flowNO.</p>
            <ul><li><a href="/admin/users/\(encoded)">Player \(query)</a></li>\
            <li><a href="/admin/credits/\(encoded)">Credit \(query)</a></li></ul>
            """)
    }

    // MARK: Overview

    static func overview(_ overview: ConsoleStore.Overview, days: Int, chrome: Chrome) -> HTML {
        let windows = ConsoleStore.windows.map { window -> HTML in
            window == days
                ? "<a href=\"/admin?days=\(window)\" aria-current=\"page\">\(window) days</a>"
                : "<a href=\"/admin?days=\(window)\">\(window) days</a>"
        }
        let dayRows = overview.days.map { day -> HTML in
            "<tr><th scope=\"row\">\(day.day)</th><td>\(day.credited)</td><td>\(day.debited)</td><td>\(day.refunded)</td></tr>"
        }
        let refusedTotal = overview.refusedReasons.reduce(0) { $0 + $1.count }
        let outcomeRows = overview.notificationOutcomes.map { row -> HTML in
            "<tr><th scope=\"row\">\(row.name.rawValue)</th><td>\(row.count)</td></tr>"
        } + overview.refusedReasons.map { row -> HTML in
            "<tr class=\"refused\"><th scope=\"row\">refused: \(row.name.rawValue)</th><td>\(row.count)</td></tr>"
        }
        let refusedNote: HTML = refusedTotal > 0
            ? "<p class=\"alert\" role=\"status\">\(refusedTotal) notifications were refused in this window. Check the endpoint's bundle id, environments and trust anchors.</p>"
            : ""
        return document(title: "Overview", chrome: chrome, main: """
            <h1>Overview</h1>
            <nav class="windows" aria-label="Window">Last \(HTML(joining: windows.interleaved(with: " · ")))</nav>
            <section>
            <h2>Coins per day</h2>
            \(CoinsChart.svg(overview.days))
            <ul class="legend"><li class="credited">Credited (purchases)</li><li class="debited">Debited</li>\
            <li class="refunded">Refunded</li></ul>
            <div class="scroll">
            <table id="coins-per-day">
            <caption>Coins per UTC day. Grants, revokes and refund reversals are not in these columns.</caption>
            <thead><tr><th scope="col">Day</th><th scope="col">Credited</th><th scope="col">Debited</th>\
            <th scope="col">Refunded</th></tr></thead>
            <tbody>\(dayRows)</tbody>
            </table>
            </div>
            </section>
            <section>
            <h2>In the last \(days) days</h2>
            <dl id="counts">
            <dt>Purchases</dt><dd>\(overview.purchases)</dd>
            <dt>Refunds</dt><dd>\(overview.refunds)</dd>
            <dt>Consumption requests</dt><dd>\(overview.consumptionRequests)</dd>
            </dl>
            </section>
            <section>
            <h2>Balances</h2>
            \(walletTable(id: "top-balances", caption: "The ten largest balances", overview.largestBalances))
            \(walletTable(id: "negative-balances", caption: "The ten most negative balances", overview.mostNegativeBalances))
            </section>
            <section>
            <h2>App Store notifications</h2>
            \(refusedNote)
            \(table(id: "notification-outcomes", caption: "Notifications by outcome; refused ones were not applied",
                    columns: ["Outcome", "Count"], rows: outcomeRows))
            \(table(id: "refused-notifications",
                    caption: "The newest refused notifications, ten signed by Apple and ten not at most. Of those Apple did "
                        + "not sign, one row a second per reason is kept, standing for the refusals since the previous one; "
                        + "the metrics count every refusal",
                    columns: ["Received", "Reason", "Signed by Apple", "Refusals"],
                    rows: overview.recentRefused.map { refused in
                        row([cell(refused.receivedAt), cell(refused.reason.rawValue), cell(refused.appleSigned ? "yes" : "no"),
                             cell(refused.refusals)],
                            attributes: " class=\"refused\"")
                    }))
            </section>
            <section>
            <h2>Google Play notifications</h2>
            \(table(id: "google-notification-outcomes",
                    caption: "Real-time developer notifications by outcome; unauthorized pushes are counted in the metrics, not kept",
                    columns: ["Outcome", "Count"],
                    rows: overview.googleNotificationOutcomes.map { outcome in
                        "<tr><th scope=\"row\">\(outcome.name.rawValue)</th><td>\(outcome.count)</td></tr>"
                    }))
            </section>
            """)
    }

    private static func walletTable(id: String, caption: String, _ rows: [ConsoleStore.WalletRow]) -> HTML {
        table(id: id, caption: caption, columns: ["Player", "Currency", "Balance"], rows: rows.map { wallet in
            row([cell(userLink(wallet.userID)), cell(wallet.currency), cell(wallet.balance)])
        })
    }

    // MARK: A player

    static func user(_ page: ConsoleStore.UserPage, beforeID: Int64?, chrome: Chrome) -> HTML {
        let entries = page.entries.prefix(ConsoleStore.pageSize)
        let more = page.entries.count > ConsoleStore.pageSize
        let base = "/admin/users/\(Forms.percentEncoded(page.userID))"
        var paging: [HTML] = []
        if beforeID != nil { paging.append("<a href=\"\(base)\">Newest entries</a>") }
        if more, let last = entries.last {
            paging.append("<a id=\"next-page\" rel=\"next\" href=\"\(base)?before=\(last.id)\">Older entries</a>")
        }
        return document(title: "Player \(page.userID)", chrome: chrome, main: """
            <h1>Player <span class="id">\(page.userID)</span></h1>
            \(table(id: "balances", caption: "Balances; held coins are reserved by holds and not available to debit; "
                        + "paid and free coins are what the lots hold, debt what a refund took beyond them",
                    columns: ["Currency", "Balance", "Held", "Available", "Paid", "Free", "Debt", "Next expiry"],
                    rows: page.balances.map { balance in
                        row([cell(balance.currency), cell(balance.balance), cell(balance.held), cell(balance.available),
                             cell(balance.paid), cell(balance.free),
                             cell(String(balance.debt), class: balance.debt > 0 ? "alert" : nil),
                             cell(balance.nextExpiry.map { "\($0.amount) at \($0.at.rfc3339)" })])
                    }))
            <section>
            <h2>Lots</h2>
            \(table(id: "lots", caption: "Lots with coins left, soonest expiry first (newest \(ConsoleStore.relatedMax))",
                    columns: ["Lot", "Currency", "Source", "Paid", "Amount", "Remaining", "Expires", "flowNO", "Created"],
                    rows: page.lots.map { lot in
                        row([cell(String(lot.id), class: "lot-id"), cell(lot.currency), cell(lot.source),
                             cell(lot.paid ? "paid" : "free"), cell(lot.amount), cell(lot.remaining), cell(lot.expiresAt),
                             cell(lot.flowNo.map(creditLink) ?? ""), cell(lot.createdAt)])
                    }))
            </section>
            <section>
            <h2>Ledger</h2>
            \(entryTable(id: "ledger", caption: beforeID == nil ? "Newest entries first" : "Older entries, newest first",
                         Array(entries)))
            <nav class="paging" aria-label="Ledger pages">\(HTML(joining: paging.interleaved(with: " ")))</nav>
            </section>
            <section>
            <h2>Credits</h2>
            \(table(id: "credits", caption: "The player's newest \(ConsoleStore.creditsMax) credits",
                    columns: ["flowNO", "Product", "Quantity", "Amount", "Status", "Refunded", "Source", "Environment",
                              "Created"],
                    rows: page.credits.map { credit in
                        row([cell(creditLink(credit.flowNo)), cell(credit.productID), cell(Int64(credit.quantity)),
                             cell(credit.amount), cell(credit.status.rawValue), cell(credit.refundedAmount),
                             cell(credit.source.rawValue), cell(credit.environment?.rawValue), cell(credit.createdAt)])
                    }))
            </section>
            <section>
            <h2>Admin actions</h2>
            \(auditTable(caption: "Admin audit rows about this player, its credits and holds (newest \(ConsoleStore.relatedMax))",
                         page.audit))
            </section>
            <section>
            <h2>Events</h2>
            \(table(id: "events", caption: "Every change to the player's wallets as the feed and webhooks tell it (newest \(ConsoleStore.relatedMax))",
                    columns: ["Event", "Time", "Type", "Currency", "Amount", "Balance after", "Held", "Available", "Entry",
                              "Hold", "flowNO"],
                    rows: page.events.map { event in
                        row([cell(String(event.id), class: "event-id"), cell(event.createdAt),
                             cell(event.type.rawValue, class: event.type == .balanceNegative ? "alert" : nil),
                             cell(event.currency), cell(event.amount), cell(event.balanceAfter), cell(event.held),
                             cell(event.available), cell(event.entryID), cell(event.holdID),
                             cell(event.flowNo.map(creditLink) ?? "")])
                    }))
            </section>
            """)
    }

    static func webhooks(_ page: ConsoleStore.WebhooksPage, chrome: Chrome) -> HTML {
        document(title: "Webhooks", chrome: chrome, main: """
            <h1>Webhooks</h1>
            <p>Endpoints are managed with <code>wallet webhooks add|disable|enable</code>. Each receives every event of \
            its types, in order per player, until it answers 2xx.</p>
            \(table(id: "endpoints", caption: "Endpoints; a failing or disabled one is marked",
                    columns: ["Endpoint", "URL", "Events", "State", "Pending", "Oldest undelivered"],
                    rows: page.endpoints.map { endpoint in
                        let state: String
                        if !endpoint.enabled {
                            state = "disabled: \(endpoint.disabledReason ?? "")"
                        } else if let since = endpoint.failingSince {
                            state = "failing since \(since.rfc3339)"
                        } else {
                            state = "delivering"
                        }
                        let failing = !endpoint.enabled || endpoint.failingSince != nil
                        return row([cell(String(endpoint.id), class: "id"), cell(endpoint.url, class: "id"),
                                    cell(endpoint.eventTypes.map { $0.map(\.rawValue).joined(separator: ", ") } ?? "all"),
                                    cell(state, class: failing ? "alert" : nil), cell(Int64(endpoint.pending)),
                                    cell("\(Int(endpoint.oldestUndeliveredSeconds.rounded())) s")],
                                   attributes: failing ? " class=\"failing\" data-endpoint=\"\(endpoint.id)\""
                                                       : " data-endpoint=\"\(endpoint.id)\"")
                    }))
            <section>
            <h2>Retries</h2>
            \(table(id: "deliveries", caption: "The \(ConsoleStore.relatedMax) deliveries tried most recently after a failure (an event taken at the first try leaves no row)",
                    columns: ["Endpoint", "Event", "Player", "Status", "Attempts", "Last attempt", "Last answer"],
                    rows: page.recent.map { delivery in
                        row([cell(String(delivery.endpointID)), cell(String(delivery.eventID)),
                             cell(userLink(delivery.userID)),
                             cell(delivery.status.rawValue, class: delivery.status == .failed ? "alert" : nil),
                             cell(Int64(delivery.attempts)), cell(delivery.lastAttemptAt),
                             cell(delivery.lastStatus.map { String($0) } ?? delivery.lastError)])
                    }))
            </section>
            """)
    }

    static func unclaimed(_ page: ConsoleStore.UnclaimedPage, chrome: Chrome) -> HTML {
        document(title: "Unclaimed purchases", chrome: chrome, main: """
            <h1>Unclaimed purchases</h1>
            <p>\(page.total) verified purchases name no player the wallet knows: the store reported them with no account \
            token, or one the wallet has not issued. Each is credited when the app's call for its flowNO arrives or when \
            its player is issued the token it carries; after a support check, <code>Scripts/admin/claim.sql</code> \
            credits one to a player.</p>
            \(table(id: "unclaimed", caption: "The \(ConsoleStore.relatedMax) oldest; one older than an hour is marked",
                    columns: ["Received", "Store", "flowNO", "Product", "Quantity", "Environment", "Account token"],
                    rows: page.purchases.map { purchase in
                        let late = purchase.receivedAt < Date().addingTimeInterval(-3600)
                        return row([cell(purchase.receivedAt, class: late ? "alert" : nil), cell(purchase.store),
                                    cell(purchase.flowNo, class: "id"), cell(purchase.productID),
                                    cell(Int64(purchase.quantity)), cell(purchase.environment),
                                    cell(purchase.accountToken ?? "none", class: "id")],
                                   attributes: " data-flow-no=\"\(purchase.flowNo)\"")
                    }))
            """)
    }

    /// Which path credited a purchase, from its source and the client that
    /// sent it.
    static func creditPath(source: CreditSource, client: String) -> String {
        switch (source, client) {
        case (.appStoreNotification, "account-tokens"), (.googlePlay, "account-tokens"):
            "claimed when its player was issued the account token it carries"
        case (_, let client) where client.hasPrefix("admin:"):
            "claimed by hand (Scripts/admin/claim.sql, \(client.dropFirst("admin:".count)))"
        case (.appStoreNotification, _):
            "the App Store's own ONE_TIME_CHARGE notification"
        case (.googlePlay, "googleplay-notification"):
            "Google Play's own ONE_TIME_PRODUCT_PURCHASED notification"
        default:
            "the app backend's call"
        }
    }

    private static func entryTable(id: String, caption: String, _ entries: [ConsoleStore.EntryRow]) -> HTML {
        table(id: id, caption: caption,
              columns: ["Entry", "Time", "Currency", "Kind", "Amount", "Balance after", "Reference", "Client", "Details"],
              rows: entries.map { entry in
                  row([cell(String(entry.id), class: "entry-id"), cell(entry.createdAt), cell(entry.currency),
                       cell(entry.kind.rawValue), cell(entry.amount), cell(entry.balanceAfter), cell(entry.reference, class: "id"),
                       cell(entry.client), cell(entry.metadata, class: "json")])
              })
    }

    // MARK: A credit

    static func credit(_ page: ConsoleStore.CreditPage, chrome: Chrome) -> HTML {
        let details: HTML
        if let credit = page.credit {
            let refunded: HTML = credit.refundedAmount.map { "\($0) coins, by \(credit.refundedBy?.rawValue ?? "unknown")" } ?? "no"
            let lines: HTML = page.lines.isEmpty ? "" : """
                <dt>Other lines</dt><dd id="credit-lines">\(page.lines.map { line -> String in
                    "\(line.amount) \(line.currency) (refunded \(line.refundedAmount))"
                }.joined(separator: ", "))</dd>
                """
            details = """
                <dl id="credit">
                <dt>Player</dt><dd>\(userLink(credit.userID))</dd>
                <dt>Product</dt><dd>\(credit.productID) × \(credit.quantity)</dd>
                <dt>Amount</dt><dd>\(credit.amount) \(credit.currency)</dd>
                \(lines)
                <dt>Status</dt><dd>\(credit.status.rawValue)</dd>
                <dt>Refunded</dt><dd>\(refunded)</dd>
                <dt>Verified by</dt><dd>\(credit.source.rawValue)</dd>
                <dt>Credited through</dt><dd>\(creditPath(source: credit.source, client: credit.client))</dd>
                <dt>Environment</dt><dd>\(credit.environment?.rawValue ?? "not reported")</dd>
                <dt>API key</dt><dd>\(credit.client)</dd>
                <dt>Credit entry</dt><dd>\(credit.entryID)</dd>
                <dt>Credited</dt><dd>\(credit.createdAt.rfc3339)</dd>
                <dt>Last changed</dt><dd>\(credit.updatedAt.rfc3339)</dd>
                </dl>
                """
        } else {
            let refused: HTML = page.refundState == .refund
                ? "<p>Apple refunded this flowNO before it was credited, so a credit of it is refused as <code>revoked</code>.</p>"
                : "<p>Apple has told of this flowNO, but no credit of it was asked for.</p>"
            details = """
                <dl id="credit"><dt>Status</dt><dd>never credited</dd></dl>
                \(refused)
                """
        }
        return document(title: "Credit \(page.flowNo)", chrome: chrome, main: """
            <h1>Credit <span class="id">\(page.flowNo)</span></h1>
            \(details)
            <section>
            <h2>Refunds and reversals</h2>
            \(entryTable(id: "refunds", caption: "Refund and refund-reversal entries, oldest first", page.refunds))
            </section>
            <section>
            <h2>App Store notifications</h2>
            \(table(id: "notifications", caption: "Every App Store notification about this flowNO, by signed date",
                    columns: ["Notification", "Type", "Subtype", "Environment", "Signed", "Received", "Outcome", "Entry"],
                    rows: page.notifications.map { notification in
                        row([cell(notification.notificationUUID, class: "id"), cell(notification.type),
                             cell(notification.subtype), cell(notification.environment), cell(notification.signedAt),
                             cell(notification.receivedAt), cell(notification.outcome.rawValue), cell(notification.entryID)])
                    }))
            </section>
            <section>
            <h2>Google Play</h2>
            \(table(id: "google-voids", caption: "Voids Google reported for this purchase; the refunds converge on them",
                    columns: ["Voided", "Refund", "Quantity", "Arrived by", "Recorded"],
                    rows: page.googleVoids.map { void in
                        row([cell(void.voidedAt), cell(void.refund.name), cell(void.voidedQuantity.map(Int64.init)),
                             cell(void.source.rawValue), cell(void.recordedAt)])
                    }))
            \(table(id: "google-notifications", caption: "Real-time developer notifications about this purchase",
                    columns: ["Message", "Kind", "Event", "Received", "Outcome", "Entry"],
                    rows: page.googleNotifications.map { notification in
                        row([cell(notification.messageID, class: "id"), cell(notification.kind.rawValue),
                             cell(notification.eventTime), cell(notification.receivedAt), cell(notification.outcome.rawValue),
                             cell(notification.entryID)])
                    }))
            </section>
            <section>
            <h2>Calls owed to the store</h2>
            \(table(id: "outbox", caption: "Calls owed to the store for this flowNO: consumption answers, consumes",
                    columns: ["Call", "Status", "Attempts", "Last error", "Sent"],
                    rows: page.outbox.map { request in
                        row([cell(request.kind.rawValue), cell(request.status.rawValue),
                             cell(Int64(request.attempts)), cell(request.lastError), cell(request.sentAt)])
                    }))
            </section>
            <section>
            <h2>Admin actions</h2>
            \(auditTable(caption: "Admin audit rows about this flowNO", page.audit))
            </section>
            """)
    }

    // MARK: Audit and keys

    static func audit(_ rows: [ConsoleStore.AuditRow], beforeID: Int64?, chrome: Chrome) -> HTML {
        let page = rows.prefix(ConsoleStore.pageSize)
        var paging: [HTML] = []
        if beforeID != nil { paging.append("<a href=\"/admin/audit\">Newest rows</a>") }
        if rows.count > ConsoleStore.pageSize, let last = page.last {
            paging.append("<a id=\"next-page\" rel=\"next\" href=\"/admin/audit?before=\(last.id)\">Older rows</a>")
        }
        return document(title: "Audit", chrome: chrome, main: """
            <h1>Admin audit log</h1>
            <p>Every refund, grant, revoke, catalog change and hold release made by the admin scripts, and every key \
            revoked here. Refunds and grants are made with the scripts in <code>Scripts/admin/</code>.</p>
            \(auditTable(caption: beforeID == nil ? "Newest first" : "Older rows, newest first", Array(page)))
            <nav class="paging" aria-label="Audit pages">\(HTML(joining: paging.interleaved(with: " ")))</nav>
            """)
    }

    private static func auditTable(caption: String, _ rows: [ConsoleStore.AuditRow]) -> HTML {
        table(id: "audit", caption: caption,
              columns: ["Row", "Time", "Action", "Operator", "Database user", "Reason", "Arguments", "Outcome", "Entries"],
              rows: rows.map { audit in
                  row([cell(audit.id), cell(audit.createdAt), cell(audit.action.rawValue), cell(audit.operator),
                       cell(audit.databaseUser), cell(audit.reason), cell(audit.arguments, class: "json"),
                       cell(audit.outcome), cell(audit.entryIDs.map(String.init).joined(separator: ", "))])
              })
    }

    static func keys(_ keys: [APIKeyInfo], message: String?, chrome: Chrome) -> HTML {
        let notice: HTML = message.map { "<p class=\"notice\" role=\"status\">\($0)</p>" } ?? ""
        return document(title: "API keys", chrome: chrome, main: """
            <h1>API keys</h1>
            <p>Keys are made with <code>wallet keys create</code>; their secrets are shown once and never stored.</p>
            \(notice)
            \(table(id: "keys", caption: "Live keys first, then revoked ones",
                    columns: ["Name", "Scopes", "Created", "Last used", "Revoked", "Action"],
                    rows: keys.map { key in
                        let action: HTML = key.revokedAt == nil
                            ? "<a class=\"revoke\" href=\"/admin/keys/\(Forms.percentEncoded(key.name))/revoke\" aria-label=\"Revoke key \(key.name)\">Revoke</a>"
                            : ""
                        return row([cell(key.name), cell(key.scopes.map(\.rawValue).joined(separator: ", ")),
                                    cell(key.createdAt), cell(key.lastUsedAt?.rfc3339 ?? "never"),
                                    cell(key.revokedAt, class: "revoked"), cell(action)],
                                   attributes: " data-key=\"\(key.name)\"")
                    }))
            """)
    }

    static func confirmRevoke(_ name: String, isOwnKey: Bool, chrome: Chrome) -> HTML {
        let own: HTML = isOwnKey ? "<p class=\"alert\">This is the key you signed in with: you will be signed out.</p>" : ""
        return document(title: "Revoke key \(name)", chrome: chrome, main: """
            <h1>Revoke key <span class="id">\(name)</span>?</h1>
            <p>Every service instance refuses the key within seconds, and console sessions signed in with it end at \
            once. This cannot be undone: make a new key with <code>wallet keys create</code> instead.</p>
            \(own)
            <form method="post" action="/admin/keys/\(Forms.percentEncoded(name))/revoke">
            <input type="hidden" name="csrf" value="\(chrome.csrfToken)">
            <button type="submit" class="danger">Revoke key</button> <a href="/admin/keys">Cancel</a>
            </form>
            """)
    }

    // MARK: Pieces

    static func userLink(_ userID: String) -> HTML {
        "<a class=\"id\" href=\"/admin/users/\(Forms.percentEncoded(userID))\">\(userID)</a>"
    }

    static func creditLink(_ flowNo: String) -> HTML {
        "<a class=\"id\" href=\"/admin/credits/\(Forms.percentEncoded(flowNo))\">\(flowNo)</a>"
    }

    static func row(_ cells: [HTML], attributes: HTML = "") -> HTML {
        "<tr\(attributes)>\(cells)</tr>"
    }

    static func cell(_ text: String?, class cssClass: String? = nil) -> HTML {
        cssClass.map { "<td class=\"\($0)\">\(text)</td>" } ?? "<td>\(text)</td>"
    }

    /// A time, as every page writes one (`Date.rfc3339`); empty for none.
    static func cell(_ date: Date?, class cssClass: String? = nil) -> HTML {
        cell(date?.rfc3339, class: cssClass)
    }

    static func cell(_ number: Int64?) -> HTML {
        "<td class=\"number\">\(number.map(String.init))</td>"
    }

    static func cell(_ html: HTML) -> HTML {
        "<td>\(html)</td>"
    }

    /// A table with a caption and column headers; `rows` are whole `<tr>`s.
    static func table(id: String, caption: String, columns: [String], rows: [HTML]) -> HTML {
        let body: HTML = rows.isEmpty
            ? "<tr class=\"empty\"><td colspan=\"\(columns.count)\">None</td></tr>"
            : HTML(joining: rows)
        return """
            <div class="scroll"><table id="\(id)">
            <caption>\(caption)</caption>
            <thead><tr>\(columns.map { "<th scope=\"col\">\($0)</th>" as HTML })</tr></thead>
            <tbody>\(body)</tbody>
            </table></div>
            """
    }
}

private extension Array where Element == HTML {
    func interleaved(with separator: HTML) -> [HTML] {
        enumerated().flatMap { $0.offset == 0 ? [$0.element] : [separator, $0.element] }
    }
}
