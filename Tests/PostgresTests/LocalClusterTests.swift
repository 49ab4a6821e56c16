import Foundation
import Logging
import Postgres
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
