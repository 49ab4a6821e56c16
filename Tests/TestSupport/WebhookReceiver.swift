import Crypto
public import Foundation
import JSON
import Locking

/// A game server's webhook endpoint on a real loopback socket, checking
/// each delivery as docs/events.md tells integrators to: the
/// `Wallet-Signature` header's `v1` is HMAC-SHA256 of `t`, a dot and the
/// raw body under the shared secret, compared in constant time, with `t`
/// within five minutes of now; and the body's id is `Wallet-Event-Id`.
/// It answers as `mode` says, and records what it accepted.
public final class WebhookReceiver: Sendable {
    public enum Mode: Sendable, Equatable {
        /// 204 for a delivery whose signature holds, 400 otherwise.
        case accept
        /// This status for everything.
        case fail(Int)
        /// Wait this long before accepting (past the sender's timeout).
        case hang(seconds: Double)
        /// 500 for these players' events, `accept` for the others'.
        case failFor(Set<String>)
    }

    /// A delivery as it arrived.
    public struct Delivery: Sendable {
        public let eventID: Int64
        public let userID: String
        public let type: String
        public let amount: Int64
        public let headerEventID: String?
        public let userAgent: String?
        public let signatureHolds: Bool
        /// Whether it was answered 2xx.
        public let accepted: Bool
    }

    public let secret: [UInt8]
    private let server: FakeVerifyReceiptServer
    private let mode: Locked<Mode>
    private let received: Locked<[Delivery]>
    private let arrived: Locked<Int>

    public var url: String { "http://127.0.0.1:\(server.port)/hooks/wallet" }

    public init(secret: [UInt8], lifetimeSeconds: Double) throws {
        self.secret = secret
        let mode = Locked(Mode.accept)
        let received = Locked<[Delivery]>([])
        let arrived = Locked(0)
        self.mode = mode
        self.received = received
        self.arrived = arrived
        server = try FakeVerifyReceiptServer(reply: .decided { request in
            arrived.withLock { $0 += 1 }
            return Self.answer(request, secret: secret, mode: mode.withLock { $0 }, received: received)
        }, lifetimeSeconds: lifetimeSeconds)
    }

    public func set(_ newMode: Mode) {
        mode.withLock { $0 = newMode }
    }

    /// Requests that have arrived, answered or not yet.
    public var arrivals: Int {
        arrived.withLock { $0 }
    }

    /// Every delivery so far, in the order they were answered.
    public var deliveries: [Delivery] {
        received.withLock { $0 }
    }

    /// Each event's first 2xx, by player, in the order they were answered.
    public var firstAcceptances: [String: [Int64]] {
        var seen = Set<Int64>()
        var byPlayer: [String: [Int64]] = [:]
        for delivery in deliveries where delivery.accepted && seen.insert(delivery.eventID).inserted {
            byPlayer[delivery.userID, default: []].append(delivery.eventID)
        }
        return byPlayer
    }

    public func stop() {
        server.stop()
    }

    private static func answer(_ request: FakeVerifyReceiptServer.Request, secret: [UInt8], mode: Mode,
                               received: Locked<[Delivery]>) -> FakeVerifyReceiptServer.Reply {
        if case .hang(let seconds) = mode { Thread.sleep(forTimeInterval: seconds) }
        let holds = signatureHolds(request.headers["wallet-signature"], body: Array(request.body), secret: secret)
        guard request.method == "POST", let event = try? JSONParser.parse(Array(request.body)),
              case .number(let idText)? = event["id"], let id = Int64(idText),
              case .string(let userID)? = event["user_id"], case .string(let type)? = event["type"],
              case .number(let amountText)? = event["amount"], let amount = Int64(amountText) else {
            return .http(status: 400, body: "not an event")
        }
        let status: Int
        let checked = holds && request.headers["wallet-event-id"] == idText ? 204 : 400
        switch mode {
        case .accept, .hang: status = checked
        case .fail(let code): status = code
        case .failFor(let players): status = players.contains(userID) ? 500 : checked
        }
        received.withLock {
            $0.append(Delivery(eventID: id, userID: userID, type: type, amount: amount,
                               headerEventID: request.headers["wallet-event-id"], userAgent: request.headers["user-agent"],
                               signatureHolds: holds, accepted: (200..<300).contains(status)))
        }
        return .http(status: status, body: "")
    }

    /// `t=<seconds>,v1=<hex>`: the HMAC holds and `t` is within five minutes.
    public static func signatureHolds(_ header: String?, body: [UInt8], secret: [UInt8], now: Date = Date()) -> Bool {
        guard let header else { return false }
        var timestamp: String?
        var signatures: [String] = []
        for part in header.split(separator: ",") {
            let pair = part.split(separator: "=", maxSplits: 1).map(String.init)
            guard pair.count == 2 else { continue }
            if pair[0] == "t" { timestamp = pair[1] }
            if pair[0] == "v1" { signatures.append(pair[1]) }
        }
        guard let timestamp, let seconds = Double(timestamp), abs(now.timeIntervalSince1970 - seconds) <= 300 else {
            return false
        }
        let expected = Array(hexString(HMACSHA256.authenticationCode(
            key: secret, message: Array(timestamp.utf8) + [UInt8(ascii: ".")] + body)).utf8)
        return signatures.contains { candidate in
            let given = Array(candidate.utf8)
            guard given.count == expected.count else { return false }
            // Constant time: every byte is compared whatever differs first.
            return zip(given, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}
