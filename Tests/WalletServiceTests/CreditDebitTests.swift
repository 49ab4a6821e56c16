import Foundation
import HTTPServer
import JSON
import Locking
import Postgres
import Synchronization
import Testing
import TestSupport
import ServiceTestSupport

/// The product's promises, through the real server and a real PostgreSQL.
@Suite(.timeLimit(.minutes(3)))
struct CreditDebitTests {
    @Test func firstCreditIs201AndRepliesReplay() throws {
        let service = try TestService()
        defer { service.stop() }
        let first = try service.credit(userID: "alice", flowNo: "2000000100000001")
        #expect(first.status == 201)
        let body = try first.json()
        #expect(body["credit"]?["amount"] == 600)
        #expect(body["credit"]?["status"] == "credited")
        #expect(body["credit"]?["flow_no"] == "2000000100000001")
        #expect(body["balance"]?["balance"] == 600)
        #expect(first.header("Idempotent-Replayed") == nil)

        let replay = try service.credit(userID: "alice", flowNo: "2000000100000001")
        #expect(replay.status == 200)
        #expect(replay.header("Idempotent-Replayed") == "true")
        #expect(try replay.json()["credit"]?["entry_id"] == body["credit"]?["entry_id"])
        #expect(try service.balance(of: "alice") == 600)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 1)
    }

