import Foundation
import Locking
import Logging
import Postgres
import Testing
import TestSupport

@Suite(.timeLimit(.minutes(2)))
struct MigratorTests {
    let logger = Logger(label: "test", level: .error, sink: .discard)

    @Test func appliesInNumberOrderOnceEach() throws {
        let options = try TestDatabase.makeEmpty()
        let files = [
            (name: "0002_add_column.sql", sql: "ALTER TABLE things ADD COLUMN label TEXT;"),
            (name: "0001_create.sql", sql: "CREATE TABLE things (id INT PRIMARY KEY); INSERT INTO things VALUES (1);"),
        ]
        let migrator = try Migrator(files: files, logger: logger)
        let connection = try Connection(options: options)
        #expect(try migrator.migrate(connection: connection) == ["0001_create.sql", "0002_add_column.sql"])
        #expect(try migrator.migrate(connection: connection) == [])
        let count = try connection.query("SELECT count(*) FROM things")[0].decode(Int.self, at: 0)
        #expect(count == 1)
    }

    /// What `migrate` would apply, named as it names it, read without
    /// creating the bookkeeping tables or applying anything.
    @Test func pendingNamesWhatMigrateWouldApplyAndChangesNothing() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        let first = try Migrator(files: [("0001_a.sql", "CREATE TABLE a (id INT);")],
                                 functionFiles: [("01_f.sql", "CREATE FUNCTION f() RETURNS INT LANGUAGE sql AS 'SELECT 1';")],
                                 logger: logger)
        #expect(try first.pending(connection: connection) == ["0001_a.sql", "functions/01_f.sql"])
        #expect(try connection.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")[0]
            .decode(Int.self, at: 0) == 0)
        try first.migrate(connection: connection)
        #expect(try first.pending(connection: connection) == [])

        let next = try Migrator(files: [("0001_a.sql", "CREATE TABLE a (id INT);"), ("0002_b.sql", "CREATE TABLE b (id INT);")],
                                functionFiles: [("01_f.sql", "CREATE OR REPLACE FUNCTION f() RETURNS INT LANGUAGE sql AS 'SELECT 2';")],
                                logger: logger)
        #expect(try next.pending(connection: connection) == ["0002_b.sql", "functions/01_f.sql"])
        #expect(try connection.query("SELECT count(*) FROM pg_tables WHERE tablename = 'b'")[0].decode(Int.self, at: 0) == 0)
        let changed = try Migrator(files: [("0001_a.sql", "CREATE TABLE a (id BIGINT);")], logger: logger)
        #expect(throws: Migrator.MigrationError.checksumMismatch(file: "0001_a.sql")) {
            try changed.pending(connection: connection)
        }
        let older = try Migrator(files: [], logger: logger)
        #expect(throws: Migrator.MigrationError.unknownApplied(file: "0001_a.sql")) {
            try older.pending(connection: connection)
        }
    }

    @Test func aChangedAppliedFileIsRefusedByName() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        try Migrator(files: [("0001_a.sql", "CREATE TABLE a (id INT);")], logger: logger).migrate(connection: connection)
        let changed = try Migrator(files: [("0001_a.sql", "CREATE TABLE a (id BIGINT);")], logger: logger)
        let error = try #require(throws: Migrator.MigrationError.self) { try changed.migrate(connection: connection) }
        #expect(error == .checksumMismatch(file: "0001_a.sql"))
        #expect(error.description.contains("0001_a.sql"))
    }

    @Test func aFailingMigrationLeavesNoTrace() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        let migrator = try Migrator(files: [
            ("0001_ok.sql", "CREATE TABLE ok (id INT);"),
            ("0002_bad.sql", "CREATE TABLE half (id INT); SELECT no_such_function();"),
        ], logger: logger)
        #expect(throws: PostgresError.self) { try migrator.migrate(connection: connection) }
        let tables = try connection.query("SELECT count(*) FROM pg_tables WHERE tablename IN ('ok', 'half')")
        #expect(try tables[0].decode(Int.self, at: 0) == 1)
        let recorded = try connection.query("SELECT name FROM schema_migrations ORDER BY version")
        #expect(recorded.map { $0[0] } == ["0001_ok.sql"])
    }

    @Test func badNamesAndDuplicateVersionsAreRefused() throws {
        #expect(throws: Migrator.MigrationError.badFileName("1_x.sql")) {
            try Migrator(files: [("1_x.sql", "")], logger: logger)
        }
        #expect(throws: Migrator.MigrationError.badFileName("0001_Bad-Name.sql")) {
            try Migrator(files: [("0001_Bad-Name.sql", "")], logger: logger)
        }
        #expect(throws: Migrator.MigrationError.duplicateVersion(1)) {
            try Migrator(files: [("0001_a.sql", ""), ("0001_b.sql", "")], logger: logger)
        }
    }

    @Test func functionFilesRunAfterMigrationsAndAgainOnlyWhenChanged() throws {
        let options = try TestDatabase.makeEmpty()
        let connection = try Connection(options: options)
        let migrations = [(name: "0001_things.sql", sql: "CREATE TABLE things (id INT); INSERT INTO things VALUES (1), (2);")]
        func function(_ name: String, _ body: String) -> (name: String, sql: String) {
            (name, "CREATE OR REPLACE FUNCTION \(name.dropFirst(3).dropLast(4))() RETURNS BIGINT LANGUAGE sql AS $$ \(body) $$;")
        }
        // The function reads a table a migration makes: migrations come first.
        let first = try Migrator(files: migrations, functionFiles: [
            function("02_other.sql", "SELECT 7"),
            function("01_counted.sql", "SELECT count(*) FROM things"),
        ], logger: logger)
        #expect(try first.migrate(connection: connection)
            == ["0001_things.sql", "functions/01_counted.sql", "functions/02_other.sql"])
        #expect(try first.migrate(connection: connection) == [])
        #expect(try connection.query("SELECT counted(), other()")[0].decode(Int.self, at: 0) == 2)
        let appliedAt = "SELECT name, applied_at::text FROM schema_functions ORDER BY name"
        let before = try connection.query(PostgresQuery(unsafeSQL: appliedAt)).map { [$0[0], $0[1]] }

        // Only the changed file runs again; the unchanged one keeps its record.
        let changed = try Migrator(files: migrations, functionFiles: [
            function("01_counted.sql", "SELECT count(*) * 10 FROM things"),
            function("02_other.sql", "SELECT 7"),
        ], logger: logger)
        #expect(try changed.migrate(connection: connection) == ["functions/01_counted.sql"])
        #expect(try changed.migrate(connection: connection) == [])
        #expect(try connection.query("SELECT counted()")[0].decode(Int.self, at: 0) == 20)
        let after = try connection.query(PostgresQuery(unsafeSQL: appliedAt)).map { [$0[0], $0[1]] }
        #expect(after[1] == before[1])
        #expect(after[0] != before[0])

        // A failing change leaves the function and its record as they were.
        let broken = try Migrator(files: migrations, functionFiles: [
            ("01_counted.sql", "CREATE OR REPLACE FUNCTION counted() RETURNS BIGINT LANGUAGE sql AS $$ SELECT 1 $$; SELECT no_such_function();"),
            function("02_other.sql", "SELECT 7"),
        ], logger: logger)
        #expect(throws: PostgresError.self) { try broken.migrate(connection: connection) }
        #expect(try connection.query("SELECT counted()")[0].decode(Int.self, at: 0) == 20)
        #expect(try changed.migrate(connection: connection) == [])
    }

    @Test func badFunctionFileNamesAndDuplicateNumbersAreRefused() throws {
        #expect(throws: Migrator.MigrationError.badFunctionFileName("0001_f.sql")) {
            try Migrator(files: [], functionFiles: [("0001_f.sql", "")], logger: logger)
        }
        #expect(throws: Migrator.MigrationError.badFunctionFileName("01_F.sql")) {
            try Migrator(files: [], functionFiles: [("01_F.sql", "")], logger: logger)
        }
        #expect(throws: Migrator.MigrationError.duplicateFunctionNumber(1)) {
            try Migrator(files: [], functionFiles: [("01_a.sql", ""), ("01_b.sql", "")], logger: logger)
        }
    }

    @Test func concurrentMigratorsApplyEachFileOnce() throws {
        let options = try TestDatabase.makeEmpty()
        // Each migration appends to a log table; a double application would
        // show. Each also takes a moment (pg_sleep), so the migrators overlap.
        var files = [(name: "0001_log.sql", sql: "CREATE TABLE log (version INT); INSERT INTO log VALUES (1);")]
        for version in 2...6 {
            files.append((String(format: "%04d_step.sql", version),
                          "SELECT pg_sleep(0.05); INSERT INTO log VALUES (\(version));"))
        }
        let migrator = try Migrator(files: files, logger: logger)
        let appliedCounts = Locked<[Int]>([])
        runOnThreads(6) { _ in
            do {
                let applied = try migrator.migrate(connection: try Connection(options: options))
                appliedCounts.withLock { $0.append(applied.count) }
            } catch {
                appliedCounts.withLock { $0.append(-1) }
            }
        }
        let counts = appliedCounts.withLock { $0 }.sorted()
        #expect(counts == [0, 0, 0, 0, 0, 6])
        let connection = try Connection(options: options)
        let log = try connection.query("SELECT version FROM log ORDER BY version").map { $0[0] }
        #expect(log == ["1", "2", "3", "4", "5", "6"])
    }
}
