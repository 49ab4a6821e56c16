import Foundation
import Postgres
import Testing
import TestSupport
@testable import WalletStore

/// The shape of the live SQL, checked from the files this build carries:
/// money moves in one function, every live function lives in a function
/// file, and the functions stay readable (short bodies, no long positional
/// rows).
@Suite(.timeLimit(.minutes(2)))
struct FunctionFileTests {
    /// What runs: the function files, and the migrations after 0016 (those
    /// before may define functions that the files have since replaced).
    static var liveSQL: [(name: String, sql: String)] {
        Schema.functionFiles.map { ("functions/" + $0.name, $0.sql) }
            + Schema.migrationFiles.filter { $0.name >= "0017" }
    }

    @Test func oneFunctionAppendsEntriesAndEventsAndChangesBalancesAndHeldCoins() {
        var inserts: [String] = []
        var eventInserts: [String] = []
        var balanceUpdates: [String] = []
        var heldUpdates: [String] = []
        var lotWrites: Set<String> = []
        for file in Self.liveSQL {
            for statement in SQLText.statements(SQLText.code(file.sql)) {
                let words = statement.lowercased().split(whereSeparator: \.isWhitespace).joined(separator: " ")
                if words.contains("insert into wallet.entries") { inserts.append(file.name) }
                if words.contains("insert into wallet.events (") { eventInserts.append(file.name) }
                if SQLText.updatesWallet(words, column: "balance") { balanceUpdates.append(file.name) }
                if SQLText.updatesWallet(words, column: "held") { heldUpdates.append(file.name) }
                if ["insert into wallet.lots", "update wallet.lots", "insert into wallet.entry_lots"].contains(where: {
                    words.contains($0)
                }) {
                    lotWrites.insert(file.name)
                }
            }
        }
        // Lots are made, taken and refilled by the posting function alone
        // (the migration that brought them made the opening lots).
        #expect(lotWrites == ["functions/11_post_entries.sql", "0026_lots.sql"])
        #expect(inserts == ["functions/11_post_entries.sql"])
        #expect(eventInserts == ["functions/11_post_entries.sql"])
        #expect(balanceUpdates == ["functions/11_post_entries.sql"])
        #expect(heldUpdates == ["functions/11_post_entries.sql"])
        let literal = Self.liveSQL.map { $0.sql.components(separatedBy: "UPDATE wallet.wallets SET balance").count - 1 }
        #expect(literal.reduce(0, +) == 1)
    }

    @Test func noPLpgSQLFunctionBodyIsLongerThanSeventyLines() {
        var long: [String] = []
        for file in Self.liveSQL {
            for function in SQLText.functions(file.sql) where function.language == "plpgsql" && function.bodyLines > 70 {
                long.append("\(function.name) in \(file.name): \(function.bodyLines) lines")
            }
        }
        #expect(long == [])
    }

    @Test func noPositionalRowHasMoreThanFiveFields() {
        var wide: [String] = []
        for file in Self.liveSQL {
            for fields in SQLText.rowConstructorWidths(SQLText.code(file.sql)) where fields > 5 {
                wide.append("\(file.name): ROW(...) of \(fields) fields")
            }
        }
        #expect(wide == [])
    }

    /// Every function in schema `wallet` is (re)defined by a function file:
    /// with all of them dropped, the files alone make each one again.
    @Test func everyLiveFunctionLivesInAFunctionFile() throws {
        let connection = try Connection(options: try TestDatabase.make())
        defer { connection.close() }
        let signatures = """
            SELECT p.oid::regprocedure::text FROM pg_proc p
            WHERE p.pronamespace = 'wallet'::regnamespace ORDER BY 1
            """
        let live = try connection.query(PostgresQuery(unsafeSQL: signatures)).map { try $0.decode(String.self, at: 0) }
        #expect(live.count > 40)
        try connection.execute("BEGIN")
        // As pg_dump's scripts do: a body may name a function a later file makes.
        try connection.execute("SET LOCAL check_function_bodies = off")
        for signature in live {
            try connection.execute(PostgresQuery(unsafeSQL: "DROP FUNCTION IF EXISTS \(signature) CASCADE"))
        }
        #expect(try connection.query(PostgresQuery(unsafeSQL: signatures)).isEmpty)
        for file in Schema.functionFiles {
            try connection.executeScript(unsafeSQL: file.sql)
        }
        let remade = try connection.query(PostgresQuery(unsafeSQL: signatures)).map { try $0.decode(String.self, at: 0) }
        try connection.execute("ROLLBACK")
        #expect(Set(live).subtracting(remade).sorted() == [], "defined only by a migration")
        #expect(Set(remade).subtracting(live).sorted() == [], "defined by a file, not live")
    }
}

