import Foundation
import HTTPServer
import JSON
import ServiceSupport
import WalletCore
import WalletStore

/// The event feed: every change to every wallet, in id order, each once.
extension WalletAPI {
    static let eventsLimitDefault = 100
    static let eventsLimitMax = 1000

    func registerEvents(on router: Router) {
        router.add("GET", "/v1/events", gate: admit(.events), sync: getEvents)
    }

    func getEvents(_ request: Request) throws -> Response {
        var errors: [FieldError] = []
        var query = EventQuery(after: 0, limit: Self.eventsLimitDefault)
        if let text = request.query["after"] {
            if let value = Int64(text), value >= 0 {
                query.after = value
            } else {
                errors.append(FieldError(field: "after", message: "must be an event id (an integer, 0 or more)"))
            }
        }
        if let text = request.query["limit"] {
            if let value = Int(text), (1...Self.eventsLimitMax).contains(value) {
                query.limit = value
            } else {
                errors.append(FieldError(field: "limit", message: "must be an integer from 1 to \(Self.eventsLimitMax)"))
            }
        }
        if let text = request.query["user_id"] {
            query.userID = UserID(text)
            if query.userID == nil { errors.append(FieldError(field: "user_id", message: UserID.rule)) }
        }
        if let text = request.query["type"] {
            query.type = EventType(rawValue: text)
            if query.type == nil {
                errors.append(FieldError(field: "type", message: "must be one of "
                                         + EventType.allCases.map(\.rawValue).joined(separator: ", ")))
            }
        }
        if !errors.isEmpty { throw WalletError.validationFailed(errors) }
        let page = try ledger.events(query)
        return .json(["events": .array(page.events.map(\.json)), "next_after": JSONValue(page.nextAfter)])
    }
}
