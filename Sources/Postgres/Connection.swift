import CLibPQ
import Foundation

/// One libpq connection.
///
/// A connection is owned by one pool slot and used by one thread at a time;
/// the pool hands it over, which is why it is `@unchecked Sendable`.
/// Every statement runs with bind parameters through the extended protocol;
/// statements run often are prepared once per connection.
public final class Connection: @unchecked Sendable {
    public struct Options: Sendable {
        /// libpq conninfo string or `postgresql://` URI.
        public var conninfo: String
        public var connectTimeoutSeconds: Int = 5
        /// Server-side limit for every statement on this connection; 0 disables it.
        public var statementTimeoutMilliseconds: Int = 5_000
        /// Server-side limit on waiting for any lock; 0 disables it.
        public var lockTimeoutMilliseconds: Int = 0
        public var applicationName: String = "wallet"
        /// Overrides the database named in `conninfo`, if set.
        public var database: String?

        public init(conninfo: String) {
            self.conninfo = conninfo
        }
    }

    private var handle: OpaquePointer?
    private var preparedNames: [String: String] = [:]
    /// Monotonic time of creation, for the pool's reconnect bookkeeping.
    let generation: UInt64

    /// True once the connection is known to be unusable.
    public private(set) var isBroken = false

    /// True while a transaction block is open or failed, per libpq.
    public var isInTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    public init(options: Options, generation: UInt64 = 0) throws(PostgresError) {
        self.generation = generation
        // libpq expands the first `dbname` as a conninfo string or URI; the
        // keywords after it override what it says.
        var keywords = ["dbname", "connect_timeout", "application_name", "client_encoding"]
        var values = [options.conninfo, String(options.connectTimeoutSeconds), options.applicationName, "UTF8"]
        if let database = options.database {
            keywords.append("dbname")
            values.append(database)
        }
        let connection = withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in
                PQconnectdbParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let connection else {
            throw PostgresError(kind: .connection, serverMessage: "out of memory")
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(connection)
            throw PostgresError(kind: .connection, sqlState: SQLState("08001"), serverMessage: message)
        }
        handle = connection
        // Server notices (NOTICE, WARNING) would go to stderr unstructured.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        try execute("SET statement_timeout = \(unsafeSQL: String(options.statementTimeoutMilliseconds))")
        try execute("SET lock_timeout = \(unsafeSQL: String(options.lockTimeoutMilliseconds))")
        try execute("SET TimeZone = 'UTC'")
    }

