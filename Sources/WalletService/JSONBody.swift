import HTTPServer
import WalletCore

/// The body checks every POST shares, in the documented order: the content
/// type (415), then strict JSON syntax (400).
enum JSONBody {
    static func parse(_ request: Request) throws -> JSONValue {
        guard let type = request.headers["content-type"]?.split(separator: ";").first,
              type.trimmingSpacesAndTabs.lowercased() == "application/json" else {
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

extension Substring {
    /// Without the spaces and tabs (HTTP's optional whitespace) around it.
    /// Foundation's `trimmingCharacters` bridges through `NSString`, which
    /// cost every POST about 4% of its CPU.
    var trimmingSpacesAndTabs: Substring {
        let isBlank = { (character: Character) in character == " " || character == "\t" }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else { return "" }
        return self[first...last]
    }
}
