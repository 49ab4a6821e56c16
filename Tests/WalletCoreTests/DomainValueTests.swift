import Testing
import WalletCore

/// Domain values are valid by construction: each rule, at its edges.
struct DomainValueTests {
    @Test func userIDsAndFlowNumbers() {
        for valid in ["a", "player-1", "A.b_c:d@e-f", String(repeating: "x", count: 128), "1000000123456789", "...", ".a"] {
            #expect(UserID(valid) != nil, "\(valid)")
            #expect(FlowNumber(valid) != nil, "\(valid)")
        }
        for invalid in ["", String(repeating: "x", count: 129), "has space", "semi;colon", "quote'", "naïve", "slash/", "\u{0}",
                        ".", ".."] {
            #expect(UserID(invalid) == nil, "\(invalid)")
            #expect(FlowNumber(invalid) == nil, "\(invalid)")
        }
    }

    @Test func productIDsAndCurrencies() {
        #expect(ProductID("guodong600") != nil)
        #expect(ProductID("cynet.coci.5usd") != nil)
        #expect(ProductID("has:colon") == nil)
        #expect(ProductID("") == nil)
        #expect(Currency("coin") != nil)
        #expect(Currency("gem_2") != nil)
        #expect(Currency(String(repeating: "a", count: 32)) != nil)
        for invalid in ["", "Coin", "1coin", "co-in", String(repeating: "a", count: 33)] {
            #expect(Currency(invalid) == nil, "\(invalid)")
        }
        #expect(Currency.coin.rawValue == "coin")
    }

    @Test func amountsAndQuantities() {
        #expect(Amount(1)?.value == 1)
        #expect(Amount(1_000_000_000_000)?.value == 1_000_000_000_000)
        #expect(Amount(0) == nil)
        #expect(Amount(-1) == nil)
        #expect(Amount(1_000_000_000_001) == nil)
        #expect(Amount(Int64.max) == nil)
        #expect(Quantity(1) == .one)
        #expect(Quantity(10)?.value == 10)
        #expect(Quantity(0) == nil)
        #expect(Quantity(11) == nil)
    }

    @Test func idempotencyKeysArePrintableASCII() {
        #expect(IdempotencyKey("order-1") != nil)
        #expect(IdempotencyKey("with space ~") != nil)
        #expect(IdempotencyKey(String(repeating: "k", count: 255)) != nil)
        for invalid in ["", String(repeating: "k", count: 256), "tab\there", "newline\n", "é", "\u{7F}"] {
            #expect(IdempotencyKey(invalid) == nil, "\(invalid.debugDescription)")
        }
    }

    @Test func scopesAllowTheirJobAndAdminAllowsAll() {
        let game = APIClient(name: "game-server", scopes: [.debit, .read])
        #expect(game.allows(.debit))
        #expect(game.allows(.read))
        #expect(!game.allows(.credit))
        let admin = APIClient(name: "ops", scopes: [.admin])
        #expect(Scope.allCases.allSatisfy(admin.allows))
        #expect(Scope.allCases.sorted() == [.credit, .debit, .grant, .read, .events, .console, .admin])
        #expect(!game.allows(.grant))
        // A support agent's key opens the console and nothing else.
        let support = APIClient(name: "alice-support", scopes: [.console])
        #expect(Scope.allCases.filter(support.allows) == [.console])
    }
}
