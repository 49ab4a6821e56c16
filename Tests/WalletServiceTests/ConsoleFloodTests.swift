import Crypto
import Foundation
import Locking
import Postgres
import Synchronization
import Testing
import TestSupport
@testable import ServiceAPI
@testable import ServiceSupport
@testable import WalletService
import ServiceTestSupport

/// Cookies the console did not issue are turned away at its door: on the
/// server thread, before any database work, so a flood of them neither
/// reaches PostgreSQL nor crowds a signed-in admin off the console's threads.
@Suite(.timeLimit(.minutes(3)))
struct ConsoleFloodTests {
    static let junkRequests = 10_000
    /// More junk in flight at once than the console's queue holds, from a
    /// few addresses, none of them past the per-address connection limit.
    static let junkThreads = 100
    static let junkAddresses = ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"]
    static let adminAddress = "127.0.0.9"
    /// The signed-in admin's pages must overlap the flood this much at least.
    static let adminPagesMin = 10

    /// A random cookie value: an old-style bare id, one shaped like the
    /// console's own (`<id>.<tag>`), or noise.
    static func junkCookie(_ index: Int) -> String {
        switch index % 3 {
        case 0: Base64URL.encode(SecureRandom.bytes(count: 32))
        case 1: Base64URL.encode(SecureRandom.bytes(count: 32)) + "." + Base64URL.encode(SecureRandom.bytes(count: 32))
        default: String(repeating: "x", count: 1 + index % 60)
        }
    }

    @Test func junkCookiesReachNoDatabaseAndCrowdOutNoAdmin() throws {
        let service = try TestService()
        var stopped = false
        defer { if !stopped { service.stop() } }
        #expect(try service.credit(userID: "alice", flowNo: "flow-1").status == 201)
        let browser = try ConsoleTests.browser(service, key: service.adminKey)
        // `browser` signed in (one session lookup on the way) and read one page.
        var signedInPages = 1

        let port = service.port
        let junkStatuses = Locked<[Int: Int]>([:])
        let flooding = Atomic<Bool>(true)
        let floodDone = DispatchSemaphore(value: 0)
        let flood = Thread {
            let perThread = Self.junkRequests / Self.junkThreads
            _ = runOnThreads(Self.junkThreads, timeoutSeconds: 120) { thread in
                var statuses: [Int: Int] = [:]
                var client: HTTPTestClient?
                for index in 0..<perThread {
                    let cookie = "wallet_admin_session=" + Self.junkCookie(thread * perThread + index)
                    let page = ConsoleTests.pages[index % ConsoleTests.pages.count]
                    do {
                        if client == nil {
                            client = try HTTPTestClient(port: port, sourceHost: Self.junkAddresses[thread % Self.junkAddresses.count],
                                                        timeoutSeconds: 30)
                        }
                        let response = try client!.request(method: "GET", path: page, headers: [("Cookie", cookie)])
                        statuses[response.status, default: 0] += 1
                        if response.header("Connection")?.lowercased() == "close" { client = nil }
                    } catch {
                        statuses[0, default: 0] += 1
                        client = nil
                    }
                }
                junkStatuses.withLock { all in all.merge(statuses, uniquingKeysWith: +) }
            }
            flooding.store(false, ordering: .releasing)
            floodDone.signal()
        }
        flood.start()

        // The admin reads page after page while the flood lasts.
        var adminStatuses: [String: Int] = [:]
        var failures: [String] = []
        var pageIndex = 0
        while flooding.load(ordering: .acquiring) {
            let path = ConsoleTests.pages[pageIndex % ConsoleTests.pages.count]
            pageIndex += 1
            let status = (try? HTTPTestClient(port: port, sourceHost: Self.adminAddress, timeoutSeconds: 30)
                .request(method: "GET", path: path, headers: [("Cookie", browser.cookie)]).status) ?? 0
            adminStatuses["\(status)", default: 0] += 1
            signedInPages += 1
            if status != 200 { failures.append("\(path): \(status)") }
        }
        #expect(floodDone.wait(timeout: .now() + 120) == .success)
        let junk = junkStatuses.withLock { $0 }
        let adminPages = pageIndex

        // PostgreSQL counts every scan of the sessions table; a backend
        // reports its counts when it ends, so stop the service (its pools
        // close) and wait for its connections to be gone.
        service.stop()
        stopped = true
        let observer = try Connection(options: service.database)
        defer { observer.close() }
        #expect(waitFor(seconds: 30) {
            (try? observer.query("""
                SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
                """)[0].decode(Int.self, at: 0)) == 0
        })
        let scans = try observer.query("""
            SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables
            WHERE schemaname = 'wallet' AND relname = 'admin_sessions'
            """)[0].decode(Int.self, at: 0)

        print("console flood: \(Self.junkRequests) junk-cookie requests answered \(junk.sorted { $0.key < $1.key }); "
              + "the admin's \(adminPages) pages meanwhile: \(adminStatuses.sorted { $0.key < $1.key }); "
              + "admin_sessions scanned \(scans) times for \(signedInPages) signed-in requests and one sign-in")
        #expect(junk.values.reduce(0, +) == Self.junkRequests)
        #expect(junk == [303: Self.junkRequests], "every junk cookie is sent to the sign-in form")
        #expect(adminPages >= Self.adminPagesMin, "the admin's pages did not overlap the flood")
        #expect(failures.count == 0, "\(failures.count) of \(adminPages) admin pages failed: \(failures.prefix(10))")
        // One lookup per signed-in request and one for the sign-in: the junk
        // cost the database nothing.
        #expect(scans <= signedInPages + 1, "admin_sessions scanned \(scans) times")
    }
}
