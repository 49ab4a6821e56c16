/// A piece of HTML. Built by string interpolation, in which every `String`
/// is escaped and only another `HTML` goes in as markup, so text from the
/// ledger (user ids, reasons, metadata: all of it attacker-controlled) can
/// only ever be text.
struct HTML: Sendable, ExpressibleByStringInterpolation {
    private(set) var markup: String

    init(stringLiteral value: String) {
        markup = value
    }

    init(stringInterpolation: StringInterpolation) {
        markup = stringInterpolation.markup
    }

    /// Pieces one after another.
    init(joining pieces: some Sequence<HTML>) {
        markup = pieces.reduce(into: "") { $0 += $1.markup }
    }

    struct StringInterpolation: StringInterpolationProtocol {
        var markup = ""

        init(literalCapacity: Int, interpolationCount: Int) {
            markup.reserveCapacity(literalCapacity + interpolationCount * 16)
        }

        mutating func appendLiteral(_ literal: String) {
            markup += literal
        }

        mutating func appendInterpolation(_ text: String) {
            markup += HTML.escape(text)
        }

        /// Nothing for nil.
        mutating func appendInterpolation(_ text: String?) {
            if let text { markup += HTML.escape(text) }
        }

        mutating func appendInterpolation(_ number: some BinaryInteger) {
            markup += String(number)
        }

        mutating func appendInterpolation(_ html: HTML) {
            markup += html.markup
        }

        mutating func appendInterpolation(_ pieces: [HTML]) {
            for piece in pieces { markup += piece.markup }
        }
    }

    /// Text made safe for element content and quoted attribute values.
    static func escape(_ text: String) -> String {
        guard text.utf8.contains(where: { [UInt8(ascii: "&"), UInt8(ascii: "<"), UInt8(ascii: ">"),
                                           UInt8(ascii: "\""), UInt8(ascii: "'")].contains($0) }) else { return text }
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count + 16)
        for character in text.unicodeScalars {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }
}
