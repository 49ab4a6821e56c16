public import Foundation
import Timestamps

/// A Swift value that can be sent as a text-format bind parameter.
public protocol PostgresEncodable: Sendable {
    /// The PostgreSQL text representation; nil is SQL NULL.
    var postgresText: String? { get }
}

/// A Swift value that can be read from a text-format result column.
public protocol PostgresDecodable {
    init(postgresText text: String) throws(PostgresError)
}

extension String: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self }
    public init(postgresText text: String) { self = text }
}

extension Substring: PostgresEncodable {
    public var postgresText: String? { String(self) }
}

/// Numbers travel as their decimal text, which Swift's own numeric
/// parsing reads back.
extension PostgresEncodable where Self: LosslessStringConvertible & Numeric {
    public var postgresText: String? { String(describing: self) }
}

extension PostgresDecodable where Self: LosslessStringConvertible & Numeric {
    public init(postgresText text: String) throws(PostgresError) {
        guard let value = Self(text) else { throw .undecodable(text, as: String(describing: Self.self)) }
        self = value
    }
}

extension Int: PostgresEncodable, PostgresDecodable {}

extension Int64: PostgresEncodable, PostgresDecodable {}

extension Int32: PostgresEncodable, PostgresDecodable {}

extension Double: PostgresEncodable, PostgresDecodable {}

extension Bool: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self ? "t" : "f" }
    public init(postgresText text: String) throws(PostgresError) {
        switch text {
        case "t", "true": self = true
        case "f", "false": self = false
        default: throw .undecodable(text, as: "Bool")
        }
    }
}

/// A text column that holds one of a fixed set of values, read into the
/// Swift enum whose raw values are that set and sent as its raw value. A
/// value the enum does not have is a decoding error, never a default: the
/// database and the code disagree, and the caller must not go on as if not.
/// The conforming types say so with an empty extension.
extension PostgresDecodable where Self: RawRepresentable, RawValue == String {
    public init(postgresText text: String) throws(PostgresError) {
        guard let value = Self(rawValue: text) else {
            // The column holds a code, not data; a long value is cut short.
            throw PostgresError(kind: .decoding,
                                serverMessage: "\(String(reflecting: Self.self)) has no value \(text.prefix(64))")
        }
        self = value
    }
}

extension PostgresEncodable where Self: RawRepresentable, RawValue == String {
    public var postgresText: String? { rawValue }
}

/// `bytea`, in PostgreSQL's hex format (`\x0a1b…`).
public struct ByteA: Hashable, Sendable, PostgresEncodable, PostgresDecodable {
    public var bytes: [UInt8]

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var postgresText: String? {
        var text: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
        text.reserveCapacity(2 + bytes.count * 2)
        for byte in bytes {
            text.append(hexDigits[Int(byte >> 4)])
            text.append(hexDigits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    public init(postgresText text: String) throws(PostgresError) {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x"), utf8.count % 2 == 0 else {
            throw .undecodable("bytea", as: "ByteA")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((utf8.count - 2) / 2)
        var index = 2
        while index < utf8.count {
            guard let high = hexValue(utf8[index]), let low = hexValue(utf8[index + 1]) else {
                throw .undecodable("bytea", as: "ByteA")
            }
            bytes.append(high << 4 | low)
            index += 2
        }
        self.bytes = bytes
    }
}

/// A one-dimensional array parameter (`text[]`, `bigint[]`, …), sent as an
/// array literal with every element quoted, so no element can break out.
extension Array: PostgresEncodable where Element: PostgresEncodable {
    public var postgresText: String? {
        // Built as UTF-8 bytes: batches send arrays of hundreds of elements.
        var bytes: [UInt8] = [UInt8(ascii: "{")]
        bytes.reserveCapacity(2 + count * 16)
        for (index, element) in enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            guard let value = element.postgresText else {
                bytes.append(contentsOf: [UInt8(ascii: "N"), UInt8(ascii: "U"), UInt8(ascii: "L"), UInt8(ascii: "L")])
                continue
            }
            appendQuoted(value, to: &bytes)
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A composite value (`ROW(…)`), sent as a record literal with every
/// non-NULL field quoted; an array of records is an array parameter of the
/// composite type (`$1::wallet.debit_request[]`).
public struct PostgresRecord: Sendable, PostgresEncodable {
    public var fields: [String?]

    /// The fields in the composite type's order.
    public init(_ fields: [(any PostgresEncodable)?]) {
        self.fields = fields.map { $0?.postgresText }
    }

    public var postgresText: String? {
        var bytes: [UInt8] = [UInt8(ascii: "(")]
        for (index, field) in fields.enumerated() {
            if index > 0 { bytes.append(UInt8(ascii: ",")) }
            // Nothing between the commas is NULL; "" is an empty string.
            guard let field else { continue }
            appendQuoted(field, to: &bytes)
        }
        bytes.append(UInt8(ascii: ")"))
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// A `timestamptz`, read once into a `Date`: the one decoder of the times
/// the database returns. Connections run with `TimeZone` UTC and the ISO
/// date style, so the server writes `2026-01-02 03:04:05.6789+00` (no
/// fraction when it is zero, at most six digits). A value outside what the
/// service stores (BC, after year 9999, `infinity`) is refused. A `Date`
/// goes to the server in `Date.rfc3339`'s form, which it reads back exactly.
extension Date: PostgresDecodable, PostgresEncodable {
    public init(postgresText text: String) throws(PostgresError) {
        let bytes = Array(text.utf8)
        // "YYYY-MM-DD HH:MM:SS", an optional fraction, then "+00".
        guard bytes.count >= 22, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
              bytes[10] == UInt8(ascii: " "), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              bytes.suffix(3) == Array("+00".utf8),
              let year = Self.number(bytes[0..<4]), let month = Self.number(bytes[5..<7]),
              let day = Self.number(bytes[8..<10]), let hour = Self.number(bytes[11..<13]),
              let minute = Self.number(bytes[14..<16]), let second = Self.number(bytes[17..<19])
        else { throw .undecodable(text, as: "Date") }
        var microsecond = 0
        let fraction = bytes[19..<(bytes.count - 3)]
        if !fraction.isEmpty {
            guard fraction.first == UInt8(ascii: "."), (2...7).contains(fraction.count),
                  let digits = Self.number(fraction.dropFirst()) else { throw .undecodable(text, as: "Date") }
            microsecond = digits
            for _ in fraction.count..<7 { microsecond *= 10 }
        }
        guard let date = Date(utc: year, month, day, hour, minute, second, microsecond: microsecond) else {
            throw .undecodable(text, as: "Date")
        }
        self = date
    }

    public var postgresText: String? { rfc3339 }

    /// The decimal digits of `bytes`, or nil when one is not a digit.
    private static func number(_ bytes: ArraySlice<UInt8>) -> Int? {
        var value = 0
        for byte in bytes {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return value
    }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public var postgresText: String? {
        switch self {
        case .none: nil
        case .some(let value): value.postgresText
        }
    }
}

/// `text` in double quotes, with `"` and `\` escaped by a backslash: the
/// quoting array and record literals share.
private func appendQuoted(_ text: String, to bytes: inout [UInt8]) {
    bytes.append(UInt8(ascii: "\""))
    for byte in text.utf8 {
        if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { bytes.append(UInt8(ascii: "\\")) }
        bytes.append(byte)
    }
    bytes.append(UInt8(ascii: "\""))
}

private let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

private func hexValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}

extension PostgresError {
    static func undecodable(_ text: String, as type: String) -> PostgresError {
        PostgresError(kind: .decoding, serverMessage: "cannot decode a \(text.count)-character value as \(type)")
    }
}
