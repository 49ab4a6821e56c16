import Foundation
public import Logging

/// Applies forward-only SQL migrations, then re-applies changed function files.
///
/// - Migrations are named `NNNN_snake_case.sql` and applied in number order,
///   each in its own transaction together with its bookkeeping row. They hold
///   tables, types, indexes and data.
/// - Each applied migration is recorded with the SHA-256 of its text
///   (computed by the server). A migration whose text changed after it was
///   applied stops the run with an error that names it.
/// - Function files are named `NN_snake_case.sql` and hold only
///   `CREATE OR REPLACE FUNCTION` statements. They run after every migration,
///   in number order, each in its own transaction, whenever their text
///   differs from the one last applied (recorded by name and SHA-256 in
///   `schema_functions`). So a function changes by editing its file, and its
///   history is the file's history. A change of signature or return type
///   needs a migration that drops the old function first. A recorded file
///   this build does not carry is left alone; and since only the text is
///   compared, an older build started against the database puts its own
///   versions back, unless a migration it does not know stops it first.
/// - The whole run holds a session advisory lock, so two instances starting
///   at once apply each migration and each function file exactly once.
public struct Migrator: Sendable {
    public struct Migration: Sendable, Equatable {
        public let version: Int
        public let name: String
        public let sql: String

        /// Parses `NNNN_name.sql`; nil for any other file name.
        public init?(fileName: String, sql: String) {
            guard let version = Migrator.number(ofFile: fileName, digits: 4) else { return nil }
            self.version = version
            self.name = fileName
            self.sql = sql
        }
    }

    public struct FunctionFile: Sendable, Equatable {
        public let number: Int
        public let name: String
        public let sql: String

        /// Parses `NN_name.sql`; nil for any other file name.
        public init?(fileName: String, sql: String) {
            guard let number = Migrator.number(ofFile: fileName, digits: 2) else { return nil }
            self.number = number
            self.name = fileName
            self.sql = sql
        }
    }

