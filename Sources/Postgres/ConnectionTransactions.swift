/// Transactions and session settings on one connection, for the work that
/// runs outside the pool: migrations and the operator's commands.
extension Connection {
    /// Runs `body` inside BEGIN … COMMIT. If `body` or COMMIT throws, the
    /// transaction is rolled back (on a connection still usable) and the
    /// error rethrown. Unlike `ConnectionPool.withTransaction`, nothing is
    /// retried: the caller owns this connection and decides.
    public func withTransaction<T>(_ body: (Connection) throws -> T) throws -> T {
        try execute("BEGIN")
        do {
            let value = try body(self)
            try execute("COMMIT")
            return value
        } catch {
            if !isBroken { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Runs `body` with no server-side statement timeout, for work that
    /// takes what it takes (migrations, a ledger-wide check), then puts the
    /// session's own limit back. (`RESET` would not: it restores the
    /// server's default, not the value this connection was opened with.)
    /// A connection whose limit cannot be put back is closed, so that no
    /// later statement on it runs unbounded.
    @discardableResult
    public func withoutStatementTimeout<T>(_ body: (Connection) throws -> T) throws -> T {
        let previous = try query("SELECT current_setting('statement_timeout')").single!.decode(String.self, at: 0)
        try execute("SELECT set_config('statement_timeout', '0', false)")
        defer {
            do {
                try execute("SELECT set_config('statement_timeout', \(previous), false)")
            } catch {
                close()
            }
        }
        return try body(self)
    }
}
