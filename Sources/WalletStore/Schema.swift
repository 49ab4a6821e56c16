import Foundation
public import Logging
public import Postgres

/// The database schema this build expects: the `Migrations/NNNN_name.sql`
/// files and the `Migrations/functions/NN_name.sql` function files, compiled
/// into the binary.
public enum Schema {
    public static var migrationFiles: [(name: String, sql: String)] {
        EmbeddedFiles.all
            .filter { $0.name.hasSuffix(".sql") && !$0.name.contains("/") }
            .map { ($0.name, String(decoding: $0.contents, as: UTF8.self)) }
    }

    /// Function files, by their name inside `Migrations/functions/`.
    public static var functionFiles: [(name: String, sql: String)] {
        EmbeddedFiles.all
            .filter { $0.name.hasPrefix(functionsPrefix) && $0.name.hasSuffix(".sql") }
            .map { (String($0.name.dropFirst(functionsPrefix.count)), String(decoding: $0.contents, as: UTF8.self)) }
    }

    /// The migrator for this build's schema.
    public static func migrator(logger: Logger) throws -> Migrator {
        try Migrator(files: migrationFiles, functionFiles: functionFiles, logger: logger)
    }

    private static let functionsPrefix = "functions/"
}
