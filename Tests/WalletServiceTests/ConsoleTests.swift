import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import TestSupport
import WalletCore
@testable import ServiceConsole
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// The support console's sessions and forms, through the real server: who
/// gets in, for how long, and what a forged or stale request gets.
@Suite(.timeLimit(.minutes(2)))
struct ConsoleTests {
    /// A signed-in browser: its cookie and the CSRF token its pages carry.
    struct Browser {
        var cookie: String
        var csrf: String
    }

    static func signIn(_ service: TestService, key: String) throws -> HTTPTestResponse {
        try service.request("POST", "/admin/login", headers: [("Content-Type", "application/x-www-form-urlencoded")],
                            body: "api_key=" + Forms.percentEncoded(key))
    }

    static func browser(_ service: TestService, key: String) throws -> Browser {
        let response = try signIn(service, key: key)
        try #require(response.status == 303)
        let cookie = try #require(response.header("Set-Cookie")?.split(separator: ";").first.map(String.init))
        let page = try service.request("GET", "/admin/keys", headers: [("Cookie", cookie)])
        try #require(page.status == 200)
        return Browser(cookie: cookie, csrf: try #require(csrfToken(in: page.text)))
    }

    static func csrfToken(in html: String) -> String? {
        guard let range = html.range(of: #"name="csrf" value="([^"]+)""#, options: .regularExpression) else { return nil }
        return String(html[range].dropFirst(#"name="csrf" value=""#.count).dropLast())
    }

    static func get(_ service: TestService, _ path: String, _ browser: Browser?) throws -> HTTPTestResponse {
        try service.request("GET", path, headers: browser.map { [("Cookie", $0.cookie)] } ?? [])
    }

    static func post(_ service: TestService, _ path: String, _ browser: Browser, form: String) throws -> HTTPTestResponse {
        try service.request("POST", path, headers: [("Cookie", browser.cookie),
                                                     ("Content-Type", "application/x-www-form-urlencoded")], body: form)
    }

    static func expectSignInRedirect(_ response: HTTPTestResponse, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.status == 303, sourceLocation: sourceLocation)
        #expect(response.header("Location") == "/admin/login", sourceLocation: sourceLocation)
    }

    static let pages = ["/admin", "/admin?days=7", "/admin?days=90", "/admin/users/alice", "/admin/credits/flow-1",
                        "/admin/audit", "/admin/keys", "/admin/keys/game-server/revoke"]

    @Test func everyPageWantsASessionAndAnAdminKeyMakesOne() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "alice", flowNo: "flow-1").status == 201)
        for path in Self.pages {
            Self.expectSignInRedirect(try Self.get(service, path, nil))
        }
        let login = try Self.get(service, "/admin/login", nil)
        #expect(login.status == 200)
        #expect(login.header("Content-Type") == "text/html; charset=utf-8")
        #expect(login.text.contains(#"<label for="api-key">API key</label>"#))

        let signedIn = try Self.signIn(service, key: service.adminKey)
        #expect(signedIn.status == 303)
        #expect(signedIn.header("Location") == "/admin")
        let cookie = try #require(signedIn.header("Set-Cookie"))
        let attributes = Set(cookie.split(separator: ";").dropFirst().map { $0.trimmingCharacters(in: .whitespaces) })
        #expect(attributes == ["Path=/admin", "Max-Age=3600", "HttpOnly", "SameSite=Strict"], "no Secure on loopback")
        // The session's random id and its signature, 32 bytes each in base64url.
        let value = cookie.split(separator: ";")[0].dropFirst("wallet_admin_session=".count)
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.map(\.count) == [43, 43])
        let sessionID = String(parts[0])
        // Only the id's hash is stored.
        #expect(try service.count("SELECT count(*) FROM wallet.admin_sessions WHERE id_hash = sha256('\(sessionID)')") == 1)

