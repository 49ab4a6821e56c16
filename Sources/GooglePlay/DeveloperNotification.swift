import Crypto
public import Foundation
public import WalletCore

/// Why a Pub/Sub push body was refused. The raw values are stable and safe
/// to return to clients and to count in metrics.
public enum PushBodyReason: String, Sendable, Equatable, CaseIterable {
    /// The body, or the notification in `message.data`, is larger than allowed.
    case too_large
    /// The body, or the notification in `message.data`, is not a JSON object.
    case not_json
    /// A required member is absent (or null).
    case missing_field
    /// A member has the wrong type, is empty, too long, holds characters it
    /// may not, or disagrees with another member.
    case invalid_field
}

/// A refused push body: a stable reason, the member at fault, and a
/// sentence fit for a 400 answer. Neither quotes the input; members are
/// named, values never.
public struct PushBodyError: Error, Sendable, Equatable, CustomStringConvertible {
    public typealias Reason = PushBodyReason

    public let reason: Reason
    /// The member at fault as a dotted path, such as `message.data.packageName`;
    /// nil when the whole body is at fault.
    public let field: String?
    public let detail: String

    init(_ reason: Reason, field: String?, _ detail: String) {
        self.reason = reason
        self.field = field
        self.detail = detail
    }

    public var description: String { "\(reason.rawValue): \(detail)" }

    /// The same error, located inside `parent`.
    func within(_ parent: String) -> PushBodyError {
        let path = field.map { "\(parent).\($0)" } ?? parent
        return PushBodyError(reason, field: path, "\(parent): \(detail)")
    }
}

/// One Pub/Sub push delivery of a Google Play real-time developer notification.
///
/// The body Pub/Sub posts (push format, not "unwrapped"):
/// `{"message":{"data":"<base64>","messageId":"…","message_id":"…",
/// "publishTime":"…","attributes":{…}},"subscription":"…","deliveryAttempt":…}`.
/// Members not read here are accepted and ignored anywhere, because Google
/// adds them.
public struct PushMessage: Sendable, Equatable {
    /// Largest body read: the data's limit in base64, and room for the rest.
    public static let bodyBytesMax = 128 * 1024
    /// Largest notification, decoded. Real ones are a few hundred bytes.
    public static let dataBytesMax = 64 * 1024
    /// Longest `messageId`. Pub/Sub's are decimal numbers of about 16 digits.
    public static let messageIDCharactersMax = 200
    /// Longest subscription name: `projects/<30>/subscriptions/<255>` and room.
    public static let subscriptionCharactersMax = 512

    /// Pub/Sub's id for the message, the same on every redelivery: the key
    /// that makes handling it idempotent.
    public var messageID: String
    /// `projects/<project>/subscriptions/<name>`, when given.
    public var subscription: String?
    public var notification: DeveloperNotification
    /// The notification as Google sent it (the message's decoded data), to keep.
    public var data: [UInt8]

    public init(messageID: String, subscription: String?, notification: DeveloperNotification, data: [UInt8] = []) {
        self.messageID = messageID
        self.subscription = subscription
        self.notification = notification
        self.data = data
    }

    public static func parse(_ body: Data) throws(PushBodyError) -> PushMessage {
        try parse(Array(body))
    }

    public static func parse(_ body: [UInt8]) throws(PushBodyError) -> PushMessage {
        guard body.count <= bodyBytesMax else {
            throw PushBodyError(.too_large, field: nil, "the body is larger than \(bodyBytesMax) bytes")
        }
        let envelope = try decodeJSON(PushEnvelope.self, from: body, what: "the body")
        guard let message = envelope.message else {
            throw PushBodyError(.missing_field, field: "message", "message is missing")
        }

        let camelID = message.messageId
        let snakeID = message.messageIdSnakeCase
        if let camelID, let snakeID, camelID != snakeID {
            throw PushBodyError(.invalid_field, field: "message.messageId", "message.messageId and message.message_id differ")
        }
        guard let messageID = camelID ?? snakeID else {
            throw PushBodyError(.missing_field, field: "message.messageId", "message.messageId is missing")
        }
        let idField = camelID != nil ? "message.messageId" : "message.message_id"
        try checkVisibleASCII(messageID, field: idField, charactersMax: messageIDCharactersMax)

        if let subscription = envelope.subscription {
            guard !subscription.isEmpty, subscription.utf8.count <= subscriptionCharactersMax,
                  !subscription.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
            else {
                throw PushBodyError(
                    .invalid_field, field: "subscription",
                    "subscription is empty, longer than \(subscriptionCharactersMax) bytes, or holds control characters")
            }
        }

        guard let encoded = message.data else {
            throw PushBodyError(.missing_field, field: "message.data", "message.data is missing")
        }
        // Checked before decoding, so an oversized value costs no decode.
        guard encoded.utf8.count <= (dataBytesMax + 2) / 3 * 4 else {
            throw PushBodyError(.too_large, field: "message.data", "message.data is larger than \(dataBytesMax) bytes decoded")
        }
        guard let data = decodeBase64(encoded) else {
            throw PushBodyError(.invalid_field, field: "message.data", "message.data is not base64")
        }
        guard data.count <= dataBytesMax else {
            throw PushBodyError(.too_large, field: "message.data", "message.data is larger than \(dataBytesMax) bytes decoded")
        }
        let notification: DeveloperNotification
        do {
            notification = try DeveloperNotification.parse(data)
        } catch {
            throw error.within("message.data")
        }
        return PushMessage(messageID: messageID, subscription: envelope.subscription, notification: notification,
                           data: Array(data))
    }

