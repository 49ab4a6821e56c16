import HTTPServer
import JSON
import WalletCore

/// The body checks every POST shares, in the documented order: the content
/// type (415), then strict JSON syntax (400).
enum JSONBody {
    static func parse(_ request: Request) throws -> JSONValue {
        guard let type = request.headers["content-type"]?.split(separator: ";").first,
              type.trimmingOptionalWhitespace.lowercased() == "application/json" else {
            throw WalletError.unsupportedMediaType
        }
        guard !request.body.isEmpty else { throw WalletError.malformedJSON(detail: "the request body is empty") }
        do {
            return try JSONParser.parse(request.body)
        } catch {
            throw WalletError.malformedJSON(detail: error.detail)
        }
    }
}
