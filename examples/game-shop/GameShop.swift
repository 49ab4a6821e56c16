import Foundation
import WalletClient

/// A game server's shop on the wallet, as a command:
///
///     GameShopExample sell --user U --item ITEM [--order ID] [--fail-delivery]
///     GameShopExample follow
///     GameShopExample inventory [--user U]
///
/// Environment: WALLET_URL (http://127.0.0.1:8080); WALLET_GAME_KEY, scopes
/// debit and read, for `sell`; WALLET_EVENTS_KEY, scope events, for
/// `follow`; SHOP_STATE, the shop's own records (./game-shop-state.json).
/// Exits 0 when every step got an answer it knows what to do with (a sale
/// refused for want of coins included), 1 on any other failure, 64 on a
/// usage error.
@main
enum GameShop {
    static let usage = """
        usage:
          GameShopExample sell --user U --item ITEM [--order ID] [--fail-delivery]
          GameShopExample follow
          GameShopExample inventory [--user U]
        items: \(catalog.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value) coin)" }.joined(separator: ", "))
        environment: WALLET_URL, WALLET_GAME_KEY (debit, read) for sell, WALLET_EVENTS_KEY (events) for follow,
          SHOP_STATE (./game-shop-state.json)
        """

    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            try await run(arguments)
        } catch let error as UsageError {
            FileHandle.standardError.write(Data("\(error.message)\n\(usage)\n".utf8))
            exit(64)
        } catch let error as any WalletProblemError {
            FileHandle.standardError.write(Data("the wallet refused: \(error.debugDescription)\n".utf8))
            exit(1)
        } catch {
            FileHandle.standardError.write(Data("failed: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run(_ arguments: [String]) async throws {
        guard let command = arguments.first else { throw UsageError("no command") }
        let environment = ProcessInfo.processInfo.environment
        let stateURL = URL(fileURLWithPath: environment["SHOP_STATE"] ?? "game-shop-state.json")
        var state = try ShopState.load(from: stateURL)
        let save = { (state: ShopState) throws in try state.save(to: stateURL) }
        var options = Options(Array(arguments.dropFirst()))

        switch command {
        case "sell":
            let userID = try options.value("user")
            let item = try options.value("item")
            let order = try options.optionalValue("order") ?? "order-\(UUID().uuidString.lowercased())"
            let deliveryFails = options.flag("fail-delivery")
            try options.finish()
            let shop = Shop(wallet: try client(environment, key: "WALLET_GAME_KEY"), deliveryFails: deliveryFails)
            try await shop.sell(item: item, to: userID, order: order, state: &state, saving: save)
        case "follow":
            try options.finish()
            let watcher = RefundWatcher(feed: try client(environment, key: "WALLET_EVENTS_KEY"))
            let start = state.feedPosition
            let summary = try await watcher.follow(state: &state, saving: save)
            print("followed the feed after event \(start) to event \(state.feedPosition): "
                + "\(summary.events) event(s), \(summary.revoked) item(s) revoked")
        case "inventory":
            let userID = try options.optionalValue("user")
            try options.finish()
            let held = state.sales.filter { $0.status == .delivered && (userID == nil || $0.userID == userID) }
            if held.isEmpty { print("inventory: empty") }
            for sale in held {
                print("inventory: \(sale.userID) has \(sale.item) (order \(sale.order))")
            }
        default:
            throw UsageError("unknown command \(command)")
        }
    }

    static func client(_ environment: [String: String], key name: String) throws -> WalletClient {
        guard let key = environment[name], !key.isEmpty else { throw UsageError("\(name) is not set") }
        let base = environment["WALLET_URL"] ?? "http://127.0.0.1:8080"
        guard let url = URL(string: base) else { throw UsageError("WALLET_URL is not a URL: \(base)") }
        return WalletClient(baseURL: url, apiKey: key)
    }
}

struct UsageError: Error {
    var message: String
    init(_ message: String) { self.message = message }
}

/// `--name value` options and `--name` flags, each used once.
struct Options {
    private var remaining: [String]

    init(_ arguments: [String]) {
        remaining = arguments
    }

    mutating func optionalValue(_ name: String) throws -> String? {
        guard let index = remaining.firstIndex(of: "--\(name)") else { return nil }
        guard index + 1 < remaining.count else { throw UsageError("--\(name) needs a value") }
        let value = remaining[index + 1]
        remaining.removeSubrange(index...index + 1)
        return value
    }

    mutating func value(_ name: String) throws -> String {
        guard let value = try optionalValue(name), !value.isEmpty else { throw UsageError("--\(name) is required") }
        return value
    }

    mutating func flag(_ name: String) -> Bool {
        guard let index = remaining.firstIndex(of: "--\(name)") else { return false }
        remaining.remove(at: index)
        return true
    }

    func finish() throws {
        if let extra = remaining.first { throw UsageError("unexpected argument \(extra)") }
    }
}
