public import Foundation

extension Date {
    /// A time as the API writes it (`2026-12-02T12:45:46.195317Z`), read
    /// back for a test to compare; nil for any other text.
    public init?(rfc3339Text text: String) {
        let format = Date.ISO8601FormatStyle().year().month().day()
            .time(includingFractionalSeconds: true).timeZone(separator: .omitted)
        guard let date = try? Date(text, strategy: format) else { return nil }
        self = date
    }
}
