import GooglePlay
import JSON
import WalletCore

/// Request bodies. Each is read from strictly parsed JSON and validates every
/// field, collecting all the bad ones so one 422 names them all. Members the
/// API does not know are refused too: a misspelt optional field must not be
/// silently dropped from a payment.
protocol RequestBody {
    init(json: JSONValue) throws
}

struct CreditBody: RequestBody {
    var userID: UserID
    /// Required, but for a Google Play purchase, whose flowNO comes from
    /// Google (when given, it must be that one).
    var flowNo: FlowNumber?
    var productID: ProductID
    /// nil when the request leaves it to the default (1) or to the store's evidence.
    var quantity: Quantity?
    var claimedAmount: Int64?
    var signedTransaction: String?
    var receiptData: String?
    var googlePurchaseToken: String?

    static let members: Set<String> = ["user_id", "flow_no", "product_id", "quantity", "amount",
                                       "signed_transaction", "receipt_data", "google_purchase_token"]
    static let evidence = ["signed_transaction", "receipt_data", "google_purchase_token"]

    init(json: JSONValue) throws {
        var fields = try FieldValidator(json, allowed: Self.members)
        let userID = fields.required("user_id", UserID.init, UserID.rule)
        let productID = fields.required("product_id", ProductID.init, ProductID.rule)
        quantity = fields.optional("quantity", { (value: Int) in Quantity(value) }, Quantity.rule)
        claimedAmount = fields.optional("amount", { (value: Int64) in Amount(value)?.value }, Amount.rule)
        signedTransaction = fields.optional("signed_transaction", { (value: String) in
            (1...65_536).contains(value.utf8.count) ? value : nil
        }, "must be a compact JWS string")
        receiptData = fields.optional("receipt_data", { (value: String) in
            (1...(512 << 10)).contains(value.utf8.count) ? value : nil
        }, "must be a base64 receipt string")
        googlePurchaseToken = fields.optional("google_purchase_token", { (value: String) in
            Self.isPurchaseToken(value) ? value : nil
        }, "must be 1-1024 characters of [A-Za-z0-9._:-]")
        // A member that is null counts as absent, as everywhere.
        let sent = Self.evidence.filter { json[$0] != nil && json[$0] != .null }
        if sent.contains("google_purchase_token") {
            flowNo = fields.optional("flow_no", FlowNumber.init, FlowNumber.rule)
        } else {
            flowNo = fields.required("flow_no", FlowNumber.init, FlowNumber.rule)
        }
        if sent.count > 1 {
            fields.fail(sent[1], "send one kind of purchase evidence, not \(sent.joined(separator: " and "))")
        }
        try fields.finish()
        self.userID = userID!
        self.productID = productID!
    }
}

extension CreditBody {
    /// Google's purchase tokens are long runs of letters, digits, `.`, `_`
    /// and `-`; `:` is allowed for tokens of test tools. At most as long as
    /// the ledger stores (`GooglePlay.purchaseTokenBytesMax`).
    static func isPurchaseToken(_ text: String) -> Bool {
        (1...GooglePlay.purchaseTokenBytesMax).contains(text.utf8.count) && text.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"),
                 UInt8(ascii: ":"):
                true
            default:
                false
            }
        }
    }
}

struct DebitBody: RequestBody {
    var userID: UserID
    var amount: Amount
    var currency: Currency
    var reason: String?
    /// The caller's metadata object, keys sorted at every depth.
    var metadata: JSONValue?
    /// `metadata` as compact JSON text.
    var metadataText: String?

    static let members: Set<String> = ["user_id", "amount", "currency", "reason", "metadata"]
    /// Counted in Unicode scalars (as JSON Schema's maxLength and PostgreSQL's
    /// length() count), and in bytes: grapheme clusters have no byte bound,
    /// so 200 of them can carry a megabyte of combining marks.
    static let reasonCharactersMax = 200
    static let reasonBytesMax = 800
    static let metadataBytesMax = 4 << 10

    init(json: JSONValue) throws {
        var fields = try FieldValidator(json, allowed: Self.members)
        try self.init(reading: &fields)
        try fields.finish()
    }

    /// Reads the debit's fields, leaving the errors with `fields`; a caller
    /// that reads more fields (a hold) calls `finish` after them.
    init(reading fields: inout FieldValidator) throws {
        let userID = fields.required("user_id", UserID.init, UserID.rule)
        let amount = fields.required("amount", { (value: Int64) in Amount(value) }, Amount.rule)
        currency = fields.optional("currency", Currency.init, Currency.rule) ?? .coin
        reason = fields.reason()
        (metadata, metadataText) = fields.metadata()
        // A missing or invalid one is among the errors already.
        guard let userID, let amount else { throw WalletError.validationFailed(fields.errors) }
        self.userID = userID
        self.amount = amount
    }

