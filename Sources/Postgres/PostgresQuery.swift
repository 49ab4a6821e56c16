/// A SQL statement and its bind parameters.
///
/// Built by string interpolation, every interpolated value becomes a `$n`
/// parameter, so no value is ever spliced into SQL text:
///
///     let query: PostgresQuery = "SELECT balance FROM wallet.wallets WHERE user_id = \(userID)"
///
/// Text that must be SQL (identifiers chosen by code, never by callers) needs
/// the explicit `unsafeSQL:` label; a constant of a fixed set that the
/// planner must see takes `literal:`.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    public var sql: String
    public var parameters: [String?]

    public init(unsafeSQL sql: String, parameters: [String?] = []) {
        self.sql = sql
        self.parameters = parameters
    }

    public init(stringLiteral value: String) {
        self.init(unsafeSQL: value)
    }

    public init(stringInterpolation: StringInterpolation) {
        self.init(unsafeSQL: stringInterpolation.sql, parameters: stringInterpolation.parameters)
    }

    /// The SQL text only: parameters are never printed.
    public var description: String { sql }

    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var parameters: [String?] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            parameters.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) {
            sql += literal
        }

        public mutating func appendInterpolation(_ value: some PostgresEncodable) {
            parameters.append(value.postgresText)
            sql += "$\(parameters.count)"
        }

        public mutating func appendInterpolation(_ value: (some PostgresEncodable)?) {
            parameters.append(value?.postgresText)
            sql += "$\(parameters.count)"
        }

        /// Splices SQL text. Only for text chosen by code, never by a caller.
        public mutating func appendInterpolation(unsafeSQL text: String) {
            sql += text
        }

        /// Splices one value of a fixed set (an enum's raw value, chosen by
        /// code) as a quoted SQL literal, for a comparison the planner must
        /// see as a constant: a partial index's predicate
        /// (`WHERE status = 'held'`) is matched by a literal, never by a
        /// parameter of a generic plan.
        public mutating func appendInterpolation<Value: RawRepresentable>(literal value: Value) where Value.RawValue == String {
            appendQuoted(value.rawValue)
        }

        /// Several such values, as a comma-separated list of literals for `IN (…)`.
        public mutating func appendInterpolation<Value: RawRepresentable>(literals values: [Value])
        where Value.RawValue == String {
            for (index, value) in values.enumerated() {
                if index > 0 { sql += ", " }
                appendQuoted(value.rawValue)
            }
        }

        private mutating func appendQuoted(_ text: String) {
            sql += "'"
            for character in text {
                sql.append(character)
                if character == "'" { sql.append("'") }
            }
            sql += "'"
        }
    }
}
