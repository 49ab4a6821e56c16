import Foundation
import HTTPServer
import ServiceTestSupport
import Testing
import TestSupport
@testable import WalletService

/// Behind a TLS proxy: whose forwarded headers are believed
/// (WALLET_TRUSTED_PROXIES), and a console sign-in that says why it cannot
/// work over plain HTTP with a Secure cookie (WALLET_ADMIN_COOKIE_SECURE),
/// through the real server.
@Suite(.timeLimit(.minutes(2)))
struct TrustedProxyTests {
    static func signIn(_ service: TestService, key: String, headers: [(name: String, value: String)]) throws
        -> HTTPTestResponse {
        try service.request("POST", "/admin/login",
                            headers: [("Content-Type", "application/x-www-form-urlencoded")] + headers,
                            body: "api_key=" + Forms.percentEncoded(key))
    }

    @Test func forwardedHeadersCountOnlyFromTrustedPeers() throws {
        let proxies = try #require(TrustedProxies("10.0.0.0/8, 192.168.1.7"))
        func client(_ peer: String, _ headers: [(name: String, value: String)]) -> (String?, Bool) {
            let request = Request(method: "GET", path: "/", headers: Headers(headers), requestID: "r", remoteAddress: peer)
            let seen = proxies.client(of: request)
            return (seen.address, seen.https)
        }
        let forwarded: [(name: String, value: String)] = [("X-Forwarded-For", "203.0.113.9, 10.1.2.3"),
                                                          ("X-Forwarded-Proto", "https")]
        #expect(client("10.0.0.1", forwarded) == ("203.0.113.9", true))
        #expect(client("192.168.1.7", forwarded) == ("203.0.113.9", true))
        // From anyone else the headers are the client's own claim.
        #expect(client("192.168.1.8", forwarded) == ("192.168.1.8", false))
        #expect(client("203.0.113.50", forwarded) == ("203.0.113.50", false))
        // A spoofed first hop sent by the client stays behind the real one.
        #expect(client("10.0.0.1", [("X-Forwarded-For", "1.2.3.4, 198.51.100.2")]) == ("198.51.100.2", false))
        #expect(client("10.0.0.1", [("X-Forwarded-For", "garbage, 198.51.100.2")]) == ("198.51.100.2", false))
        #expect(client("10.0.0.1", [("X-Forwarded-For", "198.51.100.2, garbage")]) == ("10.0.0.1", false))
        #expect(client("10.0.0.1", []) == ("10.0.0.1", false))
        for bad in ["", "10.0.0.0/33", "10.0.0/8", "ten", "::1/128", "10.0.0.0/-1", "10.0.0.0/8/8", "1.2.3.4,x"] {
            #expect(TrustedProxies(bad) == nil, "\(bad)")
        }
        #expect(TrustedProxies("0.0.0.0/0")?.contains("8.8.8.8") == true)
    }

    @Test func aSecureCookieOverPlainHTTPIsExplainedAndAProxyOverHTTPSSignsIn() throws {
        let service = try TestService {
            $0.adminCookieSecure = true
            $0.trustedProxies = TrustedProxies("127.0.0.1/32")!
        }
        defer { service.stop() }
        let host = ("Host", "wallet.example.com")
        // Plain HTTP to a name a browser does not count as secure: the form says why, and no session is made.
        let form = try service.request("GET", "/admin/login", headers: [host])
        #expect(form.text.contains("came over plain HTTP"), "\(form.text)")
        let plain = try Self.signIn(service, key: service.adminKey, headers: [host])
        #expect(plain.status == 400)
        #expect(plain.text.contains("WALLET_ADMIN_COOKIE_SECURE=false"))
        #expect(plain.header("Set-Cookie") == nil)
        #expect(try service.count("SELECT count(*) FROM wallet.admin_sessions") == 0)
        // Through the TLS proxy: a Secure cookie.
        let proxied = try Self.signIn(service, key: service.adminKey,
                                      headers: [host, ("X-Forwarded-Proto", "https"), ("X-Forwarded-For", "203.0.113.9")])
        #expect(proxied.status == 303, "\(proxied.text)")
        #expect(proxied.header("Set-Cookie")?.hasSuffix("; Secure") == true)
        // localhost is a secure context for browsers, so a sign-in there works too.
        #expect(try Self.signIn(service, key: service.adminKey, headers: [("Host", "localhost:8080")]).status == 303)
        #expect(!(try service.request("GET", "/admin/login", headers: [("Host", "localhost")]).text
            .contains("came over plain HTTP")))
    }

    /// Behind the proxy, failed sign-ins are limited per client, not per
    /// proxy: one guessing client does not lock the others out.
    @Test func signInLimitsFollowTheForwardedClient() throws {
        let service = try TestService { $0.trustedProxies = TrustedProxies("127.0.0.1/32")! }
        defer { service.stop() }
        let guesser = [("X-Forwarded-For", "203.0.113.9")]
        for _ in 0..<10 { #expect(try Self.signIn(service, key: "wk_guess", headers: guesser).status == 401) }
        #expect(try Self.signIn(service, key: "wk_guess", headers: guesser).status == 429)
        #expect(try Self.signIn(service, key: service.adminKey, headers: [("X-Forwarded-For", "203.0.113.10")]).status
            == 303)
    }

    @Test func settingsAreChecked() throws {
        #expect(throws: Configuration.ConfigurationError.self) {
            try Configuration.load(environment: ["WALLET_TRUSTED_PROXIES": "everyone"])
        }
        #expect(throws: Configuration.ConfigurationError.self) {
            try Configuration.load(environment: ["WALLET_ADMIN_COOKIE_SECURE": "yes"])
        }
        #expect(try Configuration.load(environment: [:]).consoleCookieSecure == false, "loopback by default")
        #expect(try Configuration.load(environment: ["WALLET_LISTEN": "0.0.0.0:8080"]).consoleCookieSecure)
        #expect(try Configuration.load(environment: ["WALLET_LISTEN": "0.0.0.0:8080", "WALLET_ADMIN_COOKIE_SECURE": "false"])
            .consoleCookieSecure == false)
    }
}
