/// The rows of one result, copied out of libpq so the result can be freed at once.
public struct Rows: Sendable, RandomAccessCollection {
    public let columns: [String]
    let values: [[String?]]
    /// The command tag's row count, for INSERT/UPDATE/DELETE.
    public let affectedRows: Int

    init(columns: [String], values: [[String?]], affectedRows: Int) {
        self.columns = columns
        self.values = values
        self.affectedRows = affectedRows
    }

    public var startIndex: Int { 0 }
    public var endIndex: Int { values.count }

    public subscript(position: Int) -> Row {
        Row(columns: columns, values: values[position])
    }

    /// The only row, or nil when there is none. More than one is a programmer error.
    public var single: Row? {
        precondition(values.count <= 1, "expected at most one row, got \(values.count)")
        return values.first.map { Row(columns: columns, values: $0) }
    }
}

public struct Row: Sendable {
    public let columns: [String]
    let values: [String?]

    /// Raw text of a column, nil for SQL NULL.
    public subscript(index: Int) -> String? { values[index] }

    public subscript(name: String) -> String? {
        guard let index = columns.firstIndex(of: name) else { return nil }
        return values[index]
    }

    public func decode<T: PostgresDecodable>(_ type: T.Type, at index: Int) throws(PostgresError) -> T {
        guard index < values.count else {
            throw PostgresError(kind: .decoding, serverMessage: "no column at index \(index)")
        }
        guard let text = values[index] else {
            throw PostgresError(kind: .decoding, serverMessage: "column \(columns[index]) is NULL")
        }
        return try T(postgresText: text)
    }

    /// Like `decode`, but SQL NULL gives nil.
    public func decodeIfPresent<T: PostgresDecodable>(_ type: T.Type, at index: Int) throws(PostgresError) -> T? {
        guard index < values.count else {
            throw PostgresError(kind: .decoding, serverMessage: "no column at index \(index)")
        }
        guard let text = values[index] else { return nil }
        return try T(postgresText: text)
    }

    public func decode<T: PostgresDecodable>(_ type: T.Type, column name: String) throws(PostgresError) -> T {
        guard let index = columns.firstIndex(of: name) else {
            throw PostgresError(kind: .decoding, serverMessage: "no column named \(name)")
        }
        return try decode(type, at: index)
    }

    public func decodeIfPresent<T: PostgresDecodable>(_ type: T.Type, column name: String) throws(PostgresError) -> T? {
        guard let index = columns.firstIndex(of: name) else {
            throw PostgresError(kind: .decoding, serverMessage: "no column named \(name)")
        }
        return try decodeIfPresent(type, at: index)
    }
}
