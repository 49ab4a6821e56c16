import Foundation
import WalletStore

/// The overview's line chart of coins per day, drawn as inline SVG on the
/// server. Its `aria-label` states the totals, and the page puts every
/// number in a table under it, so nothing is only in the picture.
enum CoinsChart {
    static let width = 720
    static let height = 240
    static let left = 64
    static let right = 12
    static let top = 12
    static let bottom = 28

    struct Series {
        var name: String
        var cssClass: String
        var values: [Int64]
    }

    static func series(_ days: [ConsoleStore.DayTotals]) -> [Series] {
        [Series(name: "credited", cssClass: "credited", values: days.map(\.credited)),
         Series(name: "debited", cssClass: "debited", values: days.map(\.debited)),
         Series(name: "refunded", cssClass: "refunded", values: days.map(\.refunded))]
    }

    static func label(_ days: [ConsoleStore.DayTotals]) -> String {
        let totals = series(days).map { "\(grouped($0.values.reduce(0, +))) \($0.name)" }
        return "Coins per day over the last \(days.count) days, \(days.first?.day ?? "") to \(days.last?.day ?? ""): "
            + totals.joined(separator: ", ") + " in total"
    }

    static func svg(_ days: [ConsoleStore.DayTotals]) -> HTML {
        let all = series(days)
        let peak = max(1, all.flatMap(\.values).max() ?? 1)
        let scale = niceCeiling(peak)
        let plotWidth = Double(width - left - right)
        let plotHeight = Double(height - top - bottom)
        func x(_ index: Int) -> Double {
            days.count < 2 ? Double(left) + plotWidth / 2 : Double(left) + plotWidth * Double(index) / Double(days.count - 1)
        }
        func y(_ value: Int64) -> Double { Double(top) + plotHeight * (1 - Double(value) / Double(scale)) }

        var grid: [HTML] = []
        for step in 0...4 {
            let value = scale * Int64(step) / 4
            let lineY = format(y(value))
            grid.append("""
                <line class="grid" x1="\(left)" x2="\(width - right)" y1="\(lineY)" y2="\(lineY)"/>\
                <text class="axis" x="\(left - 6)" y="\(lineY)" text-anchor="end" dominant-baseline="middle">\(grouped(value))</text>
                """)
        }
        if let first = days.first, let last = days.last {
            grid.append("""
                <text class="axis" x="\(left)" y="\(height - 8)" text-anchor="start">\(first.day)</text>\
                <text class="axis" x="\(width - right)" y="\(height - 8)" text-anchor="end">\(last.day)</text>
                """)
        }
        let lines = all.map { series -> HTML in
            let points = series.values.enumerated().map { "\(format(x($0.offset))),\(format(y($0.element)))" }
            return "<polyline class=\"series \(series.cssClass)\" points=\"\(points.joined(separator: " "))\"/>"
        }
        return """
            <svg id="coins-chart" class="chart" role="img" aria-label="\(label(days))" \
            viewBox="0 0 \(width) \(height)" preserveAspectRatio="xMidYMid meet">\(grid)\(lines)</svg>
            """
    }

    /// The smallest of 1, 2 or 5 times a power of ten that is at least `value`.
    static func niceCeiling(_ value: Int64) -> Int64 {
        var magnitude: Int64 = 1
        while true {
            for factor: Int64 in [1, 2, 5] where factor * magnitude >= value { return factor * magnitude }
            magnitude *= 10
        }
    }

    static func format(_ value: Double) -> String {
        String(format: "%.1f", value)
    }

    /// 1234567 as "1,234,567".
    static func grouped(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return value < 0 ? "-" + out : out
    }
}