    /// The parsed fields, defaults applied, for an idempotency hash.
    var canonicalMembers: [(key: String, value: JSONValue)] {
        var members: [(key: String, value: JSONValue)] = [
            ("amount", JSONValue(amount.value)),
            ("currency", .string(currency.rawValue)),
            ("user_id", .string(userID.rawValue)),
        ]
        if let reason { members.append(("reason", .string(reason))) }
        if let metadata { members.append(("metadata", metadata)) }
        return members
    }

    /// The request as the idempotency hash sees it: method, path and the
    /// parsed fields with sorted keys and defaults applied, not the raw bytes.
    var canonicalText: [UInt8] {
        Array("POST /v1/debits\n".utf8) + JSONValue.object(canonicalMembers).canonicalBytes()
    }
}

/// `POST /v1/holds`: a debit's fields and how long the hold lasts.
struct HoldBody: RequestBody {
    /// What is held, read by the debit's rules.
    var spend: DebitBody
    var expiresInSeconds: Int

    static let members = DebitBody.members.union(["expires_in_seconds"])
    static let expiresInSecondsDefault = 300

    init(json: JSONValue) throws {
        var fields = try FieldValidator(json, allowed: Self.members)
        let expiresInSeconds = fields.optional("expires_in_seconds", { (value: Int) in
            (1...86_400).contains(value) ? value : nil
        }, "must be an integer from 1 to 86400")
        spend = try DebitBody(reading: &fields)
        try fields.finish()
        self.expiresInSeconds = expiresInSeconds ?? Self.expiresInSecondsDefault
    }

    var canonicalText: [UInt8] {
        let members = spend.canonicalMembers + [("expires_in_seconds", JSONValue(expiresInSeconds))]
        return Array("POST /v1/holds\n".utf8) + JSONValue.object(members).canonicalBytes()
    }
}


/// `POST /v1/grants`: free coins for a player, why, and when they expire.
/// `reason` is required: a grant is the game server's decision, and the
/// ledger keeps why it was made.
struct GrantBody: RequestBody {
    var userID: UserID
    var amount: Amount
    var currency: Currency
    var reason: String
    var expiresInDays: Int?

    static let members: Set<String> = ["user_id", "amount", "currency", "reason", "expires_in_days"]
    static let expiresInDaysRange = 1...3_650

    init(json: JSONValue) throws {
        var fields = try FieldValidator(json, allowed: Self.members)
        let userID = fields.required("user_id", UserID.init, UserID.rule)
        let amount = fields.required("amount", { (value: Int64) in Amount(value) }, Amount.rule)
        currency = fields.optional("currency", Currency.init, Currency.rule) ?? .coin
        var reason = fields.reason()
        if fields.isAbsent("reason") {
            fields.fail("reason", "is required")
        } else if let given = reason, given.allSatisfy(\.isWhitespace) {
            fields.fail("reason", "must not be blank")
            reason = nil
        }
        expiresInDays = fields.optional("expires_in_days", { (value: Int) in
            Self.expiresInDaysRange.contains(value) ? value : nil
        }, "must be an integer from 1 to 3650")
        try fields.finish()
        guard let userID, let amount, let reason else { throw WalletError.validationFailed(fields.errors) }
        self.userID = userID
        self.amount = amount
        self.reason = reason
    }

    /// The request as the idempotency hash sees it, as a debit's is.
    var canonicalText: [UInt8] {
        var members: [(key: String, value: JSONValue)] = [
            ("amount", JSONValue(amount.value)),
            ("currency", .string(currency.rawValue)),
            ("reason", .string(reason)),
            ("user_id", .string(userID.rawValue)),
        ]
        if let expiresInDays { members.append(("expires_in_days", JSONValue(expiresInDays))) }
        return Array("POST /v1/grants\n".utf8) + JSONValue.object(members).canonicalBytes()
    }
}

/// `POST /v1/holds/{id}/capture` (`amount`, optional) and `…/release`
/// (nothing): an empty body is an empty object.
struct HoldActionBody {
    var amount: Amount?

    init(json: JSONValue, action: HoldAction) throws {
        var fields = try FieldValidator(json, allowed: action == .capture ? ["amount"] : [])
        amount = fields.optional("amount", { (value: Int64) in Amount(value) }, Amount.rule)
        try fields.finish()
    }

    func canonicalText(action: HoldAction, holdID: Int64) -> [UInt8] {
        let members: [(key: String, value: JSONValue)] = amount.map { [("amount", JSONValue($0.value))] } ?? []
        return Array("POST /v1/holds/\(holdID)/\(action.rawValue)\n".utf8) + JSONValue.object(members).canonicalBytes()
    }
}

