import Crypto
import Foundation
package import HTTPServer
package import Locking
package import Logging
package import ServiceSupport
import WalletCore
package import WalletStore

/// The support console at `/admin`: server-rendered pages for looking up a
/// player's coins, a credit's story and the economy at a glance. Read-only
/// but for revoking an API key.
///
/// - Sign-in takes an API key with the `console` scope (support agents: it
///   opens no `/v1` route) or the `admin` scope (operators) and makes a
///   session in PostgreSQL; the cookie carries only the session's random id,
///   signed (`SessionCookies`). A cookie whose signature fails is sent to
///   the sign-in form on the server thread, with no database work; one that
///   passes has its session and key checked on the page's connection, so a
///   revoked key's sessions end at once.
/// - Every page's database work runs on the console's own few threads,
///   never on a server thread, by the request's deadline.
/// - Forms that change state (sign-out, revoking a key) carry the session's
///   CSRF token; the cookie is `SameSite=Strict` besides.
package struct AdminConsole: Sendable {
    static let cookieName = "wallet_admin_session"
    static let securityHeaders: [(name: String, value: String)] = [
        ("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'"),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
    ]

    let ledger: Ledger
    let readiness: Readiness
    let work: BlockingWork
    let sessionMinutes: Int
    /// `Secure` on the cookie (WALLET_ADMIN_COOKIE_SECURE; by default, unless
    /// the service listens on loopback).
    let secureCookie: Bool
    /// Whose X-Forwarded-For and X-Forwarded-Proto are believed.
    let trustedProxies: TrustedProxies
    let requestTimeoutSeconds: Int
    let signIns: SignInLimiter
    let cookies: SessionCookies
    let logger: Logger

    package init(ledger: Ledger, readiness: Readiness, work: BlockingWork, cookies: SessionCookies, sessionMinutes: Int,
                 cookieSecure: Bool, trustedProxies: TrustedProxies, requestTimeoutSeconds: Int, clock: any WorkClock,
                 logger: Logger) {
        self.ledger = ledger
        self.readiness = readiness
        self.work = work
        self.cookies = cookies
        self.sessionMinutes = sessionMinutes
        secureCookie = cookieSecure
        self.trustedProxies = trustedProxies
        self.requestTimeoutSeconds = requestTimeoutSeconds
        signIns = SignInLimiter(clock: clock)
        self.logger = logger
    }

    package func register(on router: Router) {
        router.add("GET", "/admin/login", sync: { request in
            page(ConsolePages.login(message: cookieWouldBeDropped(request) ? Self.plainHTTPMessage : nil))
        })
        router.add("POST", "/admin/login", postLogin)
        router.add("POST", "/admin/logout", signedIn(postLogout))
        router.add("GET", "/admin", signedIn(overview))
        router.add("GET", "/admin/search", signedIn(search))
        router.add("GET", "/admin/users/{user_id}", signedIn(user))
        router.add("GET", "/admin/credits/{flow_no}", signedIn(credit))
        router.add("GET", "/admin/audit", signedIn(audit))
        router.add("GET", "/admin/keys", signedIn(keys))
        router.add("GET", "/admin/webhooks", signedIn(webhooks))
        router.add("GET", "/admin/unclaimed", signedIn(unclaimed))
        router.add("GET", "/admin/keys/{name}/revoke", signedIn(confirmRevoke))
        router.add("POST", "/admin/keys/{name}/revoke", signedIn(revoke))
        router.add("GET", "/admin/static/console.css", sync: { _ in
            var response = Response(status: 200, headers: [("Content-Type", "text/css; charset=utf-8")], body: Self.stylesheet)
            response.headers += Self.securityHeaders.filter { $0.name != "Cache-Control" } + [("Cache-Control", "max-age=300")]
            return response
        })
    }

    static let stylesheet: [UInt8] = Array(EmbeddedFiles.named("console.css") ?? Data())

    // MARK: Sign-in

    /// Said on the sign-in form when the browser would drop the session
    /// cookie: it is `Secure` and the page came over plain HTTP.
    static let plainHTTPMessage = """
        This page came over plain HTTP, and the console's session cookie is Secure, so your browser would not keep \
        it. Open the console over HTTPS (through a TLS proxy listed in WALLET_TRUSTED_PROXIES that sends \
        X-Forwarded-Proto: https), or set WALLET_ADMIN_COOKIE_SECURE=false on a private network
        """

    /// Whether a `Secure` cookie set in answer to `request` would be
    /// dropped: it came over plain HTTP (as a trusted proxy tells), from a
    /// host a browser does not count as secure (localhost is).
    func cookieWouldBeDropped(_ request: Request) -> Bool {
        guard secureCookie, !trustedProxies.client(of: request).https else { return false }
        let host = (request.headers["host"] ?? "").lowercased()
        let name = host.hasPrefix("[") ? String(host.prefix { $0 != "]" }) + "]"
            : String(host.prefix { $0 != ":" })
        return !(name == "localhost" || name.hasPrefix("127.") || name == "[::1]")
    }

    func postLogin(_ request: Request, _ responder: Responder) {
        let address = trustedProxies.client(of: request).address ?? "unknown"
        if let wait = signIns.refusal(for: address) {
            return responder.send(loginRefused(ConsoleError.signInRateLimited(retryAfterSeconds: wait)))
        }
        if cookieWouldBeDropped(request) {
            return responder.send(page(ConsolePages.login(message: Self.plainHTTPMessage), status: 400))
        }
        guard let fields = Forms.fields(request.body) else {
            return responder.send(loginRefused(ConsoleError.malformedForm))
        }
        let secret = fields["api_key"]?.trimmingCharacters(in: .whitespaces) ?? ""
        guard !secret.isEmpty, secret.utf8.count <= 512 else {
            signIns.failed(address)
            return responder.send(page(ConsolePages.login(message: "Enter an API key."), status: 401))
        }
        offServerThread(responder, chrome: nil) { queries in
            switch try queries.signIn(keySecret: secret, minutes: sessionMinutes) {
            case .signedIn(let sessionID, let session):
                // The key is loaded before the schema counts as ready, which
                // this work waited for.
                guard let value = cookies.value(for: sessionID) else { throw WalletError.databaseUnavailable }
                logger.info("console sign-in", ["key.name": session.keyName, "http.client": address])
                return redirect("/admin", headers: [("Set-Cookie", cookie(value, maxAge: sessionMinutes * 60))])
            case .unknownKey:
                signIns.failed(address)
                return page(ConsolePages.login(message: "That API key is not valid."), status: 401)
            case .notConsole(let name):
                signIns.failed(address)
                logger.warning("console sign-in without the console or admin scope",
                               ["key.name": name, "http.client": address])
                return page(ConsolePages.login(message: "That API key has neither the console nor the admin scope."),
                            status: 403)
            }
        }
    }

    /// The sign-in form again, saying why, with the problem's status and headers.
    private func loginRefused(_ error: ConsoleError) -> Response {
        let problem = error.problem
        return page(ConsolePages.login(message: problem.title + ": " + problem.detail + "."), status: problem.status,
                    headers: problem.headers)
    }

    func postLogout(_ request: Request, _ context: Context) throws -> Response {
        try requireCSRF(request, context)
        try context.queries.signOut(context.sessionID)
        return redirect("/admin/login", headers: [("Set-Cookie", cookie("", maxAge: 0))])
    }

    // MARK: Pages

    func overview(_ request: Request, _ context: Context) throws -> Response {
        let days = request.query["days"].flatMap(Int.init).flatMap { ConsoleStore.windows.contains($0) ? $0 : nil } ?? 30
        return page(ConsolePages.overview(try context.queries.overview(days: days), days: days, chrome: context.chrome))
    }

    func search(_ request: Request, _ context: Context) throws -> Response {
        let text = (request.query["q"] ?? "").trimmingCharacters(in: .whitespaces)
        // Anything that could be neither is not looked up.
        let found = UserID(text) != nil || FlowNumber(text) != nil ? try context.queries.search(text) : nil
        switch (found?.isUser ?? false, found?.isCredit ?? false) {
        case (true, false): return redirect("/admin/users/\(Forms.percentEncoded(text))")
        case (false, true): return redirect("/admin/credits/\(Forms.percentEncoded(text))")
        case (true, true): return page(ConsolePages.searchChoice(text, chrome: context.chrome))
        case (false, false): return page(ConsolePages.nothingFound(text, chrome: context.chrome), status: 404)
        }
    }

    func user(_ request: Request, _ context: Context) throws -> Response {
        let text = request.pathParameters["user_id"] ?? ""
        let beforeID = try before(request)
        guard let userID = UserID(text), let found = try context.queries.user(userID, beforeEntryID: beforeID) else {
            throw WalletError.notFound(detail: "no player has the user id \(text)")
        }
        return page(ConsolePages.user(found, beforeID: beforeID, chrome: context.chrome))
    }

    func credit(_ request: Request, _ context: Context) throws -> Response {
        let text = request.pathParameters["flow_no"] ?? ""
        guard let flowNo = FlowNumber(text), let found = try context.queries.credit(flowNo) else {
            throw WalletError.notFound(detail: "no credit or refund has the flowNO \(text)")
        }
        return page(ConsolePages.credit(found, chrome: context.chrome))
    }

    func audit(_ request: Request, _ context: Context) throws -> Response {
        let beforeID = try before(request)
        return page(ConsolePages.audit(try context.queries.audit(beforeID: beforeID), beforeID: beforeID,
                                       chrome: context.chrome))
    }

    func keys(_ request: Request, _ context: Context) throws -> Response {
        let keys = try context.queries.keys()
        // Said only of a key the table shows revoked: a link cannot make the page claim it.
        let message = request.query["revoked"].flatMap { name in
            keys.contains { $0.name == name && $0.revokedAt != nil } ? "Key \(name) is revoked." : nil
        }
        return page(ConsolePages.keys(keys, message: message, chrome: context.chrome))
    }

    func webhooks(_ request: Request, _ context: Context) throws -> Response {
        page(ConsolePages.webhooks(try context.queries.webhooks(), chrome: context.chrome))
    }

    func unclaimed(_ request: Request, _ context: Context) throws -> Response {
        page(ConsolePages.unclaimed(try context.queries.unclaimed(), chrome: context.chrome))
    }

    func confirmRevoke(_ request: Request, _ context: Context) throws -> Response {
        let name = request.pathParameters["name"] ?? ""
        guard try context.queries.keys().contains(where: { $0.name == name && $0.revokedAt == nil }) else {
            throw WalletError.notFound(detail: "no live key is named \(name)")
        }
        return page(ConsolePages.confirmRevoke(name, isOwnKey: name == context.session.keyName, chrome: context.chrome))
    }

    func revoke(_ request: Request, _ context: Context) throws -> Response {
        try requireCSRF(request, context)
        let name = request.pathParameters["name"] ?? ""
        guard try context.queries.revokeKey(name: name, operator: context.session.keyName) else {
            throw WalletError.notFound(detail: "no live key is named \(name)")
        }
        logger.info("API key revoked in the console", ["key.name": name, "operator": context.session.keyName])
        if name == context.session.keyName {
            return redirect("/admin/login", headers: [("Set-Cookie", cookie("", maxAge: 0))])
        }
        return redirect("/admin/keys?revoked=\(Forms.percentEncoded(name))")
    }

    // MARK: Sessions

    /// A signed-in request: its session, and the connection its page reads on.
    struct Context {
        var sessionID: String
        var session: ConsoleStore.Session
        var queries: ConsoleQueries
        var chrome: ConsolePages.Chrome { .init(keyName: session.keyName, csrfToken: session.csrfToken) }
    }

    /// A handler for a page behind sign-in: without a live session the
    /// answer is a redirect to the sign-in form.
    func signedIn(_ render: @escaping @Sendable (Request, Context) throws -> Response) -> Handler {
        { request, responder in
            guard let value = Forms.cookie(Self.cookieName, in: request.headers), !value.isEmpty else {
                return responder.send(redirect("/admin/login"))
            }
            guard cookies.isReady else {
                // Not a reason to drop the cookie: the database is not up yet.
                return responder.send(problemPage(WalletError.databaseUnavailable, chrome: nil))
            }
            guard let sessionID = cookies.sessionID(from: value) else {
                // Not issued by this service (or issued before cookies were
                // signed): decided here, on the server thread, with no
                // database work, however many such requests come.
                return responder.send(redirect("/admin/login", headers: [("Set-Cookie", cookie("", maxAge: 0))]))
            }
            offServerThread(responder, chrome: nil) { queries in
                guard let session = try queries.session(sessionID) else {
                    return redirect("/admin/login", headers: [("Set-Cookie", cookie("", maxAge: 0))])
                }
                let context = Context(sessionID: sessionID, session: session, queries: queries)
                do {
                    return try render(request, context)
                } catch let error as any ProblemConvertible {
                    // The page's own refusals keep the header; database
                    // failures go on to be mapped as every read's are.
                    return problemPage(error, chrome: context.chrome)
                }
            }
        }
    }

    /// Runs `body` with one pooled connection on the console's threads, by
    /// the request's deadline; a full queue answers 503 at once.
    private func offServerThread(_ responder: Responder, chrome: ConsolePages.Chrome?,
                                 _ body: @escaping @Sendable (ConsoleQueries) throws -> Response) {
        guard readiness.isSchemaReady else { return responder.send(problemPage(WalletError.databaseUnavailable, chrome: chrome)) }
        let deadline = ContinuousClock.now + .seconds(requestTimeoutSeconds)
        let queued = work.submit {
            let response: Response
            do {
                guard ContinuousClock.now < deadline else { throw WalletError.overloaded }
                response = try ledger.console(deadline: deadline, body)
            } catch {
                response = problemPage(error, chrome: chrome)
            }
            responder.send(response)
        }
        if !queued { responder.send(problemPage(WalletError.overloaded, chrome: chrome)) }
    }

    private func requireCSRF(_ request: Request, _ context: Context) throws {
        guard let fields = Forms.fields(request.body) else { throw ConsoleError.malformedForm }
        guard let token = fields["csrf"], constantTimeEquals(Array(token.utf8), Array(context.session.csrfToken.utf8)) else {
            throw ConsoleError.csrfTokenInvalid
        }
    }

    private func before(_ request: Request) throws -> Int64? {
        guard let text = request.query["before"] else { return nil }
        guard let id = Int64(text), id > 0 else {
            throw WalletError.validationFailed([FieldError(field: "before", message: "must be a positive row id")])
        }
        return id
    }

    // MARK: Answers

    private func cookie(_ value: String, maxAge: Int) -> String {
        "\(Self.cookieName)=\(value); Path=/admin; Max-Age=\(maxAge); HttpOnly; SameSite=Strict" + (secureCookie ? "; Secure" : "")
    }

    private func page(_ html: HTML, status: Int = 200, headers: [(name: String, value: String)] = []) -> Response {
        Response(status: status, headers: [("Content-Type", "text/html; charset=utf-8")] + Self.securityHeaders + headers,
                 body: Array(html.markup.utf8))
    }

    private func redirect(_ location: String, headers: [(name: String, value: String)] = []) -> Response {
        Response(status: 303, headers: [("Location", location)] + Self.securityHeaders + headers)
    }

    /// An error as a page, with the status and headers (`Retry-After`) its
    /// problem has; the mapping is the API's.
    private func problemPage(_ error: any Error, chrome: ConsolePages.Chrome?) -> Response {
        let (problem, isUnexpected) = Problem.from(error)
        if isUnexpected {
            logger.error("console page failed", ["error.type": String(reflecting: type(of: error)),
                                                 "error.description": String(reflecting: error)])
        }
        return page(ConsolePages.problem(problem, chrome: chrome), status: problem.status, headers: problem.headers)
    }
}

