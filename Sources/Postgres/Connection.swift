import CLibPQ
import Foundation

/// One libpq connection.
///
/// A connection is owned by one pool slot and used by one thread at a time;
/// the pool hands it over, which is why it is `@unchecked Sendable`.
/// Every statement runs with bind parameters through the extended protocol;
/// statements run often are prepared once per connection.
///
/// Statements run through libpq's asynchronous calls and wait on the socket
/// with `poll(2)` until `deadline`: a server that stops answering (its
/// processes frozen, say) still acknowledges TCP, so a blocking call would
/// wait forever. At the deadline the connection is closed and broken.
public final class Connection: @unchecked Sendable {
    public struct Options: Sendable {
        /// libpq conninfo string or `postgresql://` URI.
        public var conninfo: String
        /// Most a connection attempt may take, whatever the caller's deadline.
        public var connectTimeoutSeconds: Int = 5
        /// Server-side limit for every statement on this connection; 0 disables it.
        public var statementTimeoutMilliseconds: Int = 5_000
        /// Server-side limit on waiting for any lock; 0 disables it.
        public var lockTimeoutMilliseconds: Int = 0
        /// Over TCP: the kernel gives up on data the server has not
        /// acknowledged after this long (libpq's `tcp_user_timeout`).
        public var tcpUserTimeoutMilliseconds: Int = 10_000
        /// Over TCP: keepalive probes find a peer that vanished while idle.
        public var keepalivesIdleSeconds: Int = 10
        public var keepalivesIntervalSeconds: Int = 3
        public var keepalivesCountMax: Int = 3
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

    /// When statements on this connection must have answered; nil waits as
    /// long as the server takes. The pool sets it to the deadline of the
    /// operation it hands the connection to.
    public var deadline: ContinuousClock.Instant?

    /// True once the connection is known to be unusable.
    public private(set) var isBroken = false