    deinit {
        if let handle { PQfinish(handle) }
    }

    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
        isBroken = true
    }

    /// Runs one statement with its parameters and returns its rows.
    @discardableResult
    public func query(_ query: PostgresQuery) throws(PostgresError) -> Rows {
        try run(query, prepared: false)
    }

    /// Like `query`, but prepares the statement on first use and reuses the
    /// plan afterwards. For the statements on the hot path.
    @discardableResult
    public func prepared(_ query: PostgresQuery) throws(PostgresError) -> Rows {
        try run(query, prepared: true)
    }

    /// Runs statements without results and without parameters.
    public func execute(_ query: PostgresQuery) throws(PostgresError) {
        try run(query, prepared: false)
    }

    /// Runs a script of several statements (a migration), in the simple
    /// protocol. It takes no parameters by construction.
    public func executeScript(unsafeSQL script: String) throws(PostgresError) {
        let handle = try liveHandle()
        let result = PQexec(handle, script)
        defer { PQclear(result) }
        try check(result)
    }

    @discardableResult
    private func run(_ query: PostgresQuery, prepared: Bool) throws(PostgresError) -> Rows {
        let handle = try liveHandle()
        let result: OpaquePointer?
        if prepared {
            let name = try statementName(for: query.sql, handle: handle)
            result = withOptionalCStrings(query.parameters) { parameters in
                PQexecPrepared(handle, name, Int32(query.parameters.count), parameters, nil, nil, 0)
            }
        } else {
            result = withOptionalCStrings(query.parameters) { parameters in
                PQexecParams(handle, query.sql, Int32(query.parameters.count), nil, parameters, nil, nil, 0)
            }
        }
        defer { PQclear(result) }
        try check(result)
        return rows(of: result!)
    }

    private func statementName(for sql: String, handle: OpaquePointer) throws(PostgresError) -> String {
        if let name = preparedNames[sql] { return name }
        let name = "s\(preparedNames.count)"
        let result = PQprepare(handle, name, sql, 0, nil)
        defer { PQclear(result) }
        try check(result)
        preparedNames[sql] = name
        return name
    }

    private func liveHandle() throws(PostgresError) -> OpaquePointer {
        guard let handle, !isBroken else {
            throw PostgresError(kind: .connection, sqlState: SQLState("08003"), serverMessage: "connection is closed")
        }
        return handle
    }

    private func check(_ result: OpaquePointer?) throws(PostgresError) {
        let status = result.map(PQresultStatus) ?? PGRES_FATAL_ERROR
        if status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY {
            return
        }
        let connectionLost = handle.map { PQstatus($0) != CONNECTION_OK } ?? true
        if connectionLost { isBroken = true }
        var sqlState: SQLState?
        var message = ""
        var constraint: String?
        if let result {
            sqlState = field(result, CLibPQ_DIAG_SQLSTATE).map(SQLState.init)
            message = field(result, CLibPQ_DIAG_MESSAGE_PRIMARY) ?? String(cString: PQresultErrorMessage(result))
            if let detail = field(result, CLibPQ_DIAG_MESSAGE_DETAIL) { message += " — " + detail }
            constraint = field(result, CLibPQ_DIAG_CONSTRAINT_NAME)
        } else if let handle {
            message = String(cString: PQerrorMessage(handle))
        }
        message = message.trimmingCharacters(in: .whitespacesAndNewlines)
        if connectionLost {
            throw PostgresError(kind: .connection, sqlState: sqlState ?? SQLState("08006"), serverMessage: message)
        }
        // Sessions ended by the server (shutdown, restart) are connection errors too.
        if let sqlState, sqlState.isUnavailable {
            isBroken = true
            throw PostgresError(kind: .connection, sqlState: sqlState, serverMessage: message)
        }
        throw PostgresError(kind: .server, sqlState: sqlState, serverMessage: message, constraint: constraint)
    }

    private func field(_ result: OpaquePointer, _ code: Int32) -> String? {
        PQresultErrorField(result, code).map { String(cString: $0) }
    }

    private func rows(of result: OpaquePointer) -> Rows {
        let rowCount = Int(PQntuples(result))
        let columnCount = Int(PQnfields(result))
        var columns: [String] = []
        columns.reserveCapacity(columnCount)
        for column in 0..<columnCount {
            columns.append(String(cString: PQfname(result, Int32(column))))
        }
        var values: [[String?]] = []
        values.reserveCapacity(rowCount)
        for row in 0..<rowCount {
            var rowValues: [String?] = []
            rowValues.reserveCapacity(columnCount)
            for column in 0..<columnCount {
                if PQgetisnull(result, Int32(row), Int32(column)) == 1 {
                    rowValues.append(nil)
                } else {
                    rowValues.append(String(cString: PQgetvalue(result, Int32(row), Int32(column))))
                }
            }
            values.append(rowValues)
        }
        let affected = Int(String(cString: PQcmdTuples(result))) ?? 0
        return Rows(columns: columns, values: values, affectedRows: affected)
    }
}

/// Calls `body` with a NULL-terminated C array of the strings.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
    let duplicates = strings.map { strdup($0) }
    defer { duplicates.forEach { free($0) } }
    var pointers = duplicates.map { UnsafePointer($0) }
    pointers.append(nil)
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

/// Calls `body` with a C array of optional strings (NULL for SQL NULL).
private func withOptionalCStrings<R>(_ strings: [String?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
    if strings.isEmpty { return body(nil) }
    let duplicates = strings.map { $0.map { strdup($0) } ?? nil }
    defer { duplicates.forEach { free($0) } }
    let pointers = duplicates.map { UnsafePointer($0) }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