    /// The number of a `<digits>_snake_name.sql` file, nil for any other name.
    static func number(ofFile fileName: String, digits: Int) -> Int? {
        guard fileName.hasSuffix(".sql") else { return nil }
        let stem = fileName.dropLast(4)
        guard let underscore = stem.firstIndex(of: "_"),
              stem.distance(from: stem.startIndex, to: underscore) == digits,
              let number = Int(stem[..<underscore]),
              stem[stem.index(after: underscore)...].allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "_" }),
              stem.index(after: underscore) < stem.endIndex
        else { return nil }
        return number
    }

    public enum MigrationError: Error, CustomStringConvertible, Equatable {
        case badFileName(String)
        case duplicateVersion(Int)
        case badFunctionFileName(String)
        case duplicateFunctionNumber(Int)
        case checksumMismatch(file: String)
        case unknownApplied(file: String)

        public var description: String {
            switch self {
            case .badFileName(let name): "migration file \(name) is not named NNNN_snake_case.sql"
            case .duplicateVersion(let version): "two migration files share version \(version)"
            case .badFunctionFileName(let name): "function file \(name) is not named NN_snake_case.sql"
            case .duplicateFunctionNumber(let number): "two function files share number \(number)"
            case .checksumMismatch(let file): "migration \(file) was changed after it was applied; add a new migration instead"
            case .unknownApplied(let file): "the database has migration \(file), which this build does not know; is it older than the database?"
            }
        }
    }

    /// An arbitrary, fixed key for `pg_advisory_lock`.
    static let lockKey: Int64 = 0x7761_6C6C_6574_6D67

    public let migrations: [Migration]
    public let functionFiles: [FunctionFile]
    private let logger: Logger

    /// `files` (migrations) and `functionFiles` map file name to SQL text.
    public init(files: [(name: String, sql: String)], functionFiles: [(name: String, sql: String)] = [],
                logger: Logger) throws(MigrationError) {
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
        var functions: [FunctionFile] = []
        for file in functionFiles {
            guard let function = FunctionFile(fileName: file.name, sql: file.sql) else {
                throw .badFunctionFileName(file.name)
            }
            functions.append(function)
        }
        functions.sort { $0.number < $1.number }
        for (previous, next) in zip(functions, functions.dropFirst()) where previous.number == next.number {
            throw .duplicateFunctionNumber(next.number)
        }
        self.migrations = migrations
        self.functionFiles = functions
        self.logger = logger
    }

    /// Applies what is missing or changed; returns the names applied by this
    /// call, migrations first, function files as `functions/NN_name.sql`.
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
        let applied = try appliedMigrations(connection: connection)
        var appliedNow: [String] = []
        for migration in migrations {
            let checksum = try Self.checksum(of: migration.sql, connection: connection)
            if let existing = applied[migration.version] {
                guard existing.checksum == checksum else {
                    throw MigrationError.checksumMismatch(file: migration.name)
                }
                continue
            }
            do {
                try connection.withTransaction { connection in
                    try connection.executeScript(unsafeSQL: migration.sql)
                    try connection.execute("""
                        INSERT INTO public.schema_migrations (version, name, checksum)
                        VALUES (\(migration.version), \(migration.name), \(checksum))
                        """)
                }
            } catch {
                logger.error("migration failed", ["migration.name": migration.name])
                throw error
            }
            logger.info("migration applied", ["migration.name": migration.name])
            appliedNow.append(migration.name)
        }
        appliedNow += try applyFunctionFiles(connection: connection)
        return appliedNow
    }

    /// Function files whose text differs from the one last applied, in
    /// number order; called with the advisory lock held, after migrations.
    private func applyFunctionFiles(connection: Connection) throws -> [String] {
        guard !functionFiles.isEmpty else { return [] }
        try connection.execute("""
            CREATE TABLE IF NOT EXISTS public.schema_functions (
                name       TEXT PRIMARY KEY,
                checksum   TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )
            """)
        let applied = try appliedFunctionFiles(connection: connection)
        var appliedNow: [String] = []
        for function in functionFiles {
            let checksum = try Self.checksum(of: function.sql, connection: connection)
            if applied[function.name] == checksum { continue }
            do {
                try connection.withTransaction { connection in
                    try connection.executeScript(unsafeSQL: function.sql)
                    try connection.execute("""
                        INSERT INTO public.schema_functions (name, checksum)
                        VALUES (\(function.name), \(checksum))
                        ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()
                        """)
                }
            } catch {
                logger.error("function file failed", ["migration.name": "functions/" + function.name])
                throw error
            }
            logger.info("function file applied", ["migration.name": "functions/" + function.name])
            appliedNow.append("functions/" + function.name)
        }
        return appliedNow
    }

    /// What `migrate` would apply now, in its order and named as it names
    /// them, read without applying anything, creating anything or taking
    /// the lock. A database that holds what this build does not know, or a
    /// migration changed since it was applied, is `migrate`'s error.
    public func pending(connection: Connection) throws -> [String] {
        let applied = try appliedMigrations(connection: connection)
        var pending: [String] = []
        for migration in migrations {
            let checksum = try Self.checksum(of: migration.sql, connection: connection)
            if let existing = applied[migration.version] {
                guard existing.checksum == checksum else { throw MigrationError.checksumMismatch(file: migration.name) }
            } else {
                pending.append(migration.name)
            }
        }
        let appliedFunctions = try appliedFunctionFiles(connection: connection)
        for function in functionFiles {
            let checksum = try Self.checksum(of: function.sql, connection: connection)
            if appliedFunctions[function.name] != checksum { pending.append("functions/" + function.name) }
        }
        return pending
    }

    /// The migrations recorded as applied, by version; none when the
    /// bookkeeping table does not exist yet. One this build does not know
    /// is an error.
    private func appliedMigrations(connection: Connection) throws -> [Int: (name: String, checksum: String)] {
        guard try Self.tableExists("public.schema_migrations", connection: connection) else { return [:] }
        var applied: [Int: (name: String, checksum: String)] = [:]
        for row in try connection.query("SELECT version, name, checksum FROM public.schema_migrations") {
            applied[try row.decode(Int.self, at: 0)] = (try row.decode(String.self, at: 1), try row.decode(String.self, at: 2))
        }
        let known = Set(migrations.map(\.version))
        if let unknown = applied.keys.sorted().first(where: { !known.contains($0) }) {
            throw MigrationError.unknownApplied(file: applied[unknown]!.name)
        }
        return applied
    }

    /// The function files' checksums as last applied, by name.
    private func appliedFunctionFiles(connection: Connection) throws -> [String: String] {
        guard try Self.tableExists("public.schema_functions", connection: connection) else { return [:] }
        var applied: [String: String] = [:]
        for row in try connection.query("SELECT name, checksum FROM public.schema_functions") {
            applied[try row.decode(String.self, at: 0)] = try row.decode(String.self, at: 1)
        }
        return applied
    }

    /// A file's checksum as recorded: the SHA-256 of its text, computed by
    /// the server.
    private static func checksum(of sql: String, connection: Connection) throws -> String {
        try connection.query("SELECT encode(sha256(convert_to(\(sql), 'UTF8')), 'hex')").single!.decode(String.self, at: 0)
    }

    private static func tableExists(_ name: String, connection: Connection) throws -> Bool {
        try connection.query("SELECT to_regclass(\(name)) IS NOT NULL").single!.decode(Bool.self, at: 0)
    }
}