    /// True while a transaction block is open or failed, per libpq.
    public var isInTransaction: Bool {
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// Connects, and sets the session up, by `deadline` at the latest.
    public init(options: Options, generation: UInt64 = 0, deadline: ContinuousClock.Instant? = nil) throws(PostgresError) {
        self.generation = generation
        let connectDeadline = min(deadline ?? .now + .seconds(options.connectTimeoutSeconds),
                                  .now + .seconds(options.connectTimeoutSeconds))
        // libpq expands the first `dbname` as a conninfo string or URI; the
        // keywords after it override what it says.
        var keywords = ["dbname", "connect_timeout", "application_name", "client_encoding", "tcp_user_timeout",
                        "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count"]
        var values = [options.conninfo, String(options.connectTimeoutSeconds), options.applicationName, "UTF8",
                      String(options.tcpUserTimeoutMilliseconds), "1", String(options.keepalivesIdleSeconds),
                      String(options.keepalivesIntervalSeconds), String(options.keepalivesCountMax)]
        if let database = options.database {
            keywords.append("dbname")
            values.append(database)
        }
        let connection = withCStrings(keywords) { keywordPointers in
            withCStrings(values) { valuePointers in
                PQconnectStartParams(keywordPointers, valuePointers, 1)
            }
        }
        guard let connection else {
            throw PostgresError(kind: .connection, serverMessage: "out of memory")
        }
        var polling = PGRES_POLLING_WRITING
        while PQstatus(connection) != CONNECTION_BAD && polling != PGRES_POLLING_OK && polling != PGRES_POLLING_FAILED {
            let events = polling == PGRES_POLLING_READING ? Int16(POLLIN) : Int16(POLLOUT)
            guard Self.waitForSocket(PQsocket(connection), events: events, until: connectDeadline) else {
                PQfinish(connection)
                throw PostgresError(kind: .deadline, serverMessage: "no connection before the deadline")
            }
            polling = PQconnectPoll(connection)
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection)).trimmingCharacters(in: .whitespacesAndNewlines)
            PQfinish(connection)
            throw PostgresError(kind: .connection, sqlState: SQLState("08001"), serverMessage: message)
        }
        handle = connection
        // Server notices (NOTICE, WARNING) would go to stderr unstructured.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        guard PQsetnonblocking(connection, 1) == 0 else {
            close()
            throw PostgresError(kind: .connection, serverMessage: "cannot make the connection non-blocking")
        }
        // One round trip, within the connection's time. synchronous_commit
        // is set here, whatever the server's or the database's default, so
        // that COMMIT returning means the commit is flushed (and, with
        // synchronous standbys configured, flushed on them too): every
        // answer the service gives is durable.
        self.deadline = connectDeadline
        do {
            try execute("""
                SELECT set_config('statement_timeout', \(String(options.statementTimeoutMilliseconds)), false),
                       set_config('lock_timeout', \(String(options.lockTimeoutMilliseconds)), false),
                       set_config('TimeZone', 'UTC', false),
                       set_config('synchronous_commit', 'on', false)
                """)
        } catch {
            // The caller's statement was never sent.
            throw error.unsent
        }
        self.deadline = deadline
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
        let handle = try idleHandle()
        guard PQsendQuery(handle, script) == 1 else { throw lost(sent: true) }
        let result = try awaitResult(handle)
        defer { PQclear(result) }
        try check(result)
    }

    @discardableResult
    private func run(_ query: PostgresQuery, prepared: Bool) throws(PostgresError) -> Rows {
        let handle = try idleHandle()
        let accepted: Int32
        if prepared {
            let name = try statementName(for: query.sql, handle: handle)
            accepted = withOptionalCStrings(query.parameters) { parameters in
                PQsendQueryPrepared(handle, name, Int32(query.parameters.count), parameters, nil, nil, 0)
            }
        } else {
            accepted = withOptionalCStrings(query.parameters) { parameters in
                PQsendQueryParams(handle, query.sql, Int32(query.parameters.count), nil, parameters, nil, nil, 0)
            }
        }
        // Some of it may have left before a failure: counted as sent.
        guard accepted == 1 else { throw lost(sent: true) }
        let result = try awaitResult(handle)
        defer { PQclear(result) }
        try check(result)
        return rows(of: result)
    }

    /// Preparing runs nothing, so a failure here leaves the statement unsent.
    private func statementName(for sql: String, handle: OpaquePointer) throws(PostgresError) -> String {
        if let name = preparedNames[sql] { return name }
        let name = "s\(preparedNames.count)"
        guard PQsendPrepare(handle, name, sql, 0, nil) == 1 else { throw lost(sent: false) }
        let result: OpaquePointer
        do {
            result = try awaitResult(handle)
        } catch {
            throw error.unsent
        }
        defer { PQclear(result) }
        do {
            try check(result)
        } catch {
            throw error.unsent
        }
        preparedNames[sql] = name
        return name
    }

    /// The handle, once it is known that nothing arrived while it was idle.
    /// Nothing is due on an idle connection (the service never LISTENs):
    /// anything readable is the server ending the session (a restart,
    /// `pg_terminate_backend`), its goodbye possibly ahead of the end of
    /// file. Such a connection is given up before anything is sent on it.
    private func idleHandle() throws(PostgresError) -> OpaquePointer {
        guard let handle, !isBroken else {
            throw PostgresError(kind: .connection, sqlState: SQLState("08003"), serverMessage: "connection is closed")
        }
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        guard PQstatus(handle) == CONNECTION_OK, poll(&descriptor, 1, 0) == 0 else {
            close()
            throw PostgresError(kind: .connection, sqlState: SQLState("08006"),
                                serverMessage: "the server ended the session while it was idle", sent: false)
        }
        return handle
    }

    /// Flushes what was sent and collects the answer: the first error, or
    /// else the last result. Throws at the deadline, closing the connection.
    private func awaitResult(_ handle: OpaquePointer) throws(PostgresError) -> OpaquePointer {
        while true {
            let flushed = PQflush(handle)
            if flushed == 0 { break }
            guard flushed > 0 else { throw lost(sent: true) }
            guard Self.waitForSocket(PQsocket(handle), events: Int16(POLLIN | POLLOUT), until: deadline) else {
                throw expired()
            }
            guard PQconsumeInput(handle) == 1 else { throw lost(sent: true) }
        }
        var kept: OpaquePointer?
        while true {
            while PQisBusy(handle) == 1 {
                guard Self.waitForSocket(PQsocket(handle), events: Int16(POLLIN), until: deadline) else {
                    PQclear(kept)
                    throw expired()
                }
                guard PQconsumeInput(handle) == 1 else {
                    PQclear(kept)
                    throw lost(sent: true)
                }
            }
            guard let result = PQgetResult(handle) else { break }
            if let previous = kept, Self.isError(previous) {
                PQclear(result)
            } else {
                PQclear(kept)
                kept = result
            }
        }
        guard let kept else { throw lost(sent: true) }
        return kept
    }

    private static func isError(_ result: OpaquePointer) -> Bool {
        let status = PQresultStatus(result)
        return !(status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY)
    }

    /// Waits until the socket is ready for `events` (or has failed), or
    /// `deadline` passes; false at the deadline.
    private static func waitForSocket(_ socket: Int32, events: Int16, until deadline: ContinuousClock.Instant?) -> Bool {
        while true {
            var timeoutMilliseconds: Int32 = -1
            if let deadline {
                let remaining = deadline - .now
                guard remaining > .zero else { return false }
                let (seconds, attoseconds) = remaining.components
                timeoutMilliseconds = Int32(clamping: seconds * 1_000 + attoseconds / 1_000_000_000_000_000 + 1)
            }
            var descriptor = pollfd(fd: socket, events: events, revents: 0)
            let ready = poll(&descriptor, 1, timeoutMilliseconds)
            // Ready, or failed in a way libpq will report on the next call.
            if ready > 0 || (ready < 0 && errno != EINTR) { return true }
        }
    }

    /// The connection broke; it is closed and unusable from now on.
    private func lost(sent: Bool) -> PostgresError {
        let message = handle.map { String(cString: PQerrorMessage($0)) } ?? "connection is closed"
        close()
        return PostgresError(kind: .connection, sqlState: SQLState("08006"),
                             serverMessage: message.trimmingCharacters(in: .whitespacesAndNewlines), sent: sent)
    }

    /// The deadline passed while waiting on the server. The statement was
    /// sent (or was being sent), so it may still run; the connection is
    /// closed, which ends the session once the server notices.
    private func expired() -> PostgresError {
        close()
        return PostgresError(kind: .deadline, serverMessage: "no answer before the deadline", sent: true)
    }

    private func check(_ result: OpaquePointer) throws(PostgresError) {
        guard Self.isError(result) else { return }
        let connectionLost = handle.map { PQstatus($0) != CONNECTION_OK } ?? true
        if connectionLost { isBroken = true }
        let sqlState = field(result, CLibPQ_DIAG_SQLSTATE).map(SQLState.init)
        var message = field(result, CLibPQ_DIAG_MESSAGE_PRIMARY) ?? String(cString: PQresultErrorMessage(result))
        if let detail = field(result, CLibPQ_DIAG_MESSAGE_DETAIL) { message += " — " + detail }
        let constraint = field(result, CLibPQ_DIAG_CONSTRAINT_NAME)
        message = message.trimmingCharacters(in: .whitespacesAndNewlines)
        if connectionLost {
            close()
            throw PostgresError(kind: .connection, sqlState: sqlState ?? SQLState("08006"), serverMessage: message, sent: true)
        }
        // Sessions ended by the server (shutdown, restart) are connection errors too.
        if let sqlState, sqlState.isUnavailable {
            close()
            throw PostgresError(kind: .connection, sqlState: sqlState, serverMessage: message, sent: true)
        }
        throw PostgresError(kind: .server, sqlState: sqlState, serverMessage: message, constraint: constraint, sent: true)
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
