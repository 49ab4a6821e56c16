import JSON

/// What a JSON number must be for PostgreSQL to keep it in a JSONB column.
///
/// JSONB reads every number with `numeric_in`, so a number is stored only
/// when `numeric` can hold it (PostgreSQL 15, `numeric.c`):
///
/// - an exponent below 2^30 − 1 either way (`set_var_from_str` refuses any
///   larger one before it looks at the digits);
/// - at most 131,072 digits before the decimal point: the weight of the
///   leading base-10,000 digit is a 16-bit field;
/// - at most 16,383 digits after it, counted as written, trailing zeros
///   included (the display scale, 14 bits), for zero too.
///
/// Anything else fails the whole statement with SQLSTATE 22003, so it is
/// refused here, as the client's mistake, before any batch carries it.
enum StorableNumber {
    static let integerDigitsMax: Int64 = 131_072
    static let fractionDigitsMax: Int64 = 16_383
    /// `INT_MAX / 2`: an exponent this large, or larger, is refused.
    static let exponentLimit: Int64 = 1_073_741_823

    static let message = "is a number PostgreSQL cannot store: at most 131072 digits before the decimal point "
        + "and 16383 after"

    /// Whether PostgreSQL can store `literal`, a JSON number as the strict
    /// parser accepted it (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`).
    static func isStorable(_ literal: String) -> Bool {
        var bytes = Array(literal.utf8)[...]
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        let integer = bytes.prefix { isDigit($0) }
        bytes = bytes.dropFirst(integer.count)
        var fraction: ArraySlice<UInt8> = []
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            fraction = bytes.prefix { isDigit($0) }
            bytes = bytes.dropFirst(fraction.count)
        }
        var exponent: Int64 = 0
        if let marker = bytes.first, marker == UInt8(ascii: "e") || marker == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            var negative = false
            if let sign = bytes.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
                negative = sign == UInt8(ascii: "-")
                bytes = bytes.dropFirst()
            }
            let digits = bytes.drop { $0 == UInt8(ascii: "0") }
            // Ten digits hold any exponent up to the limit; more are past it.
            guard digits.count <= 10 else { return false }
            let magnitude = digits.reduce(Int64(0)) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
            guard magnitude < exponentLimit else { return false }
            exponent = negative ? -magnitude : magnitude
        }
        // The display scale: digits after the point once the exponent has moved it.
        guard max(0, Int64(fraction.count) - exponent) <= fractionDigitsMax else { return false }
        // The power of ten of the leading non-zero digit; zero has none.
        let leading: Int64
        if let index = integer.firstIndex(where: { $0 != UInt8(ascii: "0") }) {
            leading = Int64(integer.endIndex - index - 1) + exponent
        } else if let index = fraction.firstIndex(where: { $0 != UInt8(ascii: "0") }) {
            leading = -Int64(index - fraction.startIndex + 1) + exponent
        } else {
            return true
        }
        return leading < integerDigitsMax
    }

    /// The paths (`metadata.a.b[2]`) of the numbers in `value` PostgreSQL
    /// cannot store, in document order.
    static func unstorable(in value: JSONValue, at path: String) -> [String] {
        switch value {
        case .number(let literal):
            isStorable(literal) ? [] : [path]
        case .object(let members):
            members.flatMap { unstorable(in: $0.value, at: path + "." + $0.key) }
        case .array(let elements):
            elements.enumerated().flatMap { unstorable(in: $0.element, at: path + "[\($0.offset)]") }
        default:
            []
        }
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
