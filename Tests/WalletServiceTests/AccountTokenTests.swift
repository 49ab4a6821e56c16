import AppStore
import Foundation
import GooglePlay
import JSON
import Locking
import Postgres
import ServiceTestSupport
import Testing
import TestSupport
import WalletCore
import WalletService

/// GET /v1/wallets/{user_id}/account-tokens through the real server, and the
/// tokens a wallet records when it is made, by the service or in SQL.
@Suite(.timeLimit(.minutes(2)))
struct AccountTokenTests {
    static let namespace = "8c7d3f1e-2b4a-4c5d-9e6f-7a8b9c0d1e2f"

    static func service(namespace: String? = Self.namespace) throws -> TestService {
        try TestService { $0.apple.accountTokenNamespace = namespace }
    }

    /// The tokens recorded for `userID`, by store.
    static func recorded(_ userID: String, on connection: Connection) throws -> [String: String] {
        var tokens: [String: String] = [:]
        for row in try connection.query("SELECT store, token FROM wallet.account_tokens WHERE user_id = \(userID)") {
            tokens[try row.decode(String.self, at: 0)] = try row.decode(String.self, at: 1)
        }
        return tokens
    }

    static func expected(_ userID: String, namespace: String? = Self.namespace) -> [String: String] {
        var tokens = ["google": PurchasePolicy.accountID(forUserID: userID)]
        tokens["apple"] = CreditPolicy(accountTokenNamespace: namespace).expectedAccountToken(userID: userID)
        return tokens
    }

    @Test func theWalletIssuesTheTokensItChecksAndRecordsThemOnce() throws {
        let service = try Self.service()
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        defer { setup.close() }
        let userID = "player:42@studio.example"
        let answer = try service.request("GET", "/v1/wallets/\(userID)/account-tokens", key: service.appBackendKey)
        #expect(answer.status == 200)
        let expected = Self.expected(userID)
        #expect(try answer.json() == [
            "user_id": .string(userID), "apple_app_account_token": .string(expected["apple"] ?? ""),
            "google_obfuscated_account_id": .string(expected["google"] ?? ""),
        ])
        #expect(try Self.recorded(userID, on: setup) == expected)
        // Asking again, from many threads at once, answers the same and records nothing more.
        let answers = Locked<[Int]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { _ in
            let again = try? service.request("GET", "/v1/wallets/\(userID)/account-tokens", key: service.appBackendKey)
            answers.withLock { $0.append(again?.status ?? 0) }
        }
        #expect(answers.withLock { $0 } == Array(repeating: 200, count: 16))
        #expect(try service.count("SELECT count(*) FROM wallet.account_tokens WHERE user_id = '\(userID)'") == 2)
        // Asking makes no wallet.
        #expect(try service.count("SELECT count(*) FROM wallet.wallets WHERE user_id = '\(userID)'") == 0)
    }

    @Test func onlyTheCreditScopeAsksAndABadPlayerIsRefused() throws {
        let service = try Self.service()
        defer { service.stop() }
        let forbidden = try service.request("GET", "/v1/wallets/ann/account-tokens", key: service.gameServerKey)
        #expect(try forbidden.status == 403 && forbidden.json()["code"] == .string("forbidden"))
        #expect(try service.request("GET", "/v1/wallets/ann/account-tokens").status == 401)
        let refused = try service.request("GET", "/v1/wallets/a%20b/account-tokens", key: service.appBackendKey)
        #expect(try refused.status == 422 && refused.json()["code"] == .string("validation_failed"))
        #expect(refused.header("Content-Type") == "application/problem+json")
        #expect(try service.count("SELECT count(*) FROM wallet.account_tokens") == 0)
    }

    @Test func aWalletMadeByACreditOrInSQLRecordsTheSameTokensAsTheService() throws {
        let service = try Self.service()
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        defer { setup.close() }
        #expect(try service.credit(userID: "ann", flowNo: "2000000001").status == 201)
        #expect(try Self.recorded("ann", on: setup) == Self.expected("ann"))
        // A wallet an admin script makes (wallet.adjust_balance inserts it so).
        try setup.query("INSERT INTO wallet.wallets (user_id, currency) VALUES ('carol.b-7', 'coin')")
        #expect(try Self.recorded("carol.b-7", on: setup) == Self.expected("carol.b-7"))
        // Another currency's wallet of the same player finds them there.
        try setup.query("SELECT wallet.upsert_currency('gem', 'Gems')")
        try setup.query("INSERT INTO wallet.wallets (user_id, currency) VALUES ('ann', 'gem')")
        #expect(try service.count("SELECT count(*) FROM wallet.account_tokens WHERE user_id = 'ann'") == 2)
        // Issuing them later records nothing new.
        #expect(try service.request("GET", "/v1/wallets/ann/account-tokens", key: service.appBackendKey).status == 200)
        #expect(try service.count("SELECT count(*) FROM wallet.account_tokens") == 4)
    }

    @Test func withoutANamespaceOnlyGoogleHasAToken() throws {
        let service = try Self.service(namespace: nil)
        defer { service.stop() }
        let setup = try Connection(options: service.database)
        defer { setup.close() }
        let answer = try service.request("GET", "/v1/wallets/dan/account-tokens", key: service.appBackendKey)
        #expect(try answer.status == 200 && answer.json()["apple_app_account_token"] == .null)
        #expect(try Self.recorded("dan", on: setup) == ["google": PurchasePolicy.accountID(forUserID: "dan")])
        try setup.query("INSERT INTO wallet.wallets (user_id, currency) VALUES ('eve', 'coin')")
        #expect(try Self.recorded("eve", on: setup) == ["google": PurchasePolicy.accountID(forUserID: "eve")])
    }
}
