import CLibPQ
import Foundation

/// One libpq connection.
///
/// A connection is owned by one pool slot and used by one thread at a time;
/// the pool hands it over, which is why it is `@unchecked Sendable`.
/// Every statement runs with bind parameters through the extended protocol;
/// statements run often are prepared once per connection, unless
/// `Options.preparedStatements` is off.
///
/// Commits are never cancelled from here: at a deadline the connection is
/// closed, and the caller answers that the outcome is unknown. A commit that
/// the server confirms only locally (the wait for a synchronous standby was
/// cancelled on the server, which PostgreSQL reports as success with a
/// WARNING) is reported as `.unconfirmedCommit`, never as success.
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
        /// Whether `prepared` statements are prepared once per connection
        /// (named server-side statements) or sent whole every time. A pooler
        /// in transaction mode (PgBouncer 1.18) gives each transaction a
        /// server connection of its choosing, where a named statement
        /// prepared through another one does not exist.
        public var preparedStatements = true

        public init(conninfo: String) {
            self.conninfo = conninfo
        }
    }

    private var handle: OpaquePointer?
    private var preparedNames: [String: String] = [:]
    private let options: Options
    /// What the server's notices said during the current statement.
    private let notices = Notices()
    /// Set by `withLocalSettings`: the next statement carries the
    /// transaction's settings.
    private var localSettingsDue = false
    /// Statements run inside `withLocalSettings`, nil outside it.
    private var statementsInScope: Int?
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
        self.options = options
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
        // Server notices would go to stderr unstructured; the receiver keeps
        // the one that matters (see `Notices`) and drops the rest. `notices`
        // lives as long as this object, which outlives the PGconn.
        PQsetNoticeReceiver(connection, receiveNotice, Unmanaged.passUnretained(notices).toOpaque())
        // Error texts carry the SQLSTATE: when the server's last error is
        // followed by the end of the connection, libpq keeps only its text.
        PQsetErrorVerbosity(connection, PQERRORS_SQLSTATE)
        guard PQsetnonblocking(connection, 1) == 0 else {
            close()
            throw PostgresError(kind: .connection, serverMessage: "cannot make the connection non-blocking")
        }
        // One round trip, within the connection's time. synchronous_commit
        // is set here, whatever the server's or the database's default, so
        // that COMMIT returning means the commit is flushed (and, with
        // synchronous standbys configured, flushed on them too): every
        // answer the service gives is durable. Behind a pooler in
        // transaction mode these session settings may not follow the
        // connection (TimeZone does: PgBouncer tracks it), so the
        // transactions that write set theirs again (`begin`,
        // `withLocalSettings`).
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

    /// Runs `body` and returns, with its result, the texts of the NOTICEs
    /// the server sent meanwhile (at most 10,000), which are dropped
    /// otherwise: for a test that reads what the server reports, such as
    /// auto_explain's plans.
    public func collectingNotices<T>(_ body: (Connection) throws -> T) rethrows -> (result: T, notices: [String]) {
        precondition(notices.collected == nil, "collectingNotices does not nest")
        notices.collected = []
        defer { notices.collected = nil }
        let result = try body(self)
        return (result, notices.collected ?? [])
    }

    /// Runs statements without results and without parameters.
    public func execute(_ query: PostgresQuery) throws(PostgresError) {
        try run(query, prepared: false)
    }

    /// Opens a transaction block with this connection's statement and lock
    /// timeouts and `synchronous_commit` set for it alone, in the one round
    /// trip BEGIN takes: a pooler in transaction mode may have given this
    /// transaction a server connection on which the session settings were
    /// never made.
    public func begin() throws(PostgresError) {
        try executeScript(unsafeSQL: "BEGIN; SET LOCAL statement_timeout = \(options.statementTimeoutMilliseconds); "
            + "SET LOCAL lock_timeout = \(options.lockTimeoutMilliseconds); SET LOCAL synchronous_commit = on")
    }

    /// Runs `body`, whose first statement is a transaction of its own (no
    /// BEGIN), with the settings `begin` makes sent ahead of it in the same
    /// round trip (a libpq pipeline: both statements before one Sync form
    /// one implicit transaction).
    ///
    /// `body` sends one statement: a second would run as a transaction of
    /// its own, without the settings.
    public func withLocalSettings<T>(_ body: (Connection) throws -> T) throws -> T {
        localSettingsDue = true
        statementsInScope = 0
        defer {
            localSettingsDue = false
            assert((statementsInScope ?? 0) <= 1, "withLocalSettings ran \(statementsInScope ?? 0) statements; the settings cover one")
            statementsInScope = nil
        }
        return try body(self)
    }

    static let localSettingsSQL = "SELECT set_config('statement_timeout', $1, true), "
        + "set_config('lock_timeout', $2, true), set_config('synchronous_commit', 'on', true)"

    /// Runs a script of several statements (a migration), in the simple
    /// protocol. It takes no parameters by construction.
    public func executeScript(unsafeSQL script: String) throws(PostgresError) {
        let handle = try idleHandle()
        notices.reset()
        guard PQsendQuery(handle, script) == 1 else { throw lost(sent: true) }
        let answer = try awaitResult(handle)
        defer { PQclear(answer.result) }
        try check(answer, commitPrecedesAnswer: true)
        try confirmCommit()
    }

    @discardableResult
    private func run(_ query: PostgresQuery, prepared: Bool) throws(PostgresError) -> Rows {
        let prepared = prepared && options.preparedStatements
        statementsInScope? += 1
        if localSettingsDue {
            localSettingsDue = false
            return try runWithLocalSettings(query, prepared: prepared)
        }
        let handle = try idleHandle()
        notices.reset()
        // Some of it may have left before a failure: counted as sent.
        guard try send(query, prepared: prepared, handle: handle) else { throw lost(sent: true) }
        let answer = try awaitResult(handle)
        defer { PQclear(answer.result) }
        try check(answer)
        try confirmCommit()
        return rows(of: answer.result)
    }

    /// Queues `query` on the connection (and prepares it first, when asked
    /// and not yet done); false when libpq refused it.
    private func send(_ query: PostgresQuery, prepared: Bool, handle: OpaquePointer) throws(PostgresError) -> Bool {
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
        return accepted == 1
    }

    /// `query` as a transaction of its own, after the statement that sets
    /// the transaction's settings, in one pipeline: one round trip.
    private func runWithLocalSettings(_ query: PostgresQuery, prepared: Bool) throws(PostgresError) -> Rows {
        let handle = try idleHandle()
        let settings = PostgresQuery(unsafeSQL: Self.localSettingsSQL, parameters: [
            String(options.statementTimeoutMilliseconds), String(options.lockTimeoutMilliseconds),
        ])
        // Prepared statements are made before the pipeline starts: a
        // round trip on their first use only.
        if prepared {
            _ = try statementName(for: settings.sql, handle: handle)
            _ = try statementName(for: query.sql, handle: handle)
        }
        notices.reset()
        guard PQenterPipelineMode(handle) == 1 else { throw lost(sent: false) }
        guard try send(settings, prepared: prepared, handle: handle) else { throw lost(sent: false) }
        guard try send(query, prepared: prepared, handle: handle), PQpipelineSync(handle) == 1 else {
            throw lost(sent: true)
        }
        let settingsAnswer = try awaitResult(handle)
        defer { PQclear(settingsAnswer.result) }
        let answer = try awaitResult(handle)
        defer { PQclear(answer.result) }
        // Refused settings skip the statement (PGRES_PIPELINE_ABORTED):
        // their error is the statement's.
        let reported = Self.isError(settingsAnswer.result) ? settingsAnswer : answer
        if Self.isError(reported.result) {
            // Nothing of the transaction commits. The Sync is awaited so the
            // connection can be used again; when the error was the session
            // ending, the connection's end is no news: the error is.
            _ = try? finishPipeline(handle)
            try check(reported)
        }
        // The implicit transaction commits at the Sync, after the statement
        // answered: an error or a broken connection there leaves the
        // outcome open.
        try finishPipeline(handle)
        try confirmCommit()
        return rows(of: answer.result)
    }

    /// Waits for the pipeline's Sync and leaves pipeline mode. Anything but
    /// a clean Sync closes the connection: what was sent may have committed.
    private func finishPipeline(_ handle: OpaquePointer) throws(PostgresError) {
        while true {
            while PQisBusy(handle) == 1 {
                guard Self.waitForSocket(PQsocket(handle), events: Int16(POLLIN), until: deadline) else { throw expired() }
                guard PQconsumeInput(handle) == 1 else { throw lost(sent: true) }
            }
            guard let result = PQgetResult(handle) else { continue }
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
            // A result past the statement's own is an error from the commit
            // or the session ending: the outcome is unknown.
            throw lost(sent: true)
        }
        guard PQexitPipelineMode(handle) == 1 else { throw lost(sent: true) }
    }

    /// Throws `.unconfirmedCommit` when the statement just answered drew the
    /// server's warning that its commit was not confirmed by the standby.
    private func confirmCommit() throws(PostgresError) {
        guard notices.commitUnconfirmed else { return }
        throw PostgresError(kind: .unconfirmedCommit, sqlState: notices.sqlState, serverMessage: notices.message, sent: true)
    }

    /// Preparing runs nothing, so a failure here leaves the statement unsent.
    private func statementName(for sql: String, handle: OpaquePointer) throws(PostgresError) -> String {
        if let name = preparedNames[sql] { return name }
        let name = "s\(preparedNames.count)"
        guard PQsendPrepare(handle, name, sql, 0, nil) == 1 else { throw lost(sent: false) }
        let answer: Answer
        do {
            answer = try awaitResult(handle)
        } catch {
            throw error.unsent
        }
        defer { PQclear(answer.result) }
        do {
            try check(answer)
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

    /// A statement's answer: the first error, or else the last result.
    private struct Answer {
        var result: OpaquePointer
        /// The error came after a result that completed the statement (the
        /// session ended between the statement and its commit, say).
        var errorAfterCompletion: Bool
    }

    /// Flushes what was sent and collects the answer, up to the end of the
    /// current statement's results. Throws at the deadline, closing the
    /// connection.
    private func awaitResult(_ handle: OpaquePointer) throws(PostgresError) -> Answer {
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
        var errorAfterCompletion = false
        // Once reading fails (the server closed the connection), libpq
        // still hands over what arrived before: the server's last error,
        // say, whose SQLSTATE tells whether the statement ran.
        var readFailed = false
        var resultsMax = 64
        while true {
            while !readFailed, PQisBusy(handle) == 1 {
                guard Self.waitForSocket(PQsocket(handle), events: Int16(POLLIN), until: deadline) else {
                    PQclear(kept)
                    throw expired()
                }
                if PQconsumeInput(handle) != 1 { readFailed = true }
            }
            resultsMax -= 1
            guard resultsMax > 0, let result = PQgetResult(handle) else { break }
            if let previous = kept, Self.isError(previous) {
                PQclear(result)
            } else {
                if kept != nil, Self.isError(result) { errorAfterCompletion = true }
                PQclear(kept)
                kept = result
            }
        }
        guard let kept else { throw lost(sent: true) }
        return Answer(result: kept, errorAfterCompletion: errorAfterCompletion)
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

    /// The connection broke; it is closed and unusable from now on. After
    /// the server's warning that the wait for the standby was cancelled,
    /// the commit happened here: the session ending afterwards (a
    /// termination ends the wait so) changes nothing about that.
    private func lost(sent: Bool) -> PostgresError {
        let message = handle.map { String(cString: PQerrorMessage($0)) } ?? "connection is closed"
        close()
        if sent, notices.commitUnconfirmed {
            return PostgresError(kind: .unconfirmedCommit, sqlState: notices.sqlState,
                                 serverMessage: notices.message + " — then: " + message, sent: true)
        }
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

    /// Throws the error `answer` carries, if any, saying whether the
    /// statement may have committed (`sent`).
    ///
    /// Only the server's own error proves that nothing committed, and only
    /// where the commit follows the statement's answer: the extended
    /// protocol (every statement here but scripts) commits an implicit
    /// transaction at Sync, after the statement's results, so the server's
    /// error in their place means the statement stopped before its commit.
    /// Everything else may have committed:
    /// - the warning that the wait for a synchronous standby was cancelled
    ///   came first: the commit happened here, unconfirmed;
    /// - the error came after the statement's own results;
    /// - no SQLSTATE: libpq's report of a connection that broke;
    /// - class 08: a pooler or the network speaking for the server (PgBouncer
    ///   answers "server conn crashed?" with 08P01 when the server's session
    ///   ends, whenever that was);
    /// - a script in the simple protocol (`commitPrecedesAnswer`), where the
    ///   last statement commits before its answer is sent, and a session that
    ///   ends in place of that answer may have committed it.
    private func check(_ answer: Answer, commitPrecedesAnswer: Bool = false) throws(PostgresError) {
        let result = answer.result
        guard Self.isError(result) else { return }
        let connectionLost = handle.map { PQstatus($0) != CONNECTION_OK } ?? true
        if connectionLost { isBroken = true }
        let sqlState = field(result, CLibPQ_DIAG_SQLSTATE).map(SQLState.init)
            ?? Self.serverSQLState(in: String(cString: PQresultErrorMessage(result)))
        var message = field(result, CLibPQ_DIAG_MESSAGE_PRIMARY) ?? String(cString: PQresultErrorMessage(result))
        if let detail = field(result, CLibPQ_DIAG_MESSAGE_DETAIL) { message += " — " + detail }
        let constraint = field(result, CLibPQ_DIAG_CONSTRAINT_NAME)
        message = message.trimmingCharacters(in: .whitespacesAndNewlines)
        if notices.commitUnconfirmed {
            close()
            throw PostgresError(kind: .unconfirmedCommit, sqlState: notices.sqlState,
                                serverMessage: notices.message + " — then: " + message, sent: true)
        }
        let sessionEnded = connectionLost || field(result, CLibPQ_DIAG_SEVERITY_NONLOCALIZED) != "ERROR"
        let mayHaveCommitted = answer.errorAfterCompletion || sqlState == nil || sqlState?.isConnectionException == true
            || (commitPrecedesAnswer && sessionEnded)
        if connectionLost {
            close()
            throw PostgresError(kind: .connection, sqlState: sqlState ?? SQLState("08006"), serverMessage: message,
                                sent: mayHaveCommitted)
        }
        // Sessions ended by the server (shutdown, restart) are connection
        // errors too, and so is a server that takes no writes (during a
        // promotion): a new connection may reach the new primary.
        if let sqlState, sqlState.isUnavailable {
            close()
            throw PostgresError(kind: .connection, sqlState: sqlState, serverMessage: message, sent: mayHaveCommitted)
        }
        throw PostgresError(kind: .server, sqlState: sqlState, serverMessage: message, constraint: constraint, sent: true)
    }

    /// The SQLSTATE of a server error inside a message libpq made itself:
    /// with `PQERRORS_SQLSTATE`, the server's report reads
    /// "SEVERITY:  XXXXX" on a line of its own (a FATAL before the server
    /// closed the connection, say), ahead of libpq's own words.
    static func serverSQLState(in message: String) -> SQLState? {
        for line in message.split(separator: "\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2 else { continue }
            let code = parts[1].trimmingCharacters(in: .whitespaces)
            if code.utf8.count == 5, code.utf8.allSatisfy({ (48...57).contains($0) || (65...90).contains($0) }) {
                return SQLState(code)
            }
        }
        return nil
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

/// What a connection's server notices reported during the current
/// statement. Written by `receiveNotice` on the thread running the
/// statement (libpq calls it while reading the answer).
///
/// The notice that matters is PostgreSQL's warning that the wait for a
/// synchronous standby was cancelled ("canceling wait for synchronous
/// replication", SQLSTATE 01000, or 57P01 when the session is being
/// terminated): the commit happened on this server only, and a failover
/// can lose it. It is recognised by severity and SQLSTATE, which do not
/// depend on the server's message language; any such WARNING on a
/// statement makes its outcome unknown, which costs a retry at worst.
///
/// The texts of NOTICEs are kept too, only while `Connection.collectingNotices`
/// asks for them, and at most `collectedMax` of them.
final class Notices {
    static let collectedMax = 10_000

    private(set) var commitUnconfirmed = false
    private(set) var sqlState: SQLState?
    private(set) var message = ""
    /// NOTICE texts in arrival order while collecting; nil otherwise.
    var collected: [String]?

    func reset() {
        commitUnconfirmed = false
    }

    func receive(_ result: OpaquePointer) {
        let severity = PQresultErrorField(result, CLibPQ_DIAG_SEVERITY_NONLOCALIZED).map { String(cString: $0) }
        if severity == "NOTICE", let count = collected?.count, count < Self.collectedMax {
            collected?.append(PQresultErrorField(result, CLibPQ_DIAG_MESSAGE_PRIMARY).map { String(cString: $0) } ?? "")
        }
        let state = PQresultErrorField(result, CLibPQ_DIAG_SQLSTATE).map { SQLState(String(cString: $0)) }
        guard severity == "WARNING", let state, state == .warning || state == .adminShutdown else { return }
        commitUnconfirmed = true
        sqlState = state
        message = PQresultErrorField(result, CLibPQ_DIAG_MESSAGE_PRIMARY).map { String(cString: $0) } ?? ""
    }
}

/// libpq's notice receiver: a C function pointer, with the connection's
/// `Notices` as its context.
private let receiveNotice: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?) -> Void = { context, result in
    guard let context, let result else { return }
    Unmanaged<Notices>.fromOpaque(context).takeUnretainedValue().receive(result)
}