    @Test func aFlowNoBelongsToOneUserProductAndQuantity() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "alice", flowNo: "f-1").status == 201)
        for conflicting in [
            try service.credit(userID: "mallory", flowNo: "f-1"),
            try service.credit(userID: "alice", flowNo: "f-1", productID: "guodong5000"),
            try service.credit(userID: "alice", flowNo: "f-1", quantity: 2),
        ] {
            #expect(conflicting.status == 409)
            #expect(try conflicting.json()["code"] == "flow_no_conflict")
        }
        #expect(try service.balance(of: "alice") == 600)
        #expect(try service.balance(of: "mallory") == 0)
    }

    @Test func amountsComeFromTheCatalogNeverFromTheCaller() throws {
        let service = try TestService()
        defer { service.stop() }
        let claimed = try service.request("POST", "/v1/credits", key: service.appBackendKey, json: """
            {"user_id":"bob","flow_no":"f-2","product_id":"guodong600","amount":999999}
            """)
        #expect(claimed.status == 422)
        #expect(try claimed.json()["code"] == "amount_mismatch")
        let matching = try service.request("POST", "/v1/credits", key: service.appBackendKey, json: """
            {"user_id":"bob","flow_no":"f-3","product_id":"guodong1200","quantity":3,"amount":3600}
            """)
        #expect(matching.status == 201)
        #expect(try service.balance(of: "bob") == 3600)
        let unknown = try service.credit(userID: "bob", flowNo: "f-4", productID: "free-coins")
        #expect(unknown.status == 422)
        #expect(try unknown.json()["code"] == "unknown_product")
        #expect(try service.balance(of: "bob") == 3600)
    }

    @Test func aReplayStillWorksAfterItsProductIsRepricedOrRetired() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "carol", flowNo: "f-5").status == 201)
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.upsert_product('guodong600', 700, 'coin', false, 'test', 'retire')")
        let replay = try service.credit(userID: "carol", flowNo: "f-5")
        #expect(replay.status == 200)
        #expect(try replay.json()["credit"]?["amount"] == 600)
        #expect(try service.credit(userID: "carol", flowNo: "f-6").status == 422)
    }

    @Test func concurrentDuplicateCreditsApplyOncePerFlowNo() throws {
        let service = try TestService()
        defer { service.stop() }
        // 8 flowNOs × 24 submissions each, by 64 threads at once.
        let submissions = (0..<8).flatMap { flow in (0..<24).map { _ in flow } }.shuffled()
        let statuses = Locked<[Int: Int]>([:])
        let next = Atomic<Int>(0)
        let finished = runOnThreads(64, timeoutSeconds: 120) { _ in
            while true {
                let index = next.add(1, ordering: .relaxed).oldValue
                guard index < submissions.count else { return }
                let status = (try? service.credit(userID: "user-\(submissions[index] % 3)",
                                                  flowNo: "dup-\(submissions[index])",
                                                  productID: "guodong1200").status) ?? -1
                statuses.withLock { $0[status, default: 0] += 1 }
            }
        }
        #expect(finished)
        let counts = statuses.withLock { $0 }
        #expect(counts == [201: 8, 200: 184])
        // Users 0, 1 and 2 own flows {0,3,6}, {1,4,7} and {2,5}.
        #expect(try service.balance(of: "user-0") == 3 * 1200)
        #expect(try service.balance(of: "user-1") == 3 * 1200)
        #expect(try service.balance(of: "user-2") == 2 * 1200)
        #expect(try service.count("SELECT count(*) FROM wallet.entries") == 8)
        #expect(try service.violations() == [])
    }

    @Test func concurrentDebitsNeverOverdraw() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('dave', 1000, 'coin', 'test setup', 'tests')")
        let statuses = Locked<[Int: Int]>([:])
        let finished = runOnThreads(200, timeoutSeconds: 120) { index in
            let status = (try? service.debit(userID: "dave", amount: 7, idempotencyKey: "spend-\(index)").status) ?? -1
            statuses.withLock { $0[status, default: 0] += 1 }
        }
        #expect(finished)
        #expect(statuses.withLock { $0 } == [201: 142, 409: 58])
        #expect(try service.balance(of: "dave") == 6)
        let negative = try service.count("SELECT count(*) FROM wallet.entries WHERE balance_after < 0")
        #expect(negative == 0)
        #expect(try service.violations() == [])
    }

    @Test func debitReplaysAreByteForByte() throws {
        let service = try TestService()
        defer { service.stop() }
        #expect(try service.credit(userID: "erin", flowNo: "f-7").status == 201)
        let first = try service.debit(userID: "erin", amount: 100, idempotencyKey: "order-1")
        #expect(first.status == 201)
        #expect(try first.json()["balance"]?["balance"] == 500)
        #expect(try first.json()["debit"]?["amount"] == 100)
        let replay = try service.debit(userID: "erin", amount: 100, idempotencyKey: "order-1")
        #expect(replay.status == 201)
        #expect(replay.body == first.body)
        #expect(replay.header("Idempotent-Replayed") == "true")
        #expect(try service.balance(of: "erin") == 500)

        // The same key for another request is refused and changes nothing.
        let reused = try service.debit(userID: "erin", amount: 101, idempotencyKey: "order-1")
        #expect(reused.status == 422)
        #expect(try reused.json()["code"] == "idempotency_key_reused")
        #expect(try service.balance(of: "erin") == 500)
    }

    @Test func insufficientFundsIsStickyUnderItsKey() throws {
        let service = try TestService()
        defer { service.stop() }
        let refused = try service.debit(userID: "frank", amount: 50, idempotencyKey: "k-1")
        #expect(refused.status == 409)
        #expect(refused.header("Content-Type") == "application/problem+json")
        #expect(try refused.json()["code"] == "insufficient_funds")
        #expect(try refused.json()["balance"] == 0)
        #expect(try service.credit(userID: "frank", flowNo: "f-8").status == 201)
        // Coins arrived, but the key's outcome stands: a retry replays it.
        let retried = try service.debit(userID: "frank", amount: 50, idempotencyKey: "k-1")
        #expect(retried.status == 409)
        #expect(retried.body == refused.body)
        #expect(retried.header("Idempotent-Replayed") == "true")
        // A new key spends.
        #expect(try service.debit(userID: "frank", amount: 50, idempotencyKey: "k-2").status == 201)
        #expect(try service.balance(of: "frank") == 550)
    }

    @Test func concurrentRequestsWithOneKeyExecuteOnce() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('gina', 100, 'coin', 'test setup', 'tests')")
        let bodies = Locked<[[UInt8]]>([])
        let finished = runOnThreads(32) { _ in
            if let response = try? service.debit(userID: "gina", amount: 30, idempotencyKey: "same"),
               response.status == 201 {
                bodies.withLock { $0.append(response.body) }
            }
        }
        #expect(finished)
        let answers = bodies.withLock { $0 }
        #expect(answers.count == 32)
        #expect(Set(answers).count == 1)
        #expect(try service.balance(of: "gina") == 70)
    }

    @Test func aLostResponseIsRetriedAndCreditsOnce() throws {
        let service = try TestService()
        defer { service.stop() }
        // The client sends the credit and drops the connection at once, as if
        // the process or network died between the commit and the response.
        let dropped = try service.client()
        try dropped.send(HTTPTestClient.requestBytes(
            method: "POST", path: "/v1/credits",
            headers: TestService.headers(key: service.appBackendKey, json: "") ,
            body: Array(#"{"user_id":"hank","flow_no":"lost-1","product_id":"guodong5000"}"#.utf8),
            port: service.port))
        dropped.reset()
        // It retries until it gets an answer; the flowNO credits exactly once.
        var answer: HTTPTestResponse?
        for _ in 0..<50 {
            answer = try service.credit(userID: "hank", flowNo: "lost-1", productID: "guodong5000")
            if answer?.status == 200 || answer?.status == 201 { break }
        }
        #expect(answer?.status == 200 || answer?.status == 201)
        #expect(try answer?.json()["balance"]?["balance"] == 5000)
        #expect(try service.balance(of: "hank") == 5000)
        #expect(try service.count("SELECT count(*) FROM wallet.entries WHERE reference = 'lost-1'") == 1)
    }

    @Test func readsShowBalancesEntriesAndCredits() throws {
        let service = try TestService()
        defer { service.stop() }
        let never = try service.request("GET", "/v1/wallets/nobody", key: service.gameServerKey)
        #expect(never.status == 200)
        #expect(try never.json()["user_id"] == "nobody")
        #expect(try never.json()["balances"] == .array([.object([("balance", 0), ("currency", "coin"), ("held", 0), ("available", 0),
                                                                  ("paid", 0), ("free", 0), ("debt", 0), ("next_expiry", .null)])]))
        #expect(try service.credit(userID: "ivy", flowNo: "r-1").status == 201)
        let wallet = try service.request("GET", "/v1/wallets/ivy", key: service.appBackendKey)
        // A purchase's coins are paid coins.
        #expect(try wallet.json()["balances"] == .array([.object([("balance", 600), ("currency", "coin"), ("held", 0), ("available", 600),
                                                                   ("paid", 600), ("free", 0), ("debt", 0), ("next_expiry", .null)])]))
        let credit = try service.request("GET", "/v1/credits/r-1", key: service.gameServerKey)
        #expect(credit.status == 200)
        #expect(try credit.json()["credit"]?["user_id"] == "ivy")
        let missing = try service.request("GET", "/v1/credits/never-seen", key: service.gameServerKey)
        #expect(missing.status == 404)
        #expect(try missing.json()["code"] == "not_found")
    }

    /// Balance reads are answered in batches: under concurrency every reader
    /// still gets its own user's balances, and a read sent after a debit was
    /// answered shows that debit.
    @Test func concurrentReadsEachSeeTheirOwnWalletAndEarlierWrites() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        let users = 24
        for user in 0..<users {
            try connection.query("SELECT * FROM wallet.grant_coins(\("reader-\(user)"), \(Int64(1_000 + user)), 'coin', 'test setup', 'tests')")
        }
        let wrong = Locked<[String]>([])
        let finished = runOnThreads(users * 4, timeoutSeconds: 120) { index in
            let user = index % users
            let path = "/v1/wallets/reader-\(user)"
            do {
                // Four threads per user: each reads, and the first also debits
                // between reads, so the others' reads race with it.
                for round in 0..<10 {
                    if index < users {
                        let debit = try service.debit(userID: "reader-\(user)", amount: 1, idempotencyKey: "read-\(user)-\(round)")
                        let expected = Int64(1_000 + user - round - 1)
                        let read = try service.request("GET", path, key: service.gameServerKey)
                        let balances = try read.json()["balances"]
                        if debit.status != 201 || balances != .array([.object([("balance", .number(String(expected))), ("currency", "coin"),
                                                                     ("held", 0), ("available", .number(String(expected))),
                                                                     ("paid", 0), ("free", .number(String(expected))), ("debt", 0),
                                                                     ("next_expiry", .null)])]) {
                            wrong.withLock { $0.append("\(path) after debit \(round): \(debit.status) \(String(describing: balances))") }
                        }
                    } else {
                        let read = try service.request("GET", path, key: service.gameServerKey)
                        let json = try read.json()
                        guard read.status == 200, json["user_id"] == .string("reader-\(user)"),
                              case .array(let balances)? = json["balances"], balances.count == 1,
                              balances[0]["currency"] == "coin",
                              case .number(let text)? = balances[0]["balance"], let balance = Int(text),
                              balance <= 1_000 + user, balance >= 1_000 + user - 10 else {
                            wrong.withLock { $0.append("\(path): \(read.status) \(String(describing: try? read.json()))") }
                            continue
                        }
                    }
                }
            } catch {
                wrong.withLock { $0.append("\(path): \(error)") }
            }
        }
        #expect(finished)
        #expect(wrong.withLock { $0 } == [])
        #expect(try service.violations() == [])
    }

    @Test func entriesPageNewestFirstAcrossPages() throws {
        let service = try TestService()
        defer { service.stop() }
        let connection = try Connection(options: service.database)
        try connection.query("SELECT * FROM wallet.grant_coins('jack', 1000, 'coin', 'test setup', 'tests')")
        for index in 0..<9 {
            #expect(try service.debit(userID: "jack", amount: Int64(index + 1), idempotencyKey: "p-\(index)").status == 201)
        }
        var seen: [Int] = []
        var cursor: String?
        var pages = 0
        repeat {
            let path = "/v1/wallets/jack/entries?limit=4" + (cursor.map { "&cursor=\($0)" } ?? "")
            let page = try service.request("GET", path, key: service.gameServerKey)
            #expect(page.status == 200)
            let json = try page.json()
            guard case .array(let entries)? = json["entries"] else {
                Issue.record("no entries array")
                return
            }
            for entry in entries {
                guard case .number(let id)? = entry["id"] else { continue }
                seen.append(Int(id)!)
            }
            if case .string(let next)? = json["next_cursor"] { cursor = next } else { cursor = nil }
            pages += 1
        } while cursor != nil && pages < 10
        #expect(pages == 3)
        #expect(seen.count == 10)
        #expect(seen == seen.sorted(by: >))
        let bad = try service.request("GET", "/v1/wallets/jack/entries?limit=501&cursor=zzz", key: service.gameServerKey)
        #expect(bad.status == 422)
        #expect(try bad.json()["code"] == "validation_failed")
    }
}