    /// Standard base64 with padding, as Pub/Sub sends it; also without
    /// padding, and the URL-safe alphabet. Strict otherwise: no whitespace,
    /// canonical final bits.
    static func decodeBase64(_ text: String) -> [UInt8]? {
        if let bytes = Base64.decode(text) { return bytes }
        var characters = Array(text.utf8)
        var paddingCount = 0
        while paddingCount < 2, characters.last == UInt8(ascii: "=") {
            characters.removeLast()
            paddingCount += 1
        }
        // Padding, when present, must make the length a multiple of four.
        guard paddingCount == 0 || (characters.count + paddingCount) % 4 == 0 else { return nil }
        for index in characters.indices {
            switch characters[index] {
            case UInt8(ascii: "+"): characters[index] = UInt8(ascii: "-")
            case UInt8(ascii: "/"): characters[index] = UInt8(ascii: "_")
            default: break
            }
        }
        return Base64URL.decode(ascii: characters)
    }
}

/// A Google Play real-time developer notification: the JSON Pub/Sub carries
/// base64-encoded in `message.data`.
///
/// `{"version":"1.0","packageName":"…","eventTimeMillis":"1503349783000",…}`
/// with one of `oneTimeProductNotification`, `subscriptionNotification`,
/// `voidedPurchaseNotification` or `testNotification`. A notification with
/// none of them is `other` (Google adds kinds); one with two is refused.
public struct DeveloperNotification: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// A purchase was refunded, charged back or cancelled. `productType`
        /// is 1 for a subscription, 2 for a one-time product; `refundType`
        /// is 1 for a full refund, 2 for a quantity-based partial one.
        case voidedPurchase(purchaseToken: String, orderID: String?, productType: Int, refundType: Int?)
        /// `notificationType` is 1 for purchased, 2 for cancelled.
        case oneTimeProduct(notificationType: Int, purchaseToken: String, sku: String?)
        case subscription
        /// Sent from the Play Console to check the set-up.
        case test
        /// None of the kinds above.
        case other
    }

    public static let packageNameCharactersMax = 255
    /// What the ledger stores: a longer token or order id is refused here,
    /// not by the database later.
    public static let purchaseTokenCharactersMax = GooglePlay.purchaseTokenBytesMax
    public static let orderIDCharactersMax = GooglePlay.orderIDBytesMax
    public static let skuCharactersMax = 256

    public var packageName: String
    public var eventTime: Date
    public var kind: Kind

    public init(packageName: String, eventTime: Date, kind: Kind) {
        self.packageName = packageName
        self.eventTime = eventTime
        self.kind = kind
    }

    /// The kind's name for metric labels and records.
    public var kindName: GooglePlayNotificationKind {
        switch kind {
        case .voidedPurchase: .voidedPurchase
        case .oneTimeProduct: .oneTimeProduct
        case .subscription: .subscription
        case .test: .test
        case .other: .other
        }
    }

    /// Parses the notification JSON (`message.data`, decoded).
    public static func parse(_ json: [UInt8]) throws(PushBodyError) -> DeveloperNotification {
        guard json.count <= PushMessage.dataBytesMax else {
            throw PushBodyError(.too_large, field: nil, "the notification is larger than \(PushMessage.dataBytesMax) bytes")
        }
        let body = try decodeJSON(NotificationBody.self, from: json, what: "the notification")
        // The notification is kept as it came (a jsonb column), and
        // PostgreSQL's jsonb takes no NUL character and no unpaired
        // surrogate: refused here, not by the database later.
        guard storableEscapes(json) else {
            throw PushBodyError(.invalid_field, field: nil,
                                "the notification holds a \\u0000 escape or an unpaired surrogate escape")
        }

        guard let packageName = body.packageName else {
            throw PushBodyError(.missing_field, field: "packageName", "packageName is missing")
        }
        guard !packageName.isEmpty, packageName.utf8.count <= packageNameCharactersMax,
              packageName.utf8.allSatisfy(isPackageNameByte)
        else {
            throw PushBodyError(
                .invalid_field, field: "packageName",
                "packageName is empty, longer than \(packageNameCharactersMax) characters, or not letters, digits, '.' and '_'")
        }
        guard let eventTimeMillis = body.eventTimeMillis else {
            throw PushBodyError(.missing_field, field: "eventTimeMillis", "eventTimeMillis is missing")
        }
        let eventTime = Date(timeIntervalSince1970: Double(eventTimeMillis.value) / 1000)

        let present = [body.oneTimeProductNotification != nil, body.subscriptionNotification != nil,
                       body.voidedPurchaseNotification != nil, body.testNotification != nil].filter { $0 }.count
        guard present <= 1 else {
            throw PushBodyError(
                .invalid_field, field: nil,
                "the notification holds more than one of oneTimeProductNotification, subscriptionNotification, "
                    + "voidedPurchaseNotification and testNotification")
        }

        let kind: Kind
        if let oneTime = body.oneTimeProductNotification {
            let field = "oneTimeProductNotification"
            guard let notificationType = oneTime.notificationType else {
                throw PushBodyError(.missing_field, field: "\(field).notificationType", "\(field).notificationType is missing")
            }
            let purchaseToken = try required(oneTime.purchaseToken, field: "\(field).purchaseToken",
                                             charactersMax: purchaseTokenCharactersMax)
            if let sku = oneTime.sku {
                try checkVisibleASCII(sku, field: "\(field).sku", charactersMax: skuCharactersMax)
            }
            kind = .oneTimeProduct(notificationType: notificationType, purchaseToken: purchaseToken, sku: oneTime.sku)
        } else if let voided = body.voidedPurchaseNotification {
            let field = "voidedPurchaseNotification"
            let purchaseToken = try required(voided.purchaseToken, field: "\(field).purchaseToken",
                                             charactersMax: purchaseTokenCharactersMax)
            if let orderID = voided.orderId {
                try checkVisibleASCII(orderID, field: "\(field).orderId", charactersMax: orderIDCharactersMax)
            }
            guard let productType = voided.productType else {
                throw PushBodyError(.missing_field, field: "\(field).productType", "\(field).productType is missing")
            }
            kind = .voidedPurchase(purchaseToken: purchaseToken, orderID: voided.orderId, productType: productType,
                                   refundType: voided.refundType)
        } else if body.subscriptionNotification != nil {
            kind = .subscription
        } else if body.testNotification != nil {
            kind = .test
        } else {
            kind = .other
        }
        return DeveloperNotification(packageName: packageName, eventTime: eventTime, kind: kind)
    }

    private static func isPackageNameByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"):
            true
        default:
            false
        }
    }

    private static func required(_ value: String?, field: String, charactersMax: Int) throws(PushBodyError) -> String {
        guard let value else { throw PushBodyError(.missing_field, field: field, "\(field) is missing") }
        try checkVisibleASCII(value, field: field, charactersMax: charactersMax)
        return value
    }
}

