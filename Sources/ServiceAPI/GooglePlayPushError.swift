import GooglePlay
import HTTPServer
import JSON

/// Refusals of a Google Play push, as problems like the API's (`WalletError`'s
/// mapping).
enum GooglePlayPushError: Error, Equatable, ProblemConvertible {
    /// The push's OIDC token did not verify; `reason` says which check failed.
    case unauthorized(reason: PushAuthenticationReason)
    /// The body is not a Pub/Sub push of a developer notification.
    case malformed(detail: String)
    /// A pushed void Google does not show (yet): not its voided-purchases
    /// list, nor the purchase canceled. Nothing was recorded, so the push's
    /// retry is processed afresh; the voided-purchases sweep finds the void
    /// too once Google lists it.
    case voidNotConfirmed

    var problem: Problem {
        switch self {
        case .unauthorized(let reason):
            Problem(status: 401, code: "unauthorized", title: "Unauthorized",
                    detail: "the push's OIDC token was refused (\(reason.rawValue))", extra: ["reason": .string(reason.rawValue)],
                    headers: [("WWW-Authenticate", "Bearer")])
        case .malformed(let detail):
            Problem(status: 400, code: "malformed_notification", title: "Malformed notification", detail: detail)
        case .voidNotConfirmed:
            Problem(status: 503, code: "void_not_confirmed", title: "Void not confirmed",
                    detail: "Google does not show this purchase voided; nothing was recorded; push it again later",
                    headers: [("Retry-After", "60")])
        }
    }
}
