public import Foundation

/// The one way the service writes a time: RFC 3339 in UTC with exactly six
/// fractional digits and `Z` (`2026-12-02T12:45:46.195317Z`), as
/// PostgreSQL's `to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
/// writes a `timestamptz` (trailing zeros kept). API bodies, stored answers
/// replayed, console pages, the command line and log lines all use it.
///
/// A `Date` is a `Double` of seconds since 2001, which holds every
/// microsecond exactly while it is less than 2^33 seconds away: from
/// October 1728 to March 2273. Within that span a time read from the
/// database (`Date(utc:)`) is written back to the microsecond it had; past
/// it, to the nearest microsecond the `Double` holds.
extension Date {
    public var rfc3339: String {
        let interval = timeIntervalSinceReferenceDate
        precondition(interval.isFinite && abs(interval) < Self.intervalMagnitudeMax, "a time too far away to write")
        // Both steps are exact: the whole seconds, and what is left of them.
        var seconds = interval.rounded(.down)
        var microseconds = Int64(((interval - seconds) * 1_000_000).rounded())
        if microseconds == 1_000_000 {
            seconds += 1
            microseconds = 0
        }
        let unixSeconds = Int64(seconds) + Self.referenceUnixSeconds
        let days = unixSeconds.floorDivided(by: 86_400)
        let secondOfDay = unixSeconds - days * 86_400
        let (year, month, day) = CivilDay.from(daysSinceEpoch: days)
        var text = ""
        text.reserveCapacity(27)
        if year < 0 { text += "-" }
        text.appendDigits(year.magnitude, width: 4)
        text += "-"
        text.appendDigits(UInt64(month), width: 2)
        text += "-"
        text.appendDigits(UInt64(day), width: 2)
        text += "T"
        text.appendDigits(UInt64(secondOfDay / 3_600), width: 2)
        text += ":"
        text.appendDigits(UInt64(secondOfDay / 60 % 60), width: 2)
        text += ":"
        text.appendDigits(UInt64(secondOfDay % 60), width: 2)
        text += "."
        text.appendDigits(UInt64(microseconds), width: 6)
        text += "Z"
        return text
    }

    /// The instant of a UTC calendar time, or nil when a field is out of
    /// its range (a 13th month, a 31st of April, a 61st second).
    public init?(utc year: Int, _ month: Int, _ day: Int, _ hour: Int, _ minute: Int, _ second: Int, microsecond: Int) {
        guard (-Self.yearMagnitudeMax...Self.yearMagnitudeMax).contains(year), (1...12).contains(month),
              (1...CivilDay.length(ofMonth: month, in: year)).contains(day), (0...23).contains(hour),
              (0...59).contains(minute), (0...59).contains(second), (0...999_999).contains(microsecond)
        else { return nil }
        let days = CivilDay.daysSinceEpoch(year: Int64(year), month: Int64(month), day: Int64(day))
        let unixSeconds = days * 86_400 + Int64(hour * 3_600 + minute * 60 + second)
        // The whole seconds are exact in a Double; adding the fraction
        // rounds once, to the nearest time a Date holds.
        self.init(timeIntervalSinceReferenceDate: Double(unixSeconds - Self.referenceUnixSeconds)
                                                  + Double(microsecond) / 1_000_000)
    }

    /// 2001-01-01T00:00:00Z, Foundation's reference date, in Unix seconds.
    private static let referenceUnixSeconds: Int64 = 978_307_200
    /// PostgreSQL's own range ends in year 294276; these bounds keep every
    /// step above inside Int64 with room to spare.
    private static let yearMagnitudeMax = 300_000
    private static let intervalMagnitudeMax = 1e13
}

/// Days since 1970-01-01 and proleptic Gregorian calendar days, both ways,
/// in integers (the algorithms of Howard Hinnant's `chrono`-compatible date
/// library: eras of 400 years, years that begin in March).
enum CivilDay {
    static func daysSinceEpoch(year: Int64, month: Int64, day: Int64) -> Int64 {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = shiftedYear.floorDivided(by: 400)
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func from(daysSinceEpoch days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = shifted.floorDivided(by: 146_097)
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func length(ofMonth month: Int, in year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}

extension Int64 {
    /// Division rounded toward negative infinity, for times before 1970.
    fileprivate func floorDivided(by divisor: Int64) -> Int64 {
        let quotient = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
    }
}

extension String {
    /// `value` in decimal, zero-padded on the left to `width` digits.
    fileprivate mutating func appendDigits(_ value: UInt64, width: Int) {
        let digits = String(value)
        if digits.utf8.count < width { self += String(repeating: "0", count: width - digits.utf8.count) }
        self += digits
    }
}