// MARK: - Decoding

/// Whether every `\u` escape of a JSON text that already parsed is one
/// PostgreSQL's jsonb takes: not `\u0000`, and a surrogate only as a high
/// one followed by a low one. A backslash occurs only inside strings in
/// valid JSON, so the bytes are read in order, each escape skipped whole.
private func storableEscapes(_ json: [UInt8]) -> Bool {
    func unit(at index: Int) -> Int? {
        guard index + 6 <= json.count, json[index] == UInt8(ascii: "\\"), json[index + 1] == UInt8(ascii: "u"),
              let value = Int(String(decoding: json[(index + 2)..<(index + 6)], as: UTF8.self), radix: 16)
        else { return nil }
        return value
    }
    var index = 0
    while index < json.count {
        guard json[index] == UInt8(ascii: "\\") else {
            index += 1
            continue
        }
        guard let value = unit(at: index) else {
            index += 2
            continue
        }
        switch value {
        case 0, 0xDC00...0xDFFF:
            return false
        case 0xD800...0xDBFF:
            guard let low = unit(at: index + 6), (0xDC00...0xDFFF).contains(low) else { return false }
            index += 12
        default:
            index += 6
        }
    }
    return true
}

/// A value that ends up in records and logs: non-empty, at most
/// `charactersMax` bytes, visible ASCII only (no spaces or controls).
private func checkVisibleASCII(_ value: String, field: String, charactersMax: Int) throws(PushBodyError) {
    guard !value.isEmpty else {
        throw PushBodyError(.invalid_field, field: field, "\(field) is empty")
    }
    guard value.utf8.count <= charactersMax else {
        throw PushBodyError(.invalid_field, field: field, "\(field) is longer than \(charactersMax) characters")
    }
    guard value.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
        throw PushBodyError(.invalid_field, field: field, "\(field) holds characters other than visible ASCII")
    }
}

