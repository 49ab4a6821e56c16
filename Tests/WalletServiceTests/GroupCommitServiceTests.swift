import Foundation
import Locking
import Postgres
import Testing
import TestSupport
import ServiceTestSupport
import WalletService
@testable import WalletStore

/// Group commit as the service runs it: writers of one service meeting on
/// a unique index, and the commit setting of the service's own connections.
@Suite(.timeLimit(.minutes(3)))
struct GroupCommitServiceTests {
    @Test func writersMeetingOnAUniqueIndexResolveIt() throws {
        // Users that land on different writers of four.
        let writerCount = 4
        var users: [String] = []
        var writersTaken = Set<UInt64>()
        var candidate = 0
        while users.count < writerCount {
            let user = "w\(candidate)"
            if writersTaken.insert(GroupCommit.stableHash(user) % UInt64(writerCount)).inserted { users.append(user) }
            candidate += 1
        }
        let spread = users
        let service = try TestService { $0.writers = writerCount; $0.batchOperationsMax = 64 }
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        for user in spread {
            try connection.query("SELECT * FROM wallet.grant_coins(\(user), 100000, 'coin', 'setup', 'tests')")
        }
        // Each flowNO and each key is sent for every user at once, so every
        // writer races every other on the same unique entries.
        let credits = Locked<[String: [Int]]>([:])
        let debits = Locked<[String: [Int]]>([:])
        let finished = runOnThreads(48, timeoutSeconds: 150) { index in
            let user = spread[index % spread.count]
            for round in 0..<12 {
                let flowNo = "race-\(round)-\(index / spread.count)"
                let status = (try? service.credit(userID: user, flowNo: flowNo).status) ?? -1
                credits.withLock { $0[flowNo, default: []].append(status) }
                let key = "race-key-\(round)-\(index / spread.count)"
                let debit = (try? service.debit(userID: user, amount: 1, idempotencyKey: key).status) ?? -1
                debits.withLock { $0[key, default: []].append(debit) }
            }
        }
        #expect(finished)
        for (flowNo, statuses) in credits.withLock({ $0 }) {
            #expect(statuses.filter { $0 == 201 }.count == 1, "\(flowNo): \(statuses)")
            #expect(statuses.allSatisfy { $0 == 201 || $0 == 409 }, "\(flowNo): \(statuses)")
        }
        for (key, statuses) in debits.withLock({ $0 }) {
            #expect(statuses.filter { $0 == 201 }.count == 1, "\(key): \(statuses)")
            #expect(statuses.allSatisfy { $0 == 201 || $0 == 422 }, "\(key): \(statuses)")
        }
        let creditCount = credits.withLock { $0.count }
        let debitCount = debits.withLock { $0.count }
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE kind = 'credit'") == creditCount)
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE kind = 'debit'") == debitCount)
        #expect(try service.violations() == [])
        let metrics = try service.request("GET", "/metrics").text
        print("unique-index races: " + metrics.split(separator: "\n").filter { $0.hasPrefix("wallet_db_errors_total") }
            .joined(separator: ", "))
    }

    @Test func theServiceCommitsSynchronouslyWhateverTheDatabaseSays() throws {
        let database = try TestDatabase.make()
        let admin = try Connection(options: database)
        let name = try admin.query("SELECT current_database()")[0].decode(String.self, at: 0)
        try admin.execute("ALTER DATABASE \(unsafeSQL: name) SET synchronous_commit = off")
        // A session that does not set it gets the database's default ...
        let psql = try runProcess(["psql", "-X", "-A", "-t", TestService.conninfo(database), "-c", "SHOW synchronous_commit"])
        #expect(psql.output.trimmingCharacters(in: .whitespacesAndNewlines) == "off")
        // ... the service's own connections, reads and writers, say on.
        let service = try TestService(database: database)
        defer { service.stop() }
        for pool in [service.application.ledger.pool, service.application.ledger.writerPool] {
            let setting = try pool.withConnection { try $0.query("SHOW synchronous_commit")[0].decode(String.self, at: 0) }
            #expect(setting == "on")
        }
    }
}
