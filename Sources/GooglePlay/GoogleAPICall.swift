import Foundation
import StoreHTTP
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// One call to a Google API with a service account's access token, the
/// rule the Android Publisher API and Pub/Sub share: at most two rounds, the
/// second only after a 401 with a token that has since been dropped (it was
/// revoked, or expired early). Retries within a round are `RetryingCall`'s.
enum GoogleAPICall {
    static func send(name: String, method: String, base: URL, path: String, tokens: AccessTokens, responseBytesMax: Int,
                     deadline: ContinuousClock.Instant,
                     observe: (StatusClass, Double) -> Void) throws(PlayAPIError) -> Data {
        guard let url = URL(string: base.absoluteString.trimmingSuffix("/") + path) else {
            throw .unavailable("the URL for \(name) is malformed")
        }
        var round = 1
        while true {
            var tokenFailure: PlayAPIError?
            var tokenUsed: String?
            let answer = RetryingCall.send(
                name: name, responseBytesMax: responseBytesMax, deadline: deadline, clock: tokens.clock, observe: observe
            ) {
                // Asked on every attempt: a retry after a long Retry-After
                // gets a token that is still fresh. Cheap while cached.
                let accessToken: String
                do throws(PlayAPIError) {
                    accessToken = try tokens.token(deadline: deadline)
                } catch {
                    tokenFailure = error
                    throw error
                }
                tokenUsed = accessToken
                var request = URLRequest(url: url)
                request.httpMethod = method
                request.setValue("Bearer " + accessToken, forHTTPHeaderField: "Authorization")
                request.setValue("application/json", forHTTPHeaderField: "Accept")
                if method == "POST" { request.httpBody = Data() }
                return request
            }
            if let tokenFailure { throw tokenFailure }
            switch answer {
            case .unavailable(let detail):
                throw .unavailable(detail)
            case .final(200..<300, let body):
                return body
            case .final(404, _), .final(410, _):
                throw .notFound
            case .final(401, let body):
                // Drop the token (unless another caller already has) and try
                // once with a new one.
                if let tokenUsed { tokens.invalidate(token: tokenUsed) }
                guard round == 1, ContinuousClock.now < deadline else {
                    throw .refused(status: 401, reason: PlayAPIError.reason(body))
                }
                round += 1
            case .final(let status, let body):
                throw .refused(status: status, reason: PlayAPIError.reason(body))
            }
        }
    }
}

extension String {
    fileprivate func trimmingSuffix(_ suffix: String) -> String {
        var text = self
        while text.hasSuffix(suffix) { text.removeLast(suffix.count) }
        return text
    }
}
