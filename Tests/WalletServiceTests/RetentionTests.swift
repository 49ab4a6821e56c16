import Foundation
import Postgres
import Testing
import TestSupport
import WalletService
import ServiceTestSupport

/// Idempotency records are kept for WALLET_IDEMPOTENCY_RETENTION_HOURS, then
/// purged by the service in the background: once the schema is up, then
/// every purge interval, on the service's clock.
@Suite(.timeLimit(.minutes(2)))
struct RetentionTests {
    @Test func expiredKeysArePurgedAndTheirKeysFreeAgain() throws {
        let database = try TestDatabase.make()
        let connection = try Connection(options: database)
        try connection.query("SELECT * FROM wallet.grant_coins('ann', 100, 'coin', 'setup', 'tests')")
        // Two outcomes stored 25 hours ago, and one just now.
        try connection.query("""
            SELECT * FROM wallet.debit_many(ARRAY[
                ROW('game-server', 'old-1', '\\x01', 'ann', 'coin', 1, NULL, NULL, 'r1'),
                ROW('game-server', 'old-2', '\\x02', 'ann', 'coin', 1, NULL, NULL, 'r2'),
                ROW('game-server', 'fresh', '\\x03', 'ann', 'coin', 1, NULL, NULL, 'r3')]::wallet.debit_request[])
            """)
        try connection.execute("UPDATE wallet.idempotency_keys SET created_at = now() - interval '25 hours' WHERE key LIKE 'old-%'")

        let clock = ManualClock()
        let service = try TestService(database: database, clock: clock) {
            $0.idempotencyRetentionHours = Configuration.idempotencyRetentionHoursMin
            $0.idempotencyPurgeIntervalSeconds = 600
        }
        defer { service.stop() }
        // The first round, then the wait for the next on the clock.
        let purged = try #require(clock.waitUntilWaiting(thread: "wallet-upkeep", seconds: 30), "\(clock.waitsBegunByThread)")
        #expect(try service.count("SELECT count(*) FROM wallet.idempotency_keys") == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.idempotency_keys WHERE key = 'fresh'") == 1)
        // The ledger keeps its entries; the purged key may now be used again.
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE kind = 'debit'") == 3)
        #expect(try service.debit(userID: "ann", amount: 5, idempotencyKey: "old-1").status == 201)
        #expect(try service.debit(userID: "ann", amount: 5, idempotencyKey: "fresh").status == 422)

        // A record that ages past the retention meanwhile goes in the round
        // after the interval.
        try connection.execute("UPDATE wallet.idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'fresh'")
        clock.advance(by: .seconds(600))
        #expect(clock.waitUntilWaiting(thread: "wallet-upkeep", afterWaits: purged, seconds: 30) != nil)
        #expect(try service.count("SELECT count(*) FROM wallet.idempotency_keys") == 1)
        #expect(try service.count("SELECT count(*) FROM wallet.idempotency_keys WHERE key = 'old-1'") == 1)
        #expect(try service.violations() == [])
    }
}
