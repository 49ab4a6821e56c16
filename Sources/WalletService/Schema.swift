import Foundation

/// The database schema this build expects: the `Migrations/NNNN_name.sql`
/// files, compiled into the binary.
public enum Schema {
    public static var migrationFiles: [(name: String, sql: String)] {
        EmbeddedFiles.all
            .filter { $0.name.hasSuffix(".sql") }
            .map { ($0.name, String(decoding: $0.contents, as: UTF8.self)) }
    }
}
