import Foundation
import Postgres
import Testing
import TestSupport
@testable import WalletStore

/// The WAL archiver's state as /metrics reports it: read from a server
/// whose archive command fails, then works.
@Suite(.timeLimit(.minutes(2)))
struct WALArchiveTests {
    static let segmentBytes: UInt64 = 16 << 20

    @Test func aSegmentNameGivesThePositionJustPastIt() {
        #expect(WALArchiveStatus.segmentEndLSN("000000010000000000000003", segmentBytes: Self.segmentBytes) == 4 << 24)
        // The last segment below a 4 GiB boundary ends on it.
        #expect(WALArchiveStatus.segmentEndLSN("0000000200000001000000FF", segmentBytes: Self.segmentBytes) == 2 << 32)
        // The segment a suffixed name starts with.
        #expect(WALArchiveStatus.segmentEndLSN("000000010000000000000003.partial", segmentBytes: Self.segmentBytes) == 4 << 24)
        #expect(WALArchiveStatus.segmentEndLSN("000000010000000000000003.00000028.backup",
                                              segmentBytes: Self.segmentBytes) == 4 << 24)
        // No segment: a history file, lower case, a segment past its range.
        #expect(WALArchiveStatus.segmentEndLSN("00000002.history", segmentBytes: Self.segmentBytes) == nil)
        #expect(WALArchiveStatus.segmentEndLSN("00000001000000000000000a", segmentBytes: Self.segmentBytes) == nil)
        #expect(WALArchiveStatus.segmentEndLSN("000000010000000000000100", segmentBytes: Self.segmentBytes) == nil)
    }

    @Test func pendingBytesCountFromTheEndOfTheLastArchivedSegment() {
        var status = WALArchiveStatus(enabled: true, archivedCount: 3, failedCount: 0, lastArchivedSeconds: 1,
                                      lastFailedSeconds: nil, lastArchivedWAL: "000000010000000000000003",
                                      currentLSN: (4 << 24) + 1_000, segmentBytes: Self.segmentBytes)
        #expect(status.pendingBytes == 1_000)
        // A position inside the archived segment (a .partial at promotion).
        status.currentLSN = (3 << 24) + 10
        #expect(status.pendingBytes == 0)
        status.lastArchivedWAL = "00000002.history"
        #expect(status.pendingBytes == nil)
        status.lastArchivedWAL = nil
        #expect(status.pendingBytes == nil)
        status.lastArchivedWAL = "000000010000000000000003"
        status.enabled = false
        #expect(status.pendingBytes == nil)
    }

    @Test func archivingOffReadsAsOff() throws {
        let connection = try Connection(options: try TestDatabase.make())
        let status = try WALArchiveStatus.read(on: connection)
        #expect(!status.enabled)
        #expect(status.pendingBytes == nil)
        #expect(status.segmentBytes == Self.segmentBytes)
    }

    @Test func failuresThenSuccessesAsTheArchiverSeesThem() throws {
        let cluster = try TestCluster.start(name: "archive", settings: [
            "archive_mode": "on", "archive_command": "'false'",
        ])
        defer { TestCluster.destroy(cluster) }
        let connection = try Connection(options: Connection.Options(conninfo: cluster.conninfo()))
        defer { connection.close() }
        func switchSegment() throws {
            try connection.execute("CREATE TABLE IF NOT EXISTS filler (n INTEGER)")
            try connection.execute("INSERT INTO filler SELECT generate_series(1, 1000)")
            try connection.execute("SELECT pg_switch_wal()")
        }
        try switchSegment()
        #expect(waitFor(seconds: 30) { ((try? WALArchiveStatus.read(on: connection))?.failedCount ?? 0) >= 1 })
        let failing = try WALArchiveStatus.read(on: connection)
        #expect(failing.enabled)
        #expect(failing.archivedCount == 0)
        #expect(failing.lastArchivedSeconds == nil)
        #expect(try #require(failing.lastFailedSeconds) > Date().timeIntervalSince1970 - 60)
        // Nothing archived yet: how far behind cannot be told.
        #expect(failing.pendingBytes == nil)

        // The archiver's own user copies into a directory it makes.
        let archive = cluster.configuration.directory + "/archive"
        try connection.execute(PostgresQuery(unsafeSQL:
            "ALTER SYSTEM SET archive_command = 'mkdir -p \(archive) && cp %p \(archive)/%f'"))
        try connection.execute("SELECT pg_reload_conf()")
        try switchSegment()
        #expect(waitFor(seconds: 60) { ((try? WALArchiveStatus.read(on: connection))?.archivedCount ?? 0) >= 2 })
        let working = try WALArchiveStatus.read(on: connection)
        #expect(working.failedCount >= failing.failedCount)
        #expect(try #require(working.lastArchivedSeconds) >= failing.lastFailedSeconds!)
        // Both segments are archived: what remains is the one being
        // written, less than a segment.
        #expect(try #require(working.pendingBytes) < Self.segmentBytes)
        #expect(working.lastArchivedWAL?.count == 24)
    }
}
