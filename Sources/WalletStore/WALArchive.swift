import Foundation
import Postgres

/// How the database's WAL archiving stands, from `pg_stat_archiver`: read
/// by upkeep for /metrics, so an archive that fails or falls behind is seen
/// before the day a restore needs it.
public struct WALArchiveStatus: Sendable, Equatable {
    /// `archive_mode` is `on` or `always`.
    public var enabled: Bool
    /// WAL files archived, and attempts that failed, since the server's
    /// statistics were last reset.
    public var archivedCount: Int64
    public var failedCount: Int64
    /// Unix times of the last success and the last failure; nil for never.
    public var lastArchivedSeconds: Double?
    public var lastFailedSeconds: Double?
    /// The name of the last file archived: a segment
    /// (`000000010000000000000003`), or one with a suffix (`.partial`,
    /// `.00000028.backup`), or a timeline history file (`00000002.history`).
    public var lastArchivedWAL: String?
    /// The server's current WAL write position; nil on a standby.
    public var currentLSN: UInt64?
    public var segmentBytes: UInt64

    public init(enabled: Bool, archivedCount: Int64, failedCount: Int64, lastArchivedSeconds: Double?,
                lastFailedSeconds: Double?, lastArchivedWAL: String?, currentLSN: UInt64?, segmentBytes: UInt64) {
        self.enabled = enabled
        self.archivedCount = archivedCount
        self.failedCount = failedCount
        self.lastArchivedSeconds = lastArchivedSeconds
        self.lastFailedSeconds = lastFailedSeconds
        self.lastArchivedWAL = lastArchivedWAL
        self.currentLSN = currentLSN
        self.segmentBytes = segmentBytes
    }

    /// WAL written past the end of the last archived segment, the segment
    /// being written included: what losing the server's disk now would
    /// lose. Nil when it cannot be told: archiving off, a standby, nothing
    /// archived yet, or a last file that names no segment (a timeline
    /// history file, archived once at a promotion).
    public var pendingBytes: UInt64? {
        guard enabled, let currentLSN, let lastArchivedWAL,
              let end = Self.segmentEndLSN(lastArchivedWAL, segmentBytes: segmentBytes) else { return nil }
        return currentLSN > end ? currentLSN - end : 0
    }

    /// The WAL position just past the segment a file name starts with:
    /// eight hex digits of timeline, then the segment number as eight
    /// digits of its high 32 bits of position and eight of the segment
    /// within them.
    static func segmentEndLSN(_ name: String, segmentBytes: UInt64) -> UInt64? {
        let digits = Array(name.utf8.prefix(24))
        guard digits.count == 24, segmentBytes > 0, (1 << 32) % segmentBytes == 0,
              digits.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x46).contains($0) }),
              let high = UInt64(String(decoding: digits[8..<16], as: UTF8.self), radix: 16),
              let segment = UInt64(String(decoding: digits[16..<24], as: UTF8.self), radix: 16),
              high <= UInt64(UInt32.max), segment < (1 << 32) / segmentBytes else { return nil }
        return (high << 32) + (segment + 1) * segmentBytes
    }

    /// One query; any role may read these views and functions.
    static func read(on connection: Connection) throws -> WALArchiveStatus {
        let row = try connection.prepared("""
            SELECT current_setting('archive_mode') <> 'off',
                   a.archived_count, a.failed_count,
                   extract(epoch FROM a.last_archived_time)::FLOAT8,
                   extract(epoch FROM a.last_failed_time)::FLOAT8,
                   a.last_archived_wal,
                   CASE WHEN pg_is_in_recovery() THEN NULL
                        ELSE (pg_current_wal_lsn() - '0/0'::PG_LSN)::BIGINT END,
                   (SELECT setting::BIGINT FROM pg_settings WHERE name = 'wal_segment_size')
            FROM pg_stat_archiver a
            """)[0]
        return WALArchiveStatus(
            enabled: try row.decode(Bool.self, at: 0),
            archivedCount: try row.decode(Int64.self, at: 1), failedCount: try row.decode(Int64.self, at: 2),
            lastArchivedSeconds: try row.decodeIfPresent(Double.self, at: 3),
            lastFailedSeconds: try row.decodeIfPresent(Double.self, at: 4),
            lastArchivedWAL: try row.decodeIfPresent(String.self, at: 5),
            currentLSN: try row.decodeIfPresent(Int64.self, at: 6).map { UInt64(max(0, $0)) },
            segmentBytes: UInt64(max(0, try row.decode(Int64.self, at: 7))))
    }
}

extension Ledger {
    /// The archiver's state, for /metrics; a bounded read off the server
    /// threads (upkeep's).
    public func walArchiveStatus() throws -> WALArchiveStatus {
        try reads.run(deadline: .now + .seconds(5)) { try WALArchiveStatus.read(on: $0) }
    }
}
