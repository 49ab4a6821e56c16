import HTTPServer

/// The console's own refusals, as problems like the API's (`WalletError`'s
/// mapping); the console renders the problem as a page.
enum ConsoleError: Error, Equatable, ProblemConvertible {
    /// A state-changing form without its session's CSRF token.
    case csrfTokenInvalid
    /// Too many failed sign-ins from one address.
    case signInRateLimited(retryAfterSeconds: Int)
    /// A form body that is not `application/x-www-form-urlencoded` text.
    case malformedForm

    var problem: Problem {
        switch self {
        case .csrfTokenInvalid:
            Problem(status: 403, code: "csrf_token_invalid", title: "Form expired",
                    detail: "this form does not belong to your session; go back, reload the page and try again")
        case .signInRateLimited(let seconds):
            Problem(status: 429, code: "rate_limited", title: "Too many sign-in attempts",
                    detail: "too many failed sign-ins from this address; try again in \(seconds) seconds",
                    headers: [("Retry-After", String(seconds))])
        case .malformedForm:
            Problem(status: 400, code: "malformed_form", title: "Malformed form",
                    detail: "the form could not be read; reload the page and try again")
        }
    }
}
