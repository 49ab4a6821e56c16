// swift-tools-version:6.1
import PackageDescription

// No package dependencies: everything outside the toolchain comes from
// Debian as a C library (libpq, libmicrohttpd, OpenSSL 3).
let package = Package(
    name: "wallet",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "wallet", targets: ["wallet"]),
        // The client for game servers and app backends, on its own: a
        // package that depends on this product builds nothing else of ours.
        .library(name: "WalletClient", targets: ["WalletClient"]),
    ],
    targets: [
        // C shims: a module map and one header each. Only the adapter targets
        // (Postgres, HTTPServer, Crypto) import them.
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]
        ),
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]
        ),
        .systemLibrary(
            name: "COpenSSL",
            pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]
        ),

        // The one JSON stack: the strict parser, the lossless `JSONValue`
        // and the one writer. Everything the service writes as JSON (API
        // bodies, requests to the stores, log lines) goes through it; it
        // depends on nothing, so every layer may use it.
        .target(name: "JSON"),
        // The one way a time is written (RFC 3339, UTC, microseconds), for
        // API bodies, console pages, the command line and log lines; it
        // depends on nothing, so every layer may use it.
        .target(name: "Timestamps"),
        // JSON-lines logging, written by the JSON writer, shared by every
        // layer below the service.
        .target(name: "Logging", dependencies: ["JSON", "Timestamps"]),
        // Locks and waiting on pthreads, which the thread sanitizer sees
        // (the standard library's Mutex it does not), the one bounded cache
        // built on them, and the clock that schedules and pauses wait on,
        // for the store adapters and the service alike.
        .target(name: "Locking"),

        // Adapters.
        .target(name: "Postgres", dependencies: ["CLibPQ", "Locking", "Logging", "Timestamps"]),
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "JSON", "Locking", "Logging"]),
        .target(name: "Crypto", dependencies: ["COpenSSL"]),
        // Calls to the stores' server APIs (Apple's, Google's): one bounded
        // HTTP exchange, and the retry rule they share.
        .target(name: "StoreHTTP", dependencies: ["Locking"]),

        // Domain and service.
        .target(name: "WalletCore"),
        .target(
            name: "AppStore",
            dependencies: ["Crypto", "JSON", "Locking", "StoreHTTP", "WalletCore"],
            exclude: ["Embedded"],
            plugins: ["EmbedFiles"]
        ),
        // Google Play: the Android Publisher API with a service account,
        // the purchase policy, and Pub/Sub push authentication.
        .target(name: "GooglePlay", dependencies: ["Crypto", "JSON", "Locking", "StoreHTTP", "WalletCore"]),
        // The ledger database: the only code that talks to it. Embeds the
        // migrations and function files.
        .target(
            name: "WalletStore",
            dependencies: ["Postgres", "Crypto", "JSON", "WalletCore", "Locking", "Logging"],
            plugins: ["EmbedFiles"]
        ),
        // What the service's roles share: metrics, readiness, the bounded
        // pools of work kept off the server threads, the problem mapping of
        // `WalletError`, and the two store paths both a route and a sweep
        // take (App Store notifications, Google Play voids).
        .target(
            name: "ServiceSupport",
            dependencies: ["WalletStore", "HTTPServer", "AppStore", "GooglePlay", "StoreHTTP", "WalletCore", "JSON",
                           "Locking", "Logging", "Timestamps"]
        ),
        // The background workers: the stores' sweeps (App Store notification
        // history, Google Play voided purchases), the outbox sender, hold
        // expiry, and upkeep (schema bring-up, idempotency purge).
        .target(
            name: "ServiceWorkers",
            dependencies: ["ServiceSupport", "WalletStore", "AppStore", "GooglePlay", "WalletCore", "Crypto", "StoreHTTP",
                           "JSON", "Locking", "Logging"]
        ),
        // The HTTP API: routes, request and response bodies, API keys, the
        // credits' verification with the stores (their policy is the
        // stores' targets'), the stores' notification routes, operations
        // routes and the OpenAPI document.
        .target(
            name: "ServiceAPI",
            dependencies: ["ServiceSupport", "WalletStore", "HTTPServer", "Crypto", "AppStore", "GooglePlay", "WalletCore", "JSON",
                           "Locking", "Logging", "Timestamps"],
            exclude: ["Embedded"],
            plugins: ["EmbedFiles"]
        ),
        // The support console at /admin: server-rendered pages, sign-in
        // sessions, its stylesheet.
        .target(
            name: "ServiceConsole",
            dependencies: ["ServiceSupport", "WalletStore", "HTTPServer", "Crypto", "WalletCore", "Locking", "Logging",
                           "Timestamps"],
            exclude: ["Embedded"],
            plugins: ["EmbedFiles"]
        ),
        // The composition root: the configuration, the stores' clients made
        // from it, and `buildApplication`, which builds and starts the rest.
        .target(
            name: "WalletService",
            dependencies: ["ServiceAPI", "ServiceConsole", "ServiceWorkers", "ServiceSupport", "WalletStore", "HTTPServer",
                           "Crypto", "AppStore", "GooglePlay", "StoreHTTP", "WalletCore", "Locking", "Logging"]
        ),
        // The command line: one file per command, on the service's and the
        // store's public API.
        .executableTarget(
            name: "wallet",
            dependencies: ["WalletService", "ServiceAPI", "ServiceWorkers", "ServiceSupport", "WalletStore", "WalletCore", "AppStore",
                           "GooglePlay", "Locking", "Postgres", "Logging", "Timestamps"]
        ),

        // The client library: the API as typed Swift calls, with the retry
        // rule and the typed problems. Foundation only, and no other target
        // here, so a game server can depend on the product alone.
        .target(name: "WalletClient"),

        // Examples: a game server's shop (holds, capture or release, and
        // refunds taken back through the event feed), on the client alone,
        // as a game server outside this package would build it.
        // examples/run.sh runs it against `wallet serve`.
        .executableTarget(name: "GameShopExample", dependencies: ["WalletClient"], path: "examples/game-shop"),

        // Build-time embedding of run-time files (migrations, the OpenAPI
        // document, the Apple root certificate), so the binary needs nothing
        // beside it.
        .executableTarget(name: "EmbedFilesTool"),
        .plugin(name: "EmbedFiles", capability: .buildTool(), dependencies: ["EmbedFilesTool"]),

        // Tests. Unit tests per target; WalletServiceTests is the integration
        // suite that goes through the real server and a real PostgreSQL.
        // Test-only signing: a P-256 private key and a certificate authority
        // that issues strict-mode chains. The service only verifies, so this
        // is not part of Crypto; it may use OpenSSL because it is not product.
        .target(name: "CryptoTestSupport", dependencies: ["Crypto", "COpenSSL"], path: "Tests/CryptoTestSupport"),
        // Databases, HTTP clients, processes and fake stores for every suite;
        // it builds without the service.
        .target(
            name: "TestSupport",
            dependencies: ["Postgres", "HTTPServer", "Crypto", "CryptoTestSupport", "AppStore", "GooglePlay", "WalletStore",
                           "JSON", "Locking", "Logging"],
            path: "Tests/TestSupport"
        ),
        // The service in-process, on a real socket and a real database.
        .target(
            name: "ServiceTestSupport",
            dependencies: ["TestSupport", "WalletService", "ServiceSupport", "WalletStore", "WalletCore", "Postgres", "HTTPServer"],
            path: "Tests/ServiceTestSupport"
        ),
        .testTarget(name: "JSONTests", dependencies: ["JSON"]),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "Locking", "TestSupport", "Timestamps"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "JSON", "Locking", "Logging", "TestSupport"]),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto", "CryptoTestSupport"]),
        .testTarget(
            name: "AppStoreTests", dependencies: ["AppStore", "Crypto", "CryptoTestSupport", "TestSupport", "WalletCore"],
            exclude: ["Vectors"]
        ),
        .testTarget(name: "GooglePlayTests", dependencies: ["GooglePlay", "Crypto", "StoreHTTP", "TestSupport", "WalletCore"]),
        .testTarget(name: "WalletCoreTests", dependencies: ["WalletCore"]),
        // The store's own suites: its SQL, group commit, the admin scripts.
        .testTarget(
            name: "WalletStoreTests",
            dependencies: ["WalletStore", "WalletCore", "Postgres", "JSON", "Locking", "Logging", "TestSupport"]
        ),
        .testTarget(
            name: "ServiceAPITests",
            dependencies: ["ServiceAPI", "AppStore", "Crypto", "HTTPServer", "JSON", "TestSupport", "WalletCore"]
        ),
        // The client against the real `wallet serve` process and its
        // embedded PostgreSQL.
        .testTarget(name: "WalletClientTests", dependencies: ["WalletClient", "TestSupport", "Postgres", "Locking", "Logging"]),
        .testTarget(name: "LockingTests", dependencies: ["Locking", "TestSupport"]),
        .testTarget(
            name: "WalletServiceTests",
            dependencies: [
                "WalletService", "ServiceAPI", "ServiceConsole", "ServiceSupport", "ServiceWorkers", "WalletStore", "Postgres",
                "HTTPServer", "Crypto", "CryptoTestSupport", "AppStore", "WalletCore", "JSON", "Locking", "StoreHTTP", "GooglePlay",
                "TestSupport", "ServiceTestSupport", "Timestamps",
            ],
            // The previous release's function files, read by the upgrade test.
            exclude: ["PreviousRelease"]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// Strict checks for every target: Swift 6 mode already means complete
// concurrency checking; these add the upcoming rules we want to hold to now.
for target in package.targets where target.type != .system && target.type != .plugin {
    var settings = target.swiftSettings ?? []
    settings.append(.enableUpcomingFeature("ExistentialAny"))
    settings.append(.enableUpcomingFeature("InternalImportsByDefault"))
    settings.append(.enableUpcomingFeature("MemberImportVisibility"))
    target.swiftSettings = settings
}
