import Foundation
import HTTPServer
import JSON
import Postgres
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport
@testable import WalletStore

/// Scoped API keys: each caller may do its own job only.
@Suite(.timeLimit(.minutes(2)))
struct AuthTests {
    @Test func requestsWithoutAValidKeyAre401WithAChallenge() throws {
        let service = try TestService()
        defer { service.stop() }
        for key in [nil, "wk_not-a-real-key", "not even the prefix", String(repeating: "x", count: 600)] {
            let response = try service.request("GET", "/v1/wallets/alice", key: key)
            #expect(response.status == 401)
            #expect(response.header("WWW-Authenticate") == "Bearer")
            #expect(response.header("Content-Type") == "application/problem+json")
            #expect(try response.json()["code"] == "unauthorized")
        }
        let basic = try service.request("GET", "/v1/wallets/alice",
                                        headers: [("Authorization", "Basic \(service.appBackendKey)")])
        #expect(basic.status == 401)
    }

    @Test func aKeyWithoutTheScopeIs403() throws {
        let service = try TestService()
        defer { service.stop() }
        // A leaked game-server key cannot mint coins.
        let mint = try service.credit(userID: "alice", flowNo: "scoped-1", key: service.gameServerKey)
        #expect(mint.status == 403)
        #expect(try mint.json()["code"] == "forbidden")
        // And the app backend cannot spend.
        let spend = try service.debit(userID: "alice", amount: 1, idempotencyKey: "k", key: service.appBackendKey)
        #expect(spend.status == 403)
        // An admin key may do everything.
        #expect(try service.credit(userID: "alice", flowNo: "scoped-2", key: service.adminKey).status == 201)
        #expect(try service.debit(userID: "alice", amount: 1, idempotencyKey: "k", key: service.adminKey).status == 201)
        #expect(try service.request("GET", "/v1/wallets/alice", key: service.adminKey).status == 200)
        #expect(try service.balance(of: "alice") == 599)
    }

    @Test func theClientNameScopesKeysAndIsRecordedOnEntries() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "bob", flowNo: "named-1", productID: "guodong5000").status == 201)
        // The same idempotency key from two clients is two debits.
        #expect(try service.debit(userID: "bob", amount: 10, idempotencyKey: "shared").status == 201)
        #expect(try service.debit(userID: "bob", amount: 10, idempotencyKey: "shared", key: service.adminKey).status == 201)
        #expect(try service.balance(of: "bob") == 4980)
        let connection = try Connection(options: service.database)
        let clients = try connection.query("SELECT client FROM wallet.entries WHERE user_id = 'bob' ORDER BY id")
            .map { $0[0] ?? "" }
        #expect(clients == ["app-backend", "game-server", "admin"])
    }

    /// Five seconds on the service's clock after a revocation, the key is
    /// refused: the key cache keeps an entry less long than that.
    @Test func revocationTakesEffectWithinFiveSeconds() throws {
        let clock = ManualClock()
        let service = try TestService(clock: clock)
        defer { service.stop() }
        #expect(try service.request("GET", "/v1/wallets/carol", key: service.gameServerKey).status == 200)
        let connection = try Connection(options: service.database)
        try APIKeys.revoke(name: "game-server", on: connection)
        clock.advance(by: .seconds(5))
        #expect(try service.request("GET", "/v1/wallets/carol", key: service.gameServerKey).status == 401)
    }

    @Test func keysAreStoredOnlyAsHashes() throws {
        let service = try TestService()
        defer { service.stop() }
        _ = try service.request("GET", "/v1/wallets/dave", key: service.appBackendKey)
        // A dump of the whole database holds no issued secret.
        let dump = try runProcess(["pg_dump", "--no-owner", TestService.conninfo(service.database)])
        #expect(dump.status == 0)
        #expect(dump.output.contains("api_keys"))
        for secret in [service.appBackendKey, service.gameServerKey, service.adminKey] {
            #expect(secret.hasPrefix("wk_"))
            #expect(secret.count >= 3 + 43)
            #expect(!dump.output.contains(secret))
            #expect(!dump.output.contains(String(secret.dropFirst(3))))
        }
    }

    @Test func secretsComeFromTheCSPRNGAndAreDistinct() {
        let secrets = (0..<200).map { _ in APIKeys.makeSecret() }
        #expect(Set(secrets).count == 200)
        #expect(secrets.allSatisfy { $0.hasPrefix("wk_") && $0.utf8.count == 46 })
    }
}
