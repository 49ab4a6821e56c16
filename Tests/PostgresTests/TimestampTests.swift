import Foundation
import Testing
import Timestamps

/// The one writer of times, on its own: the calendar both ways, rounding to
/// the microsecond, and fields that name no time.
@Suite struct TimestampTests {
    @Test func timesWriteAsRFC3339InUTCWithSixDigits() {
        #expect(Date(timeIntervalSince1970: 0).rfc3339 == "1970-01-01T00:00:00.000000Z")
        #expect(Date(timeIntervalSince1970: -0.000_001).rfc3339 == "1969-12-31T23:59:59.999999Z")
        #expect(Date(timeIntervalSince1970: 951_782_400).rfc3339 == "2000-02-29T00:00:00.000000Z")
        #expect(Date(timeIntervalSince1970: 1_767_323_045.5).rfc3339 == "2026-01-02T03:04:05.500000Z")
        #expect(Date(timeIntervalSince1970: -2_208_988_800).rfc3339 == "1900-01-01T00:00:00.000000Z")
        // A fraction that rounds to a whole second carries into it.
        #expect(Date(timeIntervalSince1970: 1_767_323_045.999_999_7).rfc3339 == "2026-01-02T03:04:06.000000Z")
        #expect(Date(timeIntervalSince1970: -0.000_000_2).rfc3339 == "1970-01-01T00:00:00.000000Z")
    }

    @Test func fieldsThatNameNoTimeAreRefused() {
        #expect(Date(utc: 2024, 2, 29, 0, 0, 0, microsecond: 0) != nil)
        #expect(Date(utc: 2000, 2, 29, 0, 0, 0, microsecond: 0) != nil)
        #expect(Date(utc: 2026, 2, 29, 0, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 1900, 2, 29, 0, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 4, 31, 0, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 0, 1, 0, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 13, 1, 0, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 1, 0, 0, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 1, 1, 24, 0, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 1, 1, 0, 60, 0, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 1, 1, 0, 0, 60, microsecond: 0) == nil)
        #expect(Date(utc: 2026, 1, 1, 0, 0, 0, microsecond: 1_000_000) == nil)
        #expect(Date(utc: 2026, 1, 1, 0, 0, 0, microsecond: -1) == nil)
        #expect(Date(utc: 2026, 12, 31, 23, 59, 59, microsecond: 999_999)?.rfc3339 == "2026-12-31T23:59:59.999999Z")
    }

    /// Every day from 1600 to 2400, against Foundation's own Gregorian
    /// calendar in UTC, and back.
    @Test func everyDayOfEightCenturiesIsTheCalendarsDay() throws {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = try #require(TimeZone(identifier: "UTC"))
        let first = -11_676_096_000 / 86_400 // 1600-01-01
        let last = 13_569_465_600 / 86_400 // 2400-01-01
        var mismatches: [String] = []
        for day in first...last {
            let noon = Date(timeIntervalSince1970: Double(day) * 86_400 + 43_200.25)
            let parts = calendar.dateComponents([.year, .month, .day], from: noon)
            let expected = String(format: "%04d-%02d-%02dT12:00:00.250000Z", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0)
            if noon.rfc3339 != expected { mismatches.append("\(noon.rfc3339) is \(expected)") }
            if Date(utc: parts.year ?? 0, parts.month ?? 0, parts.day ?? 0, 12, 0, 0, microsecond: 250_000) != noon {
                mismatches.append("\(expected) read back")
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.count): \(mismatches.prefix(3))")
    }
}
