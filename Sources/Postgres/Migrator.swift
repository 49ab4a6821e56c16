import Foundation
public import Logging

/// Applies forward-only SQL migrations.
///
/// - Files are named `NNNN_snake_case.sql` and applied in number order, each
///   in its own transaction together with its bookkeeping row.
/// - Each applied file is recorded with the SHA-256 of its text (computed by
///   the server). A file whose text changed after it was applied stops the
///   run with an error that names it.
/// - The whole run holds a session advisory lock, so two instances starting
///   at once apply each migration exactly once.
public struct Migrator: Sendable {
    public struct Migration: Sendable, Equatable {
        public let version: Int
        public let name: String
        public let sql: String

        /// Parses `NNNN_name.sql`; nil for any other file name.
        public init?(fileName: String, sql: String) {
            guard fileName.hasSuffix(".sql") else { return nil }
            let stem = fileName.dropLast(4)
            guard let underscore = stem.firstIndex(of: "_"),
                  stem.distance(from: stem.startIndex, to: underscore) == 4,
                  let version = Int(stem[..<underscore]),
                  stem[stem.index(after: underscore)...].allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "_" }),
                  stem.index(after: underscore) < stem.endIndex
            else { return nil }
            self.version = version
            self.name = fileName
            self.sql = sql
        }
    }

    public enum MigrationError: Error, CustomStringConvertible, Equatable {
        case badFileName(String)
        case duplicateVersion(Int)
        case checksumMismatch(file: String)
        case unknownApplied(file: String)

        public var description: String {
            switch self {
            case .badFileName(let name): "migration file \(name) is not named NNNN_snake_case.sql"
            case .duplicateVersion(let version): "two migration files share version \(version)"
            case .checksumMismatch(let file): "migration \(file) was changed after it was applied; add a new migration instead"
            case .unknownApplied(let file): "the database has migration \(file), which this build does not know; is it older than the database?"
            }
        }
    }

    /// An arbitrary, fixed key for `pg_advisory_lock`.
    static let lockKey: Int64 = 0x7761_6C6C_6574_6D67

    public let migrations: [Migration]
    private let logger: Logger

    /// `files` maps file name to SQL text.
    public init(files: [(name: String, sql: String)], logger: Logger) throws(MigrationError) {
        var migrations: [Migration] = []
        for file in files {
            guard let migration = Migration(fileName: file.name, sql: file.sql) else {
                throw .badFileName(file.name)
            }
            migrations.append(migration)
        }
        migrations.sort { $0.version < $1.version }
        for (previous, next) in zip(migrations, migrations.dropFirst()) where previous.version == next.version {
            throw .duplicateVersion(next.version)
        }
        self.migrations = migrations
        self.logger = logger
    }

    /// Applies what is missing; returns the names applied by this call.
    @discardableResult
    public func migrate(connection: Connection) throws -> [String] {
        try connection.execute("SELECT pg_advisory_lock(\(Self.lockKey))")
        defer {
            if !connection.isBroken {
                try? connection.execute("SELECT pg_advisory_unlock(\(Self.lockKey))")
            }
        }
        try connection.execute("""
            CREATE TABLE IF NOT EXISTS public.schema_migrations (
                version    INTEGER PRIMARY KEY,
                name       TEXT NOT NULL,
                checksum   TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """)
        var applied: [Int: (name: String, checksum: String)] = [:]
        for row in try connection.query("SELECT version, name, checksum FROM public.schema_migrations") {
            applied[try row.decode(Int.self, at: 0)] = (try row.decode(String.self, at: 1), try row.decode(String.self, at: 2))
        }
        let known = Set(migrations.map(\.version))
        if let unknown = applied.keys.sorted().first(where: { !known.contains($0) }) {
            throw MigrationError.unknownApplied(file: applied[unknown]!.name)
        }
        var appliedNow: [String] = []
        for migration in migrations {
            let checksum = try connection.query("SELECT encode(sha256(convert_to(\(migration.sql), 'UTF8')), 'hex')")
                .single!.decode(String.self, at: 0)
            if let existing = applied[migration.version] {
                guard existing.checksum == checksum else {
                    throw MigrationError.checksumMismatch(file: migration.name)
                }
                continue
            }
            try connection.execute("BEGIN")
            do {
                try connection.executeScript(unsafeSQL: migration.sql)
                try connection.execute("""
                    INSERT INTO public.schema_migrations (version, name, checksum)
                    VALUES (\(migration.version), \(migration.name), \(checksum))
                    """)
                try connection.execute("COMMIT")
            } catch {
                if !connection.isBroken { try? connection.execute("ROLLBACK") }
                logger.error("migration failed", ["migration.name": migration.name])
                throw error
            }
            logger.info("migration applied", ["migration.name": migration.name])
            appliedNow.append(migration.name)
        }
        return appliedNow
    }
}
