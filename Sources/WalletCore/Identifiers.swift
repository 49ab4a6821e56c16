/// Domain values. Each one is valid by construction: the failable
/// initialisers are the only way in, and they hold the rules. Each states
/// its rule once (`rule`), from the same constants its check uses, for the
/// field errors that name it.

/// A player, as the calling app names them: 1–128 characters of
/// `[A-Za-z0-9._:@-]`, but not `.` or `..`: URLs name the id as a path
/// segment, and every URL library resolves those two away before sending.
public struct UserID: Hashable, Sendable, CustomStringConvertible {
    public static let lengthMax = 128
    public static let rule = "must be 1-\(lengthMax) characters of [A-Za-z0-9._:@-], and not . or .."
    public let rawValue: String

    public init?(_ text: String) {
        guard Self.isValid(text) else { return nil }
        rawValue = text
    }

    static func isValid(_ text: String) -> Bool {
        let bytes = text.utf8
        return (1...lengthMax).contains(bytes.count) && bytes.allSatisfy(isIdentifierByte) && text != "." && text != ".."
    }

    public var description: String { rawValue }
}

/// An App Store transaction id (the flowNO) that ties a payment to coins.
/// Same alphabet and length as a user id.
public struct FlowNumber: Hashable, Sendable, CustomStringConvertible {
    public static let rule = UserID.rule
    public let rawValue: String

    public init?(_ text: String) {
        guard UserID.isValid(text) else { return nil }
        rawValue = text
    }

    public var description: String { rawValue }
}

/// A catalog product id: 1–128 characters of `[A-Za-z0-9._-]`.
public struct ProductID: Hashable, Sendable, CustomStringConvertible {
    public static let lengthMax = 128
    public static let rule = "must be 1-\(lengthMax) characters of [A-Za-z0-9._-]"
    public let rawValue: String

    public init?(_ text: String) {
        let bytes = text.utf8
        guard (1...Self.lengthMax).contains(bytes.count),
              bytes.allSatisfy({ isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") })
        else { return nil }
        rawValue = text
    }

    public var description: String { rawValue }
}

/// A currency code: `[a-z][a-z0-9_]{0,31}`. Which currencies exist is the
/// catalog's business; this only checks the spelling.
public struct Currency: Hashable, Sendable, CustomStringConvertible {
    public static let lengthMax = 32
    public static let rule = "must match [a-z][a-z0-9_]{0,\(lengthMax - 1)}"
    public let rawValue: String

    public static let coin = Currency(uncheckedRawValue: "coin")

    public init?(_ text: String) {
        let bytes = Array(text.utf8)
        guard (1...Self.lengthMax).contains(bytes.count), (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(bytes[0]),
              bytes.allSatisfy({ (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) || isDigit($0) || $0 == UInt8(ascii: "_") })
        else { return nil }
        rawValue = text
    }

    private init(uncheckedRawValue: String) {
        rawValue = uncheckedRawValue
    }

    public var description: String { rawValue }
}

/// A positive amount in the currency's smallest unit, at most 10^12.
public struct Amount: Hashable, Sendable, Comparable, CustomStringConvertible {
    public static let maximum: Int64 = 1_000_000_000_000
    public static let rule = "must be an integer from 1 to \(maximum)"
    public let value: Int64

    public init?(_ value: Int64) {
        guard (1...Self.maximum).contains(value) else { return nil }
        self.value = value
    }

    public static func < (lhs: Amount, rhs: Amount) -> Bool { lhs.value < rhs.value }

    public var description: String { String(value) }
}

/// How many bundles one App Store transaction bought: 1–10, as Apple allows.
public struct Quantity: Hashable, Sendable, CustomStringConvertible {
    public static let range = 1...10
    public static let rule = "must be an integer from \(range.lowerBound) to \(range.upperBound)"
    public let value: Int

    public init?(_ value: Int) {
        guard Self.range.contains(value) else { return nil }
        self.value = value
    }

    public static let one = Quantity(1)!

    public var description: String { String(value) }
}

/// A client-chosen key that makes a debit safe to retry: 1–255 printable
/// ASCII characters (space through tilde).
public struct IdempotencyKey: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init?(_ text: String) {
        let bytes = text.utf8
        guard (1...255).contains(bytes.count), bytes.allSatisfy({ (0x20...0x7E).contains($0) }) else { return nil }
        rawValue = text
    }

    /// The start of a captured hold's ledger reference (`hold:<id>`).
    public static let captureReferencePrefix = "hold:"

    /// Whether a debit may use this key. A debit's key is its ledger
    /// entry's reference, so one that begins like a capture's reference
    /// would make the debit read as that hold's capture.
    public var isDebitKey: Bool { !rawValue.hasPrefix(Self.captureReferencePrefix) }

    public var description: String { rawValue }
}

@inline(__always) func isDigit(_ byte: UInt8) -> Bool {
    (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
}

@inline(__always) func isAlphanumeric(_ byte: UInt8) -> Bool {
    isDigit(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
        || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
}

@inline(__always) func isIdentifierByte(_ byte: UInt8) -> Bool {
    isAlphanumeric(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":")
        || byte == UInt8(ascii: "@") || byte == UInt8(ascii: "-")
}
