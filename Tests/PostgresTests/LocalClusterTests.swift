import Foundation
import Logging
@testable import Postgres
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(3)))
struct LocalClusterTests {
    @Test func createStartStopAndStartAgain() throws {
        let directory = NSTemporaryDirectory() + "wallet-launcher-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let cluster = try LocalCluster(configuration: .init(directory: directory), logger: Logger(label: "test", level: .error, sink: .discard))
        #expect(!cluster.exists)
        #expect(try cluster.createIfNeeded())
        #expect(cluster.exists)
        #expect(!cluster.isRunning)
        try cluster.start()
        defer { try? cluster.stop(mode: .immediate) }
        #expect(cluster.isRunning)
        let connection = try Connection(options: .init(conninfo: cluster.conninfo()))
        try connection.execute("CREATE TABLE kept (id INT)")
        try connection.execute("INSERT INTO kept VALUES (7)")
        connection.close()
        try cluster.stop()
        #expect(!cluster.isRunning)

        // A second start of the existing cluster keeps its data.
        #expect(try cluster.createIfNeeded() == false)
        try cluster.start()
        #expect(cluster.isRunning)
        let again = try Connection(options: .init(conninfo: cluster.conninfo()))
        #expect(try again.query("SELECT id FROM kept")[0].decode(Int.self, at: 0) == 7)
        // It listens on its socket only.
        #expect(try again.query("SHOW listen_addresses")[0][0] == "")
        again.close()
        try cluster.stop()
    }

    @Test func aDeepDirectoryGetsAShortSocketPath() throws {
        let deep = NSTemporaryDirectory() + "wallet-deep-" + String(repeating: "d", count: 90)
        let cluster = try LocalCluster(configuration: .init(directory: deep), logger: Logger(label: "test", level: .error, sink: .discard))
        #expect(cluster.socketDirectory != deep)
        #expect((cluster.socketDirectory + "/.s.PGSQL.5432").utf8.count <= 107)
    }

    @Test func findsTheServerBinaries() throws {
        let directory = try LocalCluster.findBinaries()
        #expect(FileManager.default.isExecutableFile(atPath: directory + "/pg_ctl"))
    }

    @Test func missingBinariesNameThePackage() {
        #expect(LocalCluster.LauncherError.binariesNotFound.description.contains("postgresql-15"))
    }
}

/// The launcher's own process runner: an exit status comes back as soon as
/// the program ends, and a program past its time is killed at the deadline.
@Suite(.timeLimit(.minutes(1)))
struct LauncherProcessTests {
    @Test func anExitStatusComesBack() throws {
        let started = ContinuousClock.now
        #expect(try LocalCluster.execute("/bin/sh", ["-c", "exit 3"], timeoutSeconds: 30, outputPath: nil) == 3)
        #expect(try LocalCluster.execute("/bin/sh", ["-c", "true"], timeoutSeconds: 30, outputPath: nil) == 0)
        #expect(started.duration(to: .now) < .seconds(10))
    }

    @Test func aProgramPastItsTimeIsKilled() {
        let started = ContinuousClock.now
        // The program under test: /bin/sleep, which outlasts its time.
        #expect(throws: LocalCluster.LauncherError.timedOut(command: "/bin/sleep 60")) {
            try LocalCluster.execute("/bin/sleep", ["60"], timeoutSeconds: 1, outputPath: nil)
        }
        let elapsed = started.duration(to: .now)
        #expect(elapsed >= .seconds(1))
        #expect(elapsed < .seconds(20))
    }
}
