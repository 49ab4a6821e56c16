import Crypto
import Foundation
import GooglePlay
import Testing
import WalletCore

struct DeveloperNotificationTests {
    static let packageName = "com.example.wallet"

    static func json(_ object: Any) -> [UInt8] {
        Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data())
    }

    /// A push body as Pub/Sub sends it, with members this code does not read.
    static func body(notification: Any, messageID: String? = "2070443601311540",
                     snakeCaseID: String? = "2070443601311540", extraMessage: [String: Any] = [:]) -> [UInt8] {
        body(data: Base64.encode(json(notification)), messageID: messageID, snakeCaseID: snakeCaseID,
             extraMessage: extraMessage)
    }

    static func body(data: String?, messageID: String? = "2070443601311540", snakeCaseID: String? = "2070443601311540",
                     extraMessage: [String: Any] = [:]) -> [UInt8] {
        var message: [String: Any] = [
            "attributes": ["origin": "play", "nested": ["deep": [1, 2, 3]]],
            "publishTime": "2021-02-26T19:13:55.749Z",
            "publish_time": "2021-02-26T19:13:55.749Z",
            "orderingKey": "",
        ]
        message["data"] = data
        message["messageId"] = messageID
        message["message_id"] = snakeCaseID
        message.merge(extraMessage) { _, new in new }
        return json([
            "message": message,
            "subscription": "projects/wallet-project/subscriptions/play-notifications",
            "deliveryAttempt": 3,
            "futureMember": ["anything": true],
        ] as [String: Any])
    }

    static func notification(_ kind: [String: Any], eventTimeMillis: Any = "1503349783000") -> [String: Any] {
        var object: [String: Any] = ["version": "1.0", "packageName": packageName, "eventTimeMillis": eventTimeMillis,
                                     "somethingNew": [1, 2]]
        object.merge(kind) { _, new in new }
        return object
    }

    static func refusal(_ body: [UInt8]) -> PushBodyError? {
        do {
            _ = try PushMessage.parse(body)
            return nil
        } catch {
            return error
        }
    }

    // MARK: Kinds

    @Test func aVoidedPurchase() throws {
        let message = try PushMessage.parse(Self.body(notification: Self.notification([
            "voidedPurchaseNotification": ["purchaseToken": "PQ7.AO-J1OzAbc_-123", "orderId": "GPA.3313-5503-3858-32549",
                                           "productType": 2, "refundType": 1, "unknown": "x"],
        ])))
        #expect(message.messageID == "2070443601311540")
        #expect(message.subscription == "projects/wallet-project/subscriptions/play-notifications")
        #expect(message.notification.packageName == Self.packageName)
        #expect(message.notification.eventTime == Date(timeIntervalSince1970: 1_503_349_783))
        #expect(message.notification.kind == .voidedPurchase(
            purchaseToken: "PQ7.AO-J1OzAbc_-123", orderID: "GPA.3313-5503-3858-32549", productType: 2, refundType: 1))
        #expect(message.notification.kindName.rawValue == "voided_purchase")
    }

    @Test func aVoidedPurchaseWithoutOrderIDOrRefundType() throws {
        let message = try PushMessage.parse(Self.body(notification: Self.notification([
            "voidedPurchaseNotification": ["purchaseToken": "token-1", "productType": 1],
        ])))
        #expect(message.notification.kind == .voidedPurchase(
            purchaseToken: "token-1", orderID: nil, productType: 1, refundType: nil))
    }

    @Test func aOneTimeProductWithANumericEventTime() throws {
        let message = try PushMessage.parse(Self.body(notification: Self.notification([
            "oneTimeProductNotification": ["version": "1.0", "notificationType": 1, "purchaseToken": "token-2",
                                           "sku": "coins_100"],
        ], eventTimeMillis: 1_700_000_000_123)))
        #expect(message.notification.kind == .oneTimeProduct(notificationType: 1, purchaseToken: "token-2", sku: "coins_100"))
        #expect(message.notification.kindName.rawValue == "one_time_product")
        #expect(message.notification.eventTime == Date(timeIntervalSince1970: 1_700_000_000.123))
    }

    @Test func aSubscriptionNotification() throws {
        let message = try PushMessage.parse(Self.body(notification: Self.notification([
            "subscriptionNotification": ["version": "1.0", "notificationType": 4, "purchaseToken": "token-3",
                                         "subscriptionId": "monthly"],
        ])))
        #expect(message.notification.kind == .subscription)
        #expect(message.notification.kindName.rawValue == "subscription")
    }

    @Test func aTestNotificationWithOnlyTheSnakeCaseMessageID() throws {
        let message = try PushMessage.parse(Self.body(
            notification: Self.notification(["testNotification": ["version": "1.0"]]), messageID: nil))
        #expect(message.messageID == "2070443601311540")
        #expect(message.notification.kind == .test)
        #expect(message.notification.kindName.rawValue == "test")
    }

    @Test func anUnknownKindIsOther() throws {
        let message = try PushMessage.parse(Self.body(notification: Self.notification([
            "someFutureNotification": ["version": "1.0"],
        ]), snakeCaseID: nil))
        #expect(message.notification.kind == .other)
        #expect(message.notification.kindName.rawValue == "other")
        #expect(GooglePlayNotificationKind.allCases.contains(message.notification.kindName))
    }

    @Test func unpaddedAndURLSafeDataIsAccepted() throws {
        // 2 bytes short of a multiple of 3, so standard base64 pads it.
        var notification = Self.notification(["testNotification": ["version": "1.0"]])
        notification["pad"] = ""
        var bytes = Self.json(notification)
        while bytes.count % 3 == 0 { bytes.insert(UInt8(ascii: " "), at: 0) }
        let padded = Base64.encode(bytes)
        #expect(padded.hasSuffix("="))
        let unpadded = String(padded.prefix { $0 != "=" })
        let urlSafe = Base64URL.encode(bytes)
        for data in [padded, unpadded, urlSafe] {
            let message = try PushMessage.parse(Self.body(data: data))
            #expect(message.notification.kind == .test)
        }
    }

    @Test func dataAsDataOrBytesParsesTheSame() throws {
        let body = Self.body(notification: Self.notification(["testNotification": ["version": "1.0"]]))
        #expect(try PushMessage.parse(Data(body)) == PushMessage.parse(body))
    }

    // MARK: Refused

    @Test func aBodyThatIsNotAJSONObjectIsNotJSON() {
        for body in ["", "not json", "[1,2]", "\"message\"", "{\"message\":"] {
            let error = Self.refusal(Array(body.utf8))
            #expect(error?.reason == .not_json, "\(body)")
            #expect(error?.field == nil)
        }
    }

    @Test func noMessageIsMissingField() {
        let error = Self.refusal(Self.json(["subscription": "projects/p/subscriptions/s"]))
        #expect(error?.reason == .missing_field)
        #expect(error?.field == "message")
        let wrongType = Self.refusal(Self.json(["message": "hello"]))
        #expect(wrongType?.reason == .invalid_field)
        #expect(wrongType?.field == "message")
    }

    @Test func noMessageIDIsMissingField() {
        let error = Self.refusal(Self.body(notification: Self.notification(["testNotification": [:]]), messageID: nil,
                                           snakeCaseID: nil))
        #expect(error?.reason == .missing_field)
        #expect(error?.field == "message.messageId")
    }

    @Test func badMessageIDsAreInvalid() {
        let cases: [(String?, String?)] = [
            ("", nil), (String(repeating: "1", count: PushMessage.messageIDCharactersMax + 1), nil), ("12 34", nil),
            ("12\n34", nil), ("1", "2"), (nil, ""),
        ]
        for (camel, snake) in cases {
            let error = Self.refusal(Self.body(notification: Self.notification(["testNotification": [:]]),
                                               messageID: camel, snakeCaseID: snake))
            #expect(error?.reason == .invalid_field, "\(String(describing: camel?.prefix(8)))")
            #expect(error?.field?.hasPrefix("message.message") == true)
        }
        let numeric = Self.refusal(Self.body(notification: Self.notification(["testNotification": [:]]),
                                             extraMessage: ["messageId": 12]))
        #expect(numeric?.reason == .invalid_field)
        #expect(numeric?.field == "message.messageId")
        let longest = String(repeating: "7", count: PushMessage.messageIDCharactersMax)
        #expect(Self.refusal(Self.body(notification: Self.notification(["testNotification": [:]]), messageID: longest,
                                       snakeCaseID: nil)) == nil)
    }

    @Test func noDataIsMissingField() {
        let error = Self.refusal(Self.body(data: nil))
        #expect(error?.reason == .missing_field)
        #expect(error?.field == "message.data")
    }

    @Test func badBase64IsInvalid() {
        for data in ["not base64!", "eyJh bGciOiJ9", "a", "ab=c", "YQ===", "YR==", "YR"] {
            let error = Self.refusal(Self.body(data: data))
            #expect(error?.reason == .invalid_field, "\(data)")
            #expect(error?.field == "message.data")
            #expect(data.count < 4 || error?.detail.contains(data) == false)
        }
    }

    @Test func dataThatIsNotJSONIsNotJSON() {
        for data in ["not json", "[1,2,3]", "\"text\"", ""] {
            let error = Self.refusal(Self.body(data: Base64.encode(Array(data.utf8))))
            #expect(error?.reason == .not_json, "\(data)")
            #expect(error?.field == "message.data")
        }
    }

    @Test func noPackageNameIsMissingField() {
        var notification = Self.notification(["testNotification": ["version": "1.0"]])
        notification["packageName"] = nil
        let error = Self.refusal(Self.body(notification: notification))
        #expect(error?.reason == .missing_field)
        #expect(error?.field == "message.data.packageName")
        #expect(error?.description.contains("packageName") == true)

        let badNames: [Any] = ["", "com.example wallet", "com/example", 7, String(repeating: "a", count: 256)]
        for bad in badNames {
            notification["packageName"] = bad
            let invalid = Self.refusal(Self.body(notification: notification))
            #expect(invalid?.reason == .invalid_field)
            #expect(invalid?.field == "message.data.packageName")
        }
    }

    @Test func badEventTimesAreRefused() {
        var notification = Self.notification(["testNotification": [:]])
        notification["eventTimeMillis"] = nil
        #expect(Self.refusal(Self.body(notification: notification))?.field == "message.data.eventTimeMillis")
        // After the year 9999 the ledger could not store it, as a string or a number.
        let values: [Any] = ["", "12a", "-5", -5, 1.5, "99999999999999999", "253402300800000", 253_402_300_800_000,
                             "9999999999999999", true, ["1"]]
        for value in values {
            notification["eventTimeMillis"] = value
            let error = Self.refusal(Self.body(notification: notification))
            #expect(error?.reason == .invalid_field, "\(value)")
            #expect(error?.field == "message.data.eventTimeMillis")
        }
        for value: Any in ["253402300799999", 253_402_300_799_999, "0"] {
            notification["eventTimeMillis"] = value
            #expect(Self.refusal(Self.body(notification: notification)) == nil, "\(value)")
        }
    }

    /// The notification is kept as a jsonb value, which holds no NUL and no
    /// unpaired surrogate: such escapes are refused, anywhere in it.
    @Test func escapesTheLedgerCannotStoreAreRefused() throws {
        func data(_ member: String) -> String {
            Base64.encode(Array((#"{"version":"1.0","packageName":"\#(Self.packageName)","eventTimeMillis":"1","#
                + member + #","testNotification":{"version":"1.0"}}"#).utf8))
        }
        for member in [#""x":"a\u0000b""#, #""x":"\ud800""#, #""x":"\udc00""#, #""x":"\ud800\u0041""#,
                       #""x\u0000":1"#, #""x":["\uDBFF"]"#] {
            let error = Self.refusal(Self.body(data: data(member)))
            #expect(error?.reason == .invalid_field, "\(member)")
            #expect(error?.field == "message.data", "\(member)")
        }
        for member in [#""x":"\\u0000""#, #""x":"\ud83d\ude00""#, #""x":"\u00e9\n\"""#, #""x":"\\\ud83d\ude00""#] {
            #expect(Self.refusal(Self.body(data: data(member))) == nil, "\(member)")
        }
    }

    @Test func tokensAndOrderIDsLongerThanTheLedgerHoldsAreRefused() throws {
        let token = String(repeating: "t", count: GooglePlay.purchaseTokenBytesMax)
        let orderID = String(repeating: "1", count: GooglePlay.orderIDBytesMax)
        let longest = try PushMessage.parse(Self.body(notification: Self.notification([
            "voidedPurchaseNotification": ["purchaseToken": token, "orderId": orderID, "productType": 2],
        ])))
        #expect(longest.notification.kind == .voidedPurchase(purchaseToken: token, orderID: orderID, productType: 2,
                                                             refundType: nil))
        let cases: [([String: Any], String)] = [
            (["voidedPurchaseNotification": ["purchaseToken": token + "t", "productType": 2]],
             "voidedPurchaseNotification.purchaseToken"),
            (["voidedPurchaseNotification": ["purchaseToken": "t", "orderId": orderID + "1", "productType": 2]],
             "voidedPurchaseNotification.orderId"),
            (["oneTimeProductNotification": ["notificationType": 1, "purchaseToken": token + "t"]],
             "oneTimeProductNotification.purchaseToken"),
        ]
        for (kind, field) in cases {
            let error = Self.refusal(Self.body(notification: Self.notification(kind)))
            #expect(error?.reason == .invalid_field, "\(field)")
            #expect(error?.field == "message.data." + field)
        }
    }

    @Test func incompleteKindsAreRefused() {
        let cases: [([String: Any], String, PushBodyError.Reason)] = [
            (["voidedPurchaseNotification": ["productType": 1]], "voidedPurchaseNotification.purchaseToken", .missing_field),
            (["voidedPurchaseNotification": ["purchaseToken": "t"]], "voidedPurchaseNotification.productType", .missing_field),
            (["voidedPurchaseNotification": ["purchaseToken": "", "productType": 1]],
             "voidedPurchaseNotification.purchaseToken", .invalid_field),
            (["voidedPurchaseNotification": ["purchaseToken": "t", "productType": "1"]],
             "voidedPurchaseNotification.productType", .invalid_field),
            (["oneTimeProductNotification": ["purchaseToken": "t"]], "oneTimeProductNotification.notificationType",
             .missing_field),
            (["oneTimeProductNotification": ["notificationType": 1]], "oneTimeProductNotification.purchaseToken",
             .missing_field),
            (["oneTimeProductNotification": ["notificationType": 1, "purchaseToken": "t", "sku": "a b"]],
             "oneTimeProductNotification.sku", .invalid_field),
            (["testNotification": "yes"], "testNotification", .invalid_field),
        ]
        for (kind, field, reason) in cases {
            let error = Self.refusal(Self.body(notification: Self.notification(kind)))
            #expect(error?.reason == reason, "\(field)")
            #expect(error?.field == "message.data." + field)
        }
    }

    @Test func twoKindsAtOnceAreRefused() {
        let error = Self.refusal(Self.body(notification: Self.notification([
            "testNotification": ["version": "1.0"],
            "voidedPurchaseNotification": ["purchaseToken": "t", "productType": 1],
        ])))
        #expect(error?.reason == .invalid_field)
        #expect(error?.field == "message.data")
    }

    @Test func oversizeBodiesAndDataAreTooLarge() {
        let huge = Array(repeating: UInt8(ascii: " "), count: PushMessage.bodyBytesMax + 1)
        #expect(Self.refusal(huge)?.reason == .too_large)

        // Decoded data one byte over the limit, inside a body that fits.
        var notification = Self.notification(["testNotification": [:]])
        notification["padding"] = ""
        let base = Self.json(notification).count
        notification["padding"] = String(repeating: "x", count: PushMessage.dataBytesMax + 1 - base)
        let oversize = Self.json(notification)
        #expect(oversize.count == PushMessage.dataBytesMax + 1)
        let error = Self.refusal(Self.body(data: Base64.encode(oversize)))
        #expect(error?.reason == .too_large)
        #expect(error?.field == "message.data")
        #expect((error?.detail.count ?? 0) < 200)

        // At the limit it is accepted.
        notification["padding"] = String(repeating: "x", count: PushMessage.dataBytesMax - base)
        #expect(Self.refusal(Self.body(data: Base64.encode(Self.json(notification)))) == nil)
    }

    @Test func errorsDoNotEchoTheInput() {
        let marker = "MARKER-" + String(repeating: "z", count: 500)
        let bodies = [
            Self.body(data: marker),
            Self.body(notification: Self.notification(["testNotification": [:]]), messageID: marker + " x", snakeCaseID: nil),
            Self.body(notification: ["packageName": marker + "/", "eventTimeMillis": "1"]),
            Self.body(notification: ["packageName": "a", "eventTimeMillis": marker]),
        ]
        for body in bodies {
            let error = Self.refusal(body)
            #expect(error != nil)
            #expect(error?.description.contains("MARKER") == false)
        }
    }
}