/// Failed sign-ins per client address: a bucket of `burst` attempts that
/// refills one every `refillSeconds`. Only failures take from it; while an
/// address has none left, every sign-in from it waits, good keys included.
/// Behind a proxy every client has the proxy's address, so the bucket is
/// shared.
///
/// At most `addressesMax` buckets are kept. A bucket full again is the same
/// as none and expires; past the bound, the address seen least recently (a
/// refused attempt counts) is forgotten. So a flood of new addresses cannot
/// reset the limit of an address that keeps trying.
///
/// Refills are counted on the service's clock.
final class SignInLimiter: Sendable {
    /// Addresses with failed sign-ins remembered at most.
    static let addressesMax = 10_000

    struct Bucket: Sendable {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    let burst: Double
    let refillSeconds: Double
    let addressesMax: Int
    private let buckets: BoundedCache<String, Bucket>
    private let clock: any WorkClock

    init(burst: Int = 10, refillSeconds: Double = 6, addressesMax: Int = SignInLimiter.addressesMax,
         clock: any WorkClock) {
        self.clock = clock
        let burst = Double(burst)
        self.burst = burst
        self.refillSeconds = refillSeconds
        self.addressesMax = addressesMax
        // A bucket is full again once its missing tokens have refilled.
        buckets = BoundedCache(entriesMax: addressesMax, expires: { bucket in
            bucket.updated + .seconds((burst - bucket.tokens) * refillSeconds)
        })
    }

    /// Seconds to wait when `address` has no attempt left, else nil.
    func refusal(for address: String) -> Int? {
        let now = clock.now
        guard let bucket = buckets.value(forKey: address, now: now) else { return nil }
        let tokens = refilled(bucket, now: now)
        return tokens >= 1 ? nil : Int(((1 - tokens) * refillSeconds).rounded(.up))
    }

    func failed(_ address: String) {
        let now = clock.now
        buckets.update(forKey: address, now: now) { bucket in
            let tokens = bucket.map { refilled($0, now: now) } ?? burst
            bucket = Bucket(tokens: max(0, tokens - 1), updated: now)
        }
    }

    private func refilled(_ bucket: Bucket, now: ContinuousClock.Instant) -> Double {
        let elapsed = now - bucket.updated
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return min(burst, bucket.tokens + seconds / refillSeconds)
    }
}