/// Collects field errors while reading one JSON object.
struct FieldValidator {
    private let object: JSONValue
    private(set) var errors: [FieldError] = []

    init(_ json: JSONValue, allowed: Set<String>) throws {
        guard case .object(let members) = json else {
            throw WalletError.validationFailed([FieldError(field: "body", message: "must be a JSON object")])
        }
        object = json
        for member in members where !allowed.contains(member.key) {
            errors.append(FieldError(field: member.key, message: "is not a known field"))
        }
    }

    /// Whether `field` is absent, or null.
    func isAbsent(_ field: String) -> Bool {
        guard let value = object[field] else { return true }
        return value == .null
    }

    mutating func fail(_ field: String, _ message: String) {
        errors.append(FieldError(field: field, message: message))
    }

    /// A field that must be present and valid; nil after recording an error.
    mutating func required<Raw: FieldValue, Value>(_ field: String, _ make: (Raw) -> Value?, _ message: String) -> Value? {
        guard let value = object[field], value != .null else {
            fail(field, "is required")
            return nil
        }
        // `optional` records why when it is invalid.
        return optional(field, make, message)
    }

    /// A field that may be absent (or null); nil when absent or invalid.
    mutating func optional<Raw: FieldValue, Value>(_ field: String, _ make: (Raw) -> Value?, _ message: String) -> Value? {
        guard let value = object[field], value != .null else { return nil }
        guard let raw = Raw(field: value), let made = make(raw) else {
            fail(field, message)
            return nil
        }
        return made
    }

    /// Throws when any field failed. After it returns, every `required`
    /// value is non-nil.
    func finish() throws {
        if !errors.isEmpty { throw WalletError.validationFailed(errors) }
    }

    /// `reason`: at most 200 characters and 800 UTF-8 bytes, without NUL.
    mutating func reason() -> String? {
        optional("reason", { (value: String) in
            value.utf8.count <= DebitBody.reasonBytesMax && value.unicodeScalars.count <= DebitBody.reasonCharactersMax
                && !value.unicodeScalars.contains("\0") ? value : nil
        }, "must be a string of at most 200 characters and 800 UTF-8 bytes, without NUL")
    }

    /// `metadata`, in canonical form and as the text that is stored, so the
    /// size check, the stored copy and the idempotency hash share one pass.
    /// A number PostgreSQL cannot store is named by its path
    /// (`metadata.a[0]`): it would fail the whole batch it joined.
    mutating func metadata() -> (JSONValue?, String?) {
        let canonical = optional("metadata", { (value: JSONValue) -> (JSONValue, [UInt8])? in
            guard case .object = value, !value.containsNUL else { return nil }
            let canonical = value.canonicalized()
            let bytes = canonical.serialized()
            return bytes.count <= DebitBody.metadataBytesMax ? (canonical, bytes) : nil
        }, "must be a JSON object of at most 4 KiB, without NUL characters")
        guard let (value, bytes) = canonical else { return (nil, nil) }
        let unstorable = StorableNumber.unstorable(in: value, at: "metadata")
        guard unstorable.isEmpty else {
            for path in unstorable { fail(path, StorableNumber.message) }
            return (nil, nil)
        }
        return (value, String(decoding: bytes, as: UTF8.self))
    }
}

/// What a field's JSON value may be read as: only its own JSON type, so a
/// quoted number is not a number and a number with a fraction or an exponent
/// is not an integer.
protocol FieldValue {
    init?(field: JSONValue)
}

extension String: FieldValue {
    init?(field: JSONValue) {
        guard case .string(let text) = field else { return nil }
        self = text
    }
}

extension JSONValue: FieldValue {
    init?(field: JSONValue) { self = field }
}

extension FieldValue where Self: FixedWidthInteger {
    /// Digits with an optional minus sign, within the type's range.
    init?(field: JSONValue) {
        guard let value = field.integer(as: Self.self) else { return nil }
        self = value
    }
}

extension Int: FieldValue {}
extension Int64: FieldValue {}

extension JSONValue {
    /// Compact JSON with object keys sorted at every depth and numbers as
    /// written: the same document always gives the same bytes.
    func canonicalBytes() -> [UInt8] {
        canonicalized().serialized()
    }

    /// PostgreSQL text and JSONB cannot hold U+0000.
    var containsNUL: Bool {
        switch self {
        case .string(let text): text.unicodeScalars.contains("\0")
        case .object(let members): members.contains { $0.key.unicodeScalars.contains("\0") || $0.value.containsNUL }
        case .array(let elements): elements.contains { $0.containsNUL }
        default: false
        }
    }
}