/// Decodes `type`, turning a decoding error into a sentence that names the
/// member at fault and quotes nothing.
private func decodeJSON<Value: Decodable>(_ type: Value.Type, from json: [UInt8], what: String)
    throws(PushBodyError) -> Value {
    do {
        // Pub/Sub's push envelope and Google's developer notification are
        // documented records, read onto `Decodable` types (their int64s
        // arrive as strings): Foundation's decoder, with its coding paths
        // naming the member at fault.
        return try JSONDecoder().decode(type, from: Data(json))
    } catch let error as DecodingError {
        throw pushBodyError(error, what: what)
    } catch {
        throw PushBodyError(.not_json, field: nil, "\(what) is not a JSON object")
    }
}

private func pushBodyError(_ error: DecodingError, what: String) -> PushBodyError {
    func path(_ codingPath: [any CodingKey]) -> String? {
        let keys = codingPath.map { key in key.intValue.map { "[\($0)]" } ?? key.stringValue }
        return keys.isEmpty ? nil : keys.joined(separator: ".")
    }
    switch error {
    case .keyNotFound(let key, let context):
        let field = path(context.codingPath + [key]) ?? key.stringValue
        return PushBodyError(.missing_field, field: field, "\(field) is missing")
    case .valueNotFound(_, let context), .typeMismatch(_, let context), .dataCorrupted(let context):
        guard let field = path(context.codingPath) else {
            return PushBodyError(.not_json, field: nil, "\(what) is not a JSON object")
        }
        return PushBodyError(.invalid_field, field: field, "\(field) has the wrong type or an invalid value")
    @unknown default:
        return PushBodyError(.not_json, field: nil, "\(what) cannot be decoded")
    }
}

/// The members of a push body read here; everything else is ignored.
private struct PushEnvelope: Decodable {
    struct Message: Decodable {
        let data: String?
        let messageId: String?
        /// The same id under its older name; Pub/Sub sends both.
        let messageIdSnakeCase: String?

        enum CodingKeys: String, CodingKey {
            case data, messageId
            case messageIdSnakeCase = "message_id"
        }
    }

    let message: Message?
    let subscription: String?
}

private struct NotificationBody: Decodable {
    struct OneTimeProduct: Decodable {
        let notificationType: Int?
        let purchaseToken: String?
        let sku: String?
    }

    struct VoidedPurchase: Decodable {
        let purchaseToken: String?
        let orderId: String?
        let productType: Int?
        let refundType: Int?
    }

    /// Any JSON object; its members are not read.
    struct Present: Decodable {
        init(from decoder: any Decoder) throws {
            _ = try decoder.container(keyedBy: NoKeys.self)
        }

        private struct NoKeys: CodingKey {
            var stringValue: String { "" }
            var intValue: Int? { nil }
            init?(stringValue: String) { nil }
            init?(intValue: Int) { nil }
        }
    }

    let packageName: String?
    let eventTimeMillis: Milliseconds?
    let oneTimeProductNotification: OneTimeProduct?
    let subscriptionNotification: Present?
    let voidedPurchaseNotification: VoidedPurchase?
    let testNotification: Present?
}

/// `eventTimeMillis`: Google sends a JSON string of decimal digits (an
/// int64 in proto3 JSON); a JSON integer is accepted too. Not negative, and
/// not after the year 9999 (`GooglePlay.millisecondsMax`), so the ledger can
/// store it.
private struct Milliseconds: Decodable {
    /// 15 digits reach the year 9999.
    static let digitsMax = 15

    let value: Int64

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int64.self) {
            value = number
        } else {
            let text = try container.decode(String.self)
            guard !text.isEmpty, text.utf8.count <= Self.digitsMax,
                  text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                  let number = Int64(text)
            else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a decimal string of milliseconds")
            }
            value = number
        }
        guard value >= 0, value <= GooglePlay.millisecondsMax else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "milliseconds out of range")
        }
    }
}