        let browser = Browser(cookie: String(cookie.split(separator: ";")[0]), csrf: "")
        for path in Self.pages {
            let page = try Self.get(service, path, browser)
            #expect(page.status == 200, "\(path)")
            #expect(page.header("Content-Type") == "text/html; charset=utf-8")
            #expect(page.header("Content-Security-Policy") == "default-src 'self'; frame-ancestors 'none'")
            #expect(page.header("X-Content-Type-Options") == "nosniff")
            #expect(page.header("Referrer-Policy") == "no-referrer")
            #expect(page.text.contains(#"<label for="search">Player or flowNO</label>"#), "\(path)")
        }
    }

    @Test func aWrongKeyOrOneWithoutTheAdminScopeGetsTheFormAgainAndNoSession() throws {
        let service = try TestService()
        defer { service.stop() }
        for (key, status, message) in [("wk_not-a-key", 401, "That API key is not valid."),
                                       (service.appBackendKey, 403, "has neither the console nor the admin scope"),
                                       ("", 401, "Enter an API key.")] {
            let response = try Self.signIn(service, key: key)
            #expect(response.status == status)
            #expect(response.header("Set-Cookie") == nil)
            #expect(response.text.contains(#"<p class="error" role="alert">"#))
            #expect(response.text.contains(message))
            #expect(response.text.contains(#"<input id="api-key" name="api_key""#))
            #expect(response.header("Content-Security-Policy") == "default-src 'self'; frame-ancestors 'none'")
        }
        #expect(try service.count("SELECT count(*) FROM wallet.admin_sessions") == 0)
    }

    /// Support agents get `console` keys: the console's pages and key
    /// revocation, and nothing that moves coins.
    @Test func aConsoleKeySignsInReadsEveryPageAndRevokesAKey() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "alice", flowNo: "flow-1").status == 201)
        let setup = try Connection(options: service.database)
        let support = try APIKeys.create(name: "support-agent", scopes: try APIKeys.parseScopes("console"), on: setup)
        _ = try APIKeys.create(name: "spare", scopes: [.read], on: setup)
        setup.close()
        let browser = try Self.browser(service, key: support)
        for path in Self.pages {
            let page = try Self.get(service, path, browser)
            #expect(page.status == 200, "\(path)")
            #expect(page.text.contains("<span>Signed in as support-agent</span>"), "\(path)")
        }
        #expect(try Self.get(service, "/admin/users/alice", browser).text.contains("flow-1"))
        let revoked = try Self.post(service, "/admin/keys/spare/revoke", browser, form: "csrf=\(browser.csrf)")
        #expect(revoked.status == 303)
        #expect(revoked.header("Location") == "/admin/keys?revoked=spare")
        #expect(try service.count("SELECT count(*) FROM wallet.api_keys WHERE name = 'spare' AND revoked_at IS NOT NULL") == 1)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.admin_audit
            WHERE action = 'revoke_key' AND operator = 'support-agent' AND arguments ->> 'key' = 'spare'
            """) == 1)
        // Admin keys still sign in, for operators.
        #expect(try Self.signIn(service, key: service.adminKey).status == 303)
    }

    /// Every `/v1` route that takes a key refuses one that has only the
    /// console scope, whatever it asks.
    @Test func aConsoleOnlyKeyIsForbiddenOnEveryV1Route() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "alice", flowNo: "flow-1").status == 201)
        let setup = try Connection(options: service.database)
        let support = try APIKeys.create(name: "support-agent", scopes: try APIKeys.parseScopes("console"), on: setup)
        let supportReader = try APIKeys.create(name: "support-reader", scopes: try APIKeys.parseScopes("console,read"),
                                               on: setup)
        setup.close()
        let hold = try service.request("POST", "/v1/holds", key: service.adminKey,
                                       json: #"{"user_id":"alice","amount":10}"#, headers: [("Idempotency-Key", "h-1")])
        #expect(hold.status == 201)
        let bodies = ["/v1/credits": #"{"user_id":"alice","flow_no":"flow-2","product_id":"guodong600"}"#,
                      "/v1/debits": #"{"user_id":"alice","amount":1}"#, "/v1/holds": #"{"user_id":"alice","amount":1}"#]
        var gated: Set<String> = []
        for route in service.application.router.routes where route.pattern.hasPrefix("/v1/") {
            let path = route.pattern.replacingOccurrences(of: "{user_id}", with: "alice")
                .replacingOccurrences(of: "{flow_no}", with: "flow-1").replacingOccurrences(of: "{id}", with: "1")
            // The routes that take a key ask for one; the stores' pushes carry their own credentials.
            guard try service.request(route.method, path).status == 401 else { continue }
            gated.insert("\(route.method) \(route.pattern)")
            let json = route.method == "POST" ? bodies[route.pattern] ?? "{}" : nil
            let refused = try service.request(route.method, path, key: support, json: json,
                                              headers: [("Idempotency-Key", "console-\(gated.count)")])
            #expect(refused.status == 403, "\(route.method) \(path): \(refused.text)")
            #expect(try refused.json()["code"] == "forbidden", "\(route.method) \(path)")
        }
        #expect(gated == ["POST /v1/credits", "POST /v1/debits", "GET /v1/wallets/{user_id}",
                          "GET /v1/wallets/{user_id}/entries", "GET /v1/credits/{flow_no}", "POST /v1/holds",
                          "POST /v1/holds/{id}/capture", "POST /v1/holds/{id}/release", "GET /v1/holds/{id}",
                          "GET /v1/events", "GET /v1/wallets/{user_id}/account-tokens", "POST /v1/grants",
                          "GET /v1/wallets/{user_id}/credits", "GET /v1/wallets/{user_id}/holds"])
        // Nothing moved: one credit, one hold, still held.
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.holds WHERE status = 'held'") == 1)
        // Scopes add up: with read as well, the reads answer.
        #expect(try service.request("GET", "/v1/wallets/alice", key: supportReader).status == 200)
        #expect(try service.debit(userID: "alice", amount: 1, idempotencyKey: "r-1", key: supportReader).status == 403)
    }

    /// The first start of a development database prints a console key
    /// beside the two API keys, and it signs in.
    @Test func theDevelopmentKeysIncludeAConsoleKey() throws {
        let database = try TestDatabase.make()
        let connection = try Connection(options: database)
        defer { connection.close() }
        try connection.execute("BEGIN")
        let keys = try #require(try APIKeys.createDevelopmentKeysIfNone(on: connection))
        try connection.execute("COMMIT")
        #expect(try APIKeys.list(on: connection).map { "\($0.name) \($0.scopes.map(\.rawValue))" }
                == ["app-backend [\"credit\", \"read\"]", "game-server [\"debit\", \"grant\", \"read\"]",
                    "support-console [\"console\"]"])
        func signsIn(_ secret: String) throws -> Bool {
            if case .signedIn = try ConsoleStore.signIn(keyHash: APIKeys.hash(secret), minutes: 5, on: connection,
                                                  writing: { try $0(connection) }) {
                return true
            }
            return false
        }
        // Read by its label, so that this test also builds, and fails, where the key is missing.
        let console = Mirror(reflecting: keys).children.first { $0.label == "console" }?.value as? String
        #expect(try console.map(signsIn) == true, "the development console key signs in")
        #expect(try !signsIn(keys.appBackend))
        #expect(try !signsIn(keys.gameServer))
    }

    @Test func aSessionEndsWhenItExpires() throws {
        let service = try TestService { $0.adminSessionMinutes = 5 }
        defer { service.stop() }
        let browser = try Self.browser(service, key: service.adminKey)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.admin_sessions WHERE expires_at - created_at = INTERVAL '5 minutes'
            """) == 1)
        #expect(try Self.get(service, "/admin", browser).status == 200)
        // Five minutes pass.
        #expect(try service.count("""
            WITH moved AS (UPDATE wallet.admin_sessions SET created_at = created_at - INTERVAL '5 minutes 1 second',
                                  expires_at = expires_at - INTERVAL '5 minutes 1 second' RETURNING 1)
            SELECT count(*) FROM moved
            """) == 1)
        let expired = try Self.get(service, "/admin", browser)
        Self.expectSignInRedirect(expired)
        #expect(expired.header("Set-Cookie")?.contains("Max-Age=0") == true, "the stale cookie is cleared")
    }

    @Test func revokingTheKeyEndsItsSessionsAtOnce() throws {
        let service = try TestService()
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        let spare = try APIKeys.create(name: "spare-admin", scopes: [.admin], on: setup)
        let browser = try Self.browser(service, key: spare)
        #expect(try Self.get(service, "/admin/audit", browser).status == 200)
        // `wallet keys revoke`, outside the console.
        try APIKeys.revoke(name: "spare-admin", on: setup)
        setup.close()
        Self.expectSignInRedirect(try Self.get(service, "/admin/audit", browser))
        // And a key that loses the admin scope no longer signs in.
        let response = try Self.signIn(service, key: spare)
        #expect(response.status == 401)
    }

    @Test func theConsoleRevokesAKeyAfterConfirmingWithTheSessionsToken() throws {
        let service = try TestService()
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        let spare = try APIKeys.create(name: "spare-admin", scopes: [.admin], on: setup)
        setup.close()
        let operatorBrowser = try Self.browser(service, key: service.adminKey)
        let spareBrowser = try Self.browser(service, key: spare)

        let confirm = try Self.get(service, "/admin/keys/spare-admin/revoke", operatorBrowser)
        #expect(confirm.status == 200)
        #expect(confirm.text.contains(#"<form method="post" action="/admin/keys/spare-admin/revoke">"#))
        #expect(confirm.text.contains("Revoke key"))
        // A GET changes nothing.
        #expect(try service.count("SELECT count(*) FROM wallet.api_keys WHERE name = 'spare-admin' AND revoked_at IS NULL") == 1)

        // Without the token, or with another session's, nothing happens.
        for form in ["", "csrf=", "csrf=\(spareBrowser.csrf)", "csrf=\(operatorBrowser.csrf)x"] {
            let refused = try Self.post(service, "/admin/keys/spare-admin/revoke", operatorBrowser, form: form)
            #expect(refused.status == 403, "\(form)")
            #expect(refused.text.contains("Form expired"))
        }
        #expect(try service.count("SELECT count(*) FROM wallet.api_keys WHERE name = 'spare-admin' AND revoked_at IS NULL") == 1)
        #expect(try Self.get(service, "/admin", spareBrowser).status == 200)

        let revoked = try Self.post(service, "/admin/keys/spare-admin/revoke", operatorBrowser,
                                    form: "csrf=\(operatorBrowser.csrf)")
        #expect(revoked.status == 303)
        #expect(revoked.header("Location") == "/admin/keys?revoked=spare-admin")
        #expect(try service.count("SELECT count(*) FROM wallet.api_keys WHERE name = 'spare-admin' AND revoked_at IS NOT NULL") == 1)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.admin_audit
            WHERE action = 'revoke_key' AND operator = 'admin' AND arguments ->> 'key' = 'spare-admin'
            """) == 1)
        Self.expectSignInRedirect(try Self.get(service, "/admin", spareBrowser))
        let keys = try Self.get(service, "/admin/keys?revoked=spare-admin", operatorBrowser)
        #expect(keys.text.contains("Key spare-admin is revoked."))
        #expect(!(try Self.get(service, "/admin/keys?revoked=game-server", operatorBrowser).text.contains("is revoked.")),
                "a live key is never said to be revoked")
        #expect(!keys.text.contains(#"href="/admin/keys/spare-admin/revoke""#))
        // Twice is a 404, not a second audit row.
        let again = try Self.post(service, "/admin/keys/spare-admin/revoke", operatorBrowser, form: "csrf=\(operatorBrowser.csrf)")
        #expect(again.status == 404)
        #expect(try service.count("SELECT count(*) FROM wallet.admin_audit WHERE action = 'revoke_key'") == 1)
    }

    @Test func aTamperedOrForeignCookieIsNoSession() throws {
        let service = try TestService()
        defer { service.stop() }
        let browser = try Self.browser(service, key: service.adminKey)
        let other = try Self.browser(service, key: service.adminKey)
        let id = browser.cookie.dropFirst("wallet_admin_session=".count)
        let otherID = other.cookie.dropFirst("wallet_admin_session=".count)
        let flipped = String(id.dropLast()) + (id.last == "A" ? "B" : "A")
        // One session's id with another's signature, and a session id alone
        // (as cookies were before they were signed).
        let swapped = String(id.prefix(43)) + String(otherID.dropFirst(43))
        for cookie in ["wallet_admin_session=\(flipped)", "wallet_admin_session=", "wallet_admin_session=\(id)\(id)",
                       "other=\(id)", "wallet_admin_session=\(String(repeating: "A", count: 43))",
                       "wallet_admin_session=\(swapped)", "wallet_admin_session=\(id.prefix(43))"] {
            Self.expectSignInRedirect(try Self.get(service, "/admin", Browser(cookie: cookie, csrf: "")))
        }
        // A cookie the console did not issue is cleared.
        let stale = try Self.get(service, "/admin", Browser(cookie: "wallet_admin_session=\(id.prefix(43))", csrf: ""))
        #expect(stale.header("Set-Cookie")?.contains("Max-Age=0") == true)
        #expect(try Self.get(service, "/admin", browser).status == 200, "the real one still works")
    }

    @Test func everyInstanceOnTheDatabaseAcceptsTheOthersCookies() throws {
        let service = try TestService()
        defer { service.stop() }
        let second = try TestService.unstarted(database: service.database)
        try second.start()
        defer { second.shutdown() }
        try #require(second.waitUntilReady(timeoutSeconds: 30))
        // Signed in on the first, read on the second, signed out on the second.
        let browser = try Self.browser(service, key: service.adminKey)
        let page = try TestService.request(port: second.port, "GET", "/admin/keys", key: nil, json: nil,
                                           headers: [("Cookie", browser.cookie)])
        #expect(page.status == 200)
        let out = try TestService.request(port: second.port, "POST", "/admin/logout", key: nil, json: nil,
                                          headers: [("Cookie", browser.cookie),
                                                    ("Content-Type", "application/x-www-form-urlencoded")],
                                          body: "csrf=\(browser.csrf)")
        Self.expectSignInRedirect(out)
        Self.expectSignInRedirect(try Self.get(service, "/admin", browser))
        // One key, made by whichever instance came first.
        #expect(try service.count("SELECT count(*) FROM wallet.console_cookie_keys") == 1)
    }

    @Test func signingOutNeedsTheTokenAndEndsTheSession() throws {
        let service = try TestService()
        defer { service.stop() }
        let browser = try Self.browser(service, key: service.adminKey)
        let other = try Self.browser(service, key: service.adminKey)
        for form in ["", "csrf=\(other.csrf)"] {
            #expect(try Self.post(service, "/admin/logout", browser, form: form).status == 403)
        }
        #expect(try Self.get(service, "/admin", browser).status == 200)
        let out = try Self.post(service, "/admin/logout", browser, form: "csrf=\(browser.csrf)")
        Self.expectSignInRedirect(out)
        #expect(out.header("Set-Cookie")?.contains("Max-Age=0") == true)
        Self.expectSignInRedirect(try Self.get(service, "/admin", browser))
        #expect(try Self.get(service, "/admin", other).status == 200, "only that session ended")
    }

    @Test func failedSignInsFromOneAddressAreLimited() throws {
        let service = try TestService()
        defer { service.stop() }
        for _ in 0..<10 { #expect(try Self.signIn(service, key: "wk_guess").status == 401) }
        let limited = try Self.signIn(service, key: "wk_guess")
        #expect(limited.status == 429)
        let retryAfter = try #require(limited.header("Retry-After").flatMap(Int.init))
        #expect((1...6).contains(retryAfter))
        #expect(limited.text.contains(#"<p class="error" role="alert">Too many sign-in attempts: "#))
        #expect(limited.text.contains(#"<input id="api-key" name="api_key""#), "the form again")
        #expect(try service.count("SELECT count(*) FROM wallet.admin_sessions") == 0)
    }

    @Test func theLimiterRefillsAndStaysBounded() {
        let clock = ManualClock(movesWithRealTime: false)
        let limiter = SignInLimiter(burst: 2, refillSeconds: 0.2, addressesMax: 3, clock: clock)
        limiter.failed("a")
        #expect(limiter.refusal(for: "a") == nil)
        limiter.failed("a")
        #expect(limiter.refusal(for: "a") != nil)
        clock.advance(by: .milliseconds(199))
        #expect(limiter.refusal(for: "a") != nil, "not refilled yet")
        clock.advance(by: .milliseconds(1))
        #expect(limiter.refusal(for: "a") == nil, "refilled")
        // Past the bound, the address seen least recently is forgotten ("a",
        // then "b"); the others keep their limits.
        for address in ["b", "c", "d", "e"] {
            limiter.failed(address)
            limiter.failed(address)
        }
        #expect(limiter.refusal(for: "e") != nil)
        #expect(limiter.refusal(for: "b") == nil)
        #expect(limiter.refusal(for: "c") != nil)
        #expect(limiter.refusal(for: "d") != nil)
    }

    /// As many other addresses as the limiter keeps, each failing once, do
    /// not lift the limit of an address that keeps trying meanwhile: the
    /// addresses nobody has seen for longest make room, not the victim.
    @Test func aFloodOfAddressesDoesNotLiftTheLimitOfOneStillTrying() {
        // An hour a token, so no bucket refills while the test runs.
        let limiter = SignInLimiter(burst: 10, refillSeconds: 3_600, clock: ManualClock(movesWithRealTime: false))
        let victim = "203.0.113.7"
        for _ in 0..<10 { limiter.failed(victim) }
        #expect(limiter.refusal(for: victim) != nil)
        var liftedAfter: Int?
        for index in 0..<10_000 {
            limiter.failed("198.51.\(index / 256).\(index % 256)")
            // The victim tries again after every hundred others, and is refused.
            if index % 100 == 99, liftedAfter == nil, limiter.refusal(for: victim) == nil { liftedAfter = index + 1 }
        }
        #expect(liftedAfter == nil, "the victim's limit was lifted after \(liftedAfter ?? 0) other addresses")
        #expect(limiter.refusal(for: victim) != nil)
    }

    @Test func searchFindsPlayersAndFlowNOsAndSaysWhenNothingMatches() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "bob:42", flowNo: "2000000123").status == 201)
        let browser = try Self.browser(service, key: service.adminKey)
        let user = try Self.get(service, "/admin/search?q=bob%3A42", browser)
        #expect(user.status == 303)
        #expect(user.header("Location") == "/admin/users/bob%3A42")
        #expect(try Self.get(service, "/admin/users/bob%3A42", browser).text.contains("2000000123"))
        let credit = try Self.get(service, "/admin/search?q=+2000000123+", browser)
        #expect(credit.header("Location") == "/admin/credits/2000000123")
        for query in ["nobody", "%3Cscript%3E", ""] {
            let missing = try Self.get(service, "/admin/search?q=\(query)", browser)
            #expect(missing.status == 404)
            #expect(missing.text.contains("<h1>Nothing found</h1>"))
            #expect(!missing.text.contains("<script>"))
        }
        #expect(try Self.get(service, "/admin/users/nobody", browser).status == 404)
        #expect(try Self.get(service, "/admin/credits/nothing", browser).status == 404)
        #expect(try Self.get(service, "/admin/users/bob%3A42?before=x", browser).status == 422)
    }

    @Test func aFlowNOAppleRefundedBeforeItsCreditHasAPage() throws {
        let service = try TestService()
        defer { service.stop() }
        // What a REFUND notification for a flowNO never credited leaves behind.
        #expect(try service.count("""
            WITH n AS (
                INSERT INTO wallet.appstore_notifications
                    (notification_uuid, notification_type, flow_no, environment, signed_date, outcome, payload)
                VALUES ('n-early', 'REFUND', '3000000777', 'Production', now(), 'revoked', '{}') RETURNING 1
            ), s AS (
                INSERT INTO wallet.appstore_refund_states (flow_no, notification_type, signed_date, notification_uuid)
                VALUES ('3000000777', 'REFUND', now(), 'n-early') RETURNING 1
            )
            SELECT (SELECT count(*) FROM n) + (SELECT count(*) FROM s)
            """) == 2)
        let browser = try Self.browser(service, key: service.adminKey)
        #expect(try Self.get(service, "/admin/search?q=3000000777", browser).header("Location") == "/admin/credits/3000000777")
        let page = try Self.get(service, "/admin/credits/3000000777", browser)
        #expect(page.status == 200)
        #expect(page.text.contains("<dd>never credited</dd>"))
        #expect(page.text.contains("refused as <code>revoked</code>"))
        #expect(page.text.contains("<td class=\"id\">n-early</td><td>REFUND</td>"))
    }

    @Test func ledgerTextIsEscapedEverywhere() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "mallory", flowNo: "flow-m").status == 201)
        let hostile = #"{"user_id":"mallory","amount":5,"reason":"<script>alert(1)</script>","metadata":{"n":"<img src=x onerror=alert(1)>"}}"#
        #expect(try service.request("POST", "/v1/debits", key: service.gameServerKey, json: hostile,
                                    headers: [("Idempotency-Key", "x\"'<b>")]).status == 201)
        let browser = try Self.browser(service, key: service.adminKey)
        let page = try Self.get(service, "/admin/users/mallory", browser).text
        #expect(!page.contains("<script"))
        #expect(!page.contains("<img"))
        #expect(!page.contains("<b>"))
        #expect(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(page.contains("&lt;img src=x onerror=alert(1)&gt;"))
        #expect(page.contains("x&quot;&#39;&lt;b&gt;"))
    }

    @Test func theOverviewsNumbersAreTheLedgers() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "carol", flowNo: "flow-c1", productID: "guodong1200").status == 201)
        #expect(try service.credit(userID: "carol", flowNo: "flow-c2").status == 201)
        #expect(try service.debit(userID: "carol", amount: 250, idempotencyKey: "d1").status == 201)
        let browser = try Self.browser(service, key: service.adminKey)
        let page = try Self.get(service, "/admin?days=7", browser).text
        let today = try service.count("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')::int")
        let day = String(today / 10000) + "-" + String(format: "%02d-%02d", today / 100 % 100, today % 100)
        #expect(page.contains(#"<tr><th scope="row">\#(day)</th><td>1800</td><td>250</td><td>0</td></tr>"#))
        #expect(page.components(separatedBy: #"<tr><th scope="row">"#).count - 1 == 7, "one row per day")
        #expect(page.contains(#"role="img" aria-label="Coins per day over the last 7 days"#))
        #expect(page.contains("1,800 credited, 250 debited, 0 refunded in total"))
        #expect(page.contains("<dt>Purchases</dt><dd>2</dd>"))
    }

    @Test func refusedNotificationsAreKeptNewestTenThousandOfEachKind() throws {
        let service = try TestService()
        defer { service.stop() }
        // The first refusal of a reason is kept, without the client's request id.
        let response = try service.request("POST", "/v1/appstore/notifications", json: #"{"signedPayload":"not.a.jws"}"#,
                                           headers: [("X-Request-Id", "client-chosen-1")])
        #expect(response.status == 422)
        #expect(try service.count("""
            SELECT count(*) FROM wallet.appstore_refused_notifications
            WHERE reason = 'malformed' AND NOT apple_signed AND refusals = 1 AND request_id IS NULL
            """) == 1)
        // Rows as the service keeps them: one standing for 40 junk refusals,
        // and two refusals of tokens Apple signed.
        #expect(try service.count("""
            SELECT count(*) FROM (SELECT wallet.record_refused_notification('bad_signature', false, 40)
                                  UNION ALL SELECT wallet.record_refused_notification('bundle_mismatch', true, 1)
                                  UNION ALL SELECT wallet.record_refused_notification('bundle_mismatch', true, 1)) s
            """) == 3)
        let browser = try Self.browser(service, key: service.adminKey)
        let overview = try Self.get(service, "/admin", browser).text
        for (reason, count) in [("bad_signature", 40), ("bundle_mismatch", 2), ("malformed", 1)] {
            #expect(overview.contains(#"<tr class="refused"><th scope="row">refused: \#(reason)</th><td>\#(count)</td></tr>"#),
                    "\(reason)")
        }
        #expect(overview.contains("43 notifications were refused in this window."))
        #expect(overview.contains(#"<th scope="col">Signed by Apple</th><th scope="col">Refusals</th>"#))
        #expect(overview.contains(#"<td>bad_signature</td><td>no</td><td class="number">40</td>"#))
        #expect(overview.components(separatedBy: #"<td>bundle_mismatch</td><td>yes</td><td class="number">1</td>"#).count - 1 == 2)
        #expect(!overview.contains("client-chosen-1"))

        // Junk fills its own 10,000 rows and pushes out no Apple-signed refusal.
        #expect(try service.count("""
            SELECT count(*) FROM (SELECT wallet.record_refused_notification('bad_signature', false, 1)
                                  FROM generate_series(1, 10005) n) s
            """) == 10_005)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_refused_notifications WHERE NOT apple_signed") == 10_000)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_refused_notifications WHERE apple_signed") == 2)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_refused_notifications WHERE reason = 'malformed'") == 0,
                "the oldest junk went first")
        let flooded = try Self.get(service, "/admin", browser).text
        #expect(flooded.components(separatedBy: #"<td>bundle_mismatch</td><td>yes</td><td class="number">1</td>"#).count - 1 == 2,
                "the newest list keeps room for refusals Apple signed")
        // And the other way round.
        #expect(try service.count("""
            SELECT count(*) FROM (SELECT wallet.record_refused_notification('environment_not_allowed', true, 1)
                                  FROM generate_series(1, 10001) n) s
            """) == 10_001)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_refused_notifications WHERE apple_signed") == 10_000)
        #expect(try service.count("SELECT count(*) FROM wallet.appstore_refused_notifications WHERE NOT apple_signed") == 10_000)
    }

    @Test func turnedOffTheConsoleIsNotThere() throws {
        let service = try TestService { $0.adminConsole = false }
        defer { service.stop() }
        #expect(!service.application.router.routes.contains { $0.pattern.hasPrefix("/admin") })
        for path in ["/admin", "/admin/login"] {
            let response = try service.request("GET", path)
            #expect(response.status == 404)
            #expect(response.header("Content-Type") == "application/problem+json")
        }
        #expect(try Configuration.load(environment: ["WALLET_ADMIN_CONSOLE": "false"]).adminConsole == false)
        #expect(try Configuration.load(environment: [:]).adminConsole)
        #expect(try Configuration.load(environment: [:]).adminSessionMinutes == 60)
        #expect(try Configuration.load(environment: ["WALLET_ADMIN_SESSION_MINUTES": "15"]).adminSessionMinutes == 15)
        for (name, value) in [("WALLET_ADMIN_CONSOLE", "yes"), ("WALLET_ADMIN_SESSION_MINUTES", "0")] {
            #expect(throws: Configuration.ConfigurationError.self) { try Configuration.load(environment: [name: value]) }
        }
    }
}