/// Just enough of SQL's lexical rules to read the function files: comments
/// and quoted text set aside, statements split at top-level semicolons.
enum SQLText {
    /// The text with comments removed and string literals (quoted or
    /// dollar-quoted function bodies excepted) blanked, so words inside
    /// them count for nothing.
    static func code(_ sql: String) -> String {
        var output = ""
        var index = sql.startIndex
        while index < sql.endIndex {
            let rest = sql[index...]
            if rest.hasPrefix("--") {
                index = rest.firstIndex(of: "\n") ?? sql.endIndex
            } else if rest.hasPrefix("'") {
                var end = sql.index(after: index)
                while end < sql.endIndex {
                    if sql[end] == "'" {
                        let next = sql.index(after: end)
                        if next < sql.endIndex, sql[next] == "'" { end = sql.index(after: next); continue }
                        break
                    }
                    end = sql.index(after: end)
                }
                output += "''"
                index = end < sql.endIndex ? sql.index(after: end) : end
            } else {
                output.append(sql[index])
                index = sql.index(after: index)
            }
        }
        return output
    }

    /// Statements, split at semicolons outside parentheses. A function's
    /// `$$` body is read as code: its own statements are split too.
    static func statements(_ code: String) -> [String] {
        var statements: [String] = []
        var current = ""
        var depth = 0
        for character in code {
            if character == "(" { depth += 1 }
            if character == ")" { depth = max(0, depth - 1) }
            if character == ";" && depth == 0 {
                statements.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        statements.append(current)
        return statements.map { $0.replacingOccurrences(of: "$$", with: " ") }
    }

    /// Whether a statement (lowercased, single-spaced) is an UPDATE of
    /// wallet.wallets whose SET list assigns `balance`.
    static func updatesWallet(_ words: String, column: String) -> Bool {
        guard let update = words.range(of: "update wallet.wallets") else { return false }
        let after = words[update.upperBound...]
        guard let set = after.range(of: " set ") else { return false }
        var list = String(after[set.upperBound...])
        for end in [" from ", " where ", " returning "] {
            if let range = list.range(of: end) { list = String(list[..<range.lowerBound]) }
        }
        return list.split(separator: ",").contains { assignment in
            let target = assignment.split(separator: "=").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            return target == column || target.hasSuffix("." + column)
        }
    }

    /// The number of fields of each `ROW(...)` constructor.
    static func rowConstructorWidths(_ code: String) -> [Int] {
        let characters = Array(code)
        var widths: [Int] = []
        var index = 0
        while index + 4 <= characters.count {
            let word = String(characters[index..<index + 4]).uppercased()
            let boundary = index == 0 || !(characters[index - 1].isLetter || characters[index - 1].isNumber
                                           || characters[index - 1] == "_")
            if word == "ROW(" && boundary {
                var depth = 1
                var fields = 1
                var cursor = index + 4
                while cursor < characters.count && depth > 0 {
                    switch characters[cursor] {
                    case "(": depth += 1
                    case ")": depth -= 1
                    case "," where depth == 1: fields += 1
                    default: break
                    }
                    cursor += 1
                }
                widths.append(fields)
            }
            index += 1
        }
        return widths
    }

    struct Function {
        var name: String
        var language: String
        var bodyLines: Int
    }

    /// The functions a file creates, with their language and the lines of
    /// their `$$`-quoted body (those strictly between its two `$$` lines).
    static func functions(_ sql: String) -> [Function] {
        var functions: [Function] = []
        let lines = sql.components(separatedBy: "\n")
        var index = 0
        while index < lines.count {
            guard lines[index].uppercased().hasPrefix("CREATE OR REPLACE FUNCTION ") else {
                index += 1
                continue
            }
            let name = lines[index].dropFirst("CREATE OR REPLACE FUNCTION ".count).prefix { $0 != "(" }
            var header = ""
            var opening = index
            while opening < lines.count && !lines[opening].contains("$$")
                    && !lines[opening].trimmingCharacters(in: .whitespaces).hasPrefix("RETURN ") {
                header += lines[opening] + "\n"
                opening += 1
            }
            guard opening < lines.count else { break }
            if !lines[opening].contains("$$") {
                // A SQL-standard body (`RETURN expression`): SQL, not PL/pgSQL.
                functions.append(Function(name: String(name), language: "sql", bodyLines: 0))
                index = opening + 1
                continue
            }
            header += lines[opening]
            var closing = opening + 1
            // A body on the same line as its opening `$$` closes there too.
            if lines[opening].components(separatedBy: "$$").count > 2 { closing = opening }
            while closing < lines.count && !lines[closing].contains("$$") { closing += 1 }
            let language = header.lowercased().contains("language plpgsql") ? "plpgsql"
                : header.lowercased().contains("language sql") ? "sql" : "other"
            functions.append(Function(name: String(name), language: language, bodyLines: max(0, closing - opening - 1)))
            index = closing + 1
        }
        return functions
    }
}
