import AppStore
import Foundation
import GooglePlay
import Logging
import ServiceAPI
import ServiceSupport
import WalletService
import WalletStore

/// The checks of `wallet doctor`, on the configuration `serve` would run
/// with, through the clients `serve` builds from it. Nothing is written to
/// the ledger, and every store call is a read that changes nothing: a
/// lookup of something that does not exist, a token grant, a
/// subscription's settings.
struct Doctor {
    let configuration: Configuration
    let logger: Logger
    private let metrics = Metrics()

    /// A transaction id Apple has not issued: far past the ids of today
    /// (about 2·10^15), in the 16 digits Apple's have.
    static let madeUpTransactionID = "9999999999999999"
    /// A purchase token Google never issued (its are opaque and far longer).
    static let madeUpPurchaseToken = "wallet-doctor-made-up-purchase-token"

    init(configuration: Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Runs every check in order, handing each to `report` as it ends.
    func run(report: (DoctorCheck) -> Void) {
        report(configurationCheck())
        let (database, catalog) = databaseCheck()
        report(database)
        report(verifierCheck())
        serverAPIChecks(report: report)
        googlePlayChecks(catalog: catalog, report: report)
        report(pushSubscriptionCheck())
    }

    // MARK: Configuration and database

    private func configurationCheck() -> DoctorCheck {
        let problems = configuration.servingProblems()
        guard problems.isEmpty else {
            return DoctorCheck(.failed, "configuration", problems.map(\.description).joined(separator: "; "))
        }
        return DoctorCheck(.ok, "configuration",
                           "every setting is valid; credit modes \(ServeCommand.modes(configuration)) have what they need")
    }

    /// The Google Play id a lookup names, or why there is none.
    enum Catalog {
        case product(String)
        case unavailable(String)
    }

    /// The database the operator's commands use, read within the request
    /// timeout once it is open.
    private func databaseCheck() -> (DoctorCheck, Catalog) {
        let name = "database"
        let place = configuration.databaseSessionURL != nil ? "WALLET_DATABASE_SESSION_URL's database"
            : configuration.databaseURL != nil ? "WALLET_DATABASE_URL's database"
            : "the embedded database in \(configuration.dataDirectory) (WALLET_DATA_DIR)"
        let found: (pending: [String], product: String?)
        do {
            found = try Administration.withDatabase(configuration, logger: logger,
                                                    timeoutSeconds: configuration.requestTimeoutSeconds) { database in
                let pending = try database.pendingMigrations()
                return (pending, pending.isEmpty ? try database.googlePlayProductIDOnSale() : nil)
            }
        } catch {
            return (DoctorCheck(.failed, name, "cannot read \(place): \(WalletCommand.errorText(error))"),
                    .unavailable("the catalog could not be read (database, above)"))
        }
        guard found.pending.isEmpty else {
            return (DoctorCheck(.failed, name, "\(place) lacks \(found.pending.count) of this build's migrations and function files: "
                                + found.pending.joined(separator: ", ")
                                + "; run wallet migrate (serve applies them at start unless --no-migrate)"),
                    .unavailable("the catalog is not there yet (migrations pending, above)"))
        }
        let catalog: Catalog = found.product.map { .product($0) } ?? .unavailable("no product of the catalog is on sale")
        return (DoctorCheck(.ok, name, "reached \(place); every migration of this build is applied"), catalog)
    }

    // MARK: App Store

    private func verifierCheck() -> DoctorCheck {
        let name = "appstore verifier"
        let apple = configuration.apple
        guard configuration.usesAppStoreMode || !apple.bundleIDs.isEmpty else {
            return DoctorCheck(.skipped, name, "not configured: no App Store mode in WALLET_CREDIT_VERIFICATION, no WALLET_APPLE_BUNDLE_ID")
        }
        do {
            _ = try AppStoreSetup.verifier(apple)
        } catch {
            return DoctorCheck(.failed, name, String(describing: error))
        }
        let roots = apple.rootCertificatePaths.isEmpty
            ? "the shipped Apple Root CA - G3 loads"
            : "the \(apple.rootCertificatePaths.count) root certificate(s) of WALLET_APPLE_ROOT_CERTS load"
        guard !apple.bundleIDs.isEmpty else {
            return DoctorCheck(.failed, name, "\(roots), but WALLET_APPLE_BUNDLE_ID is not set: every signed transaction is refused")
        }
        var accepts = "accepts bundle ids \(apple.bundleIDs.joined(separator: ", ")) in \(apple.environments.joined(separator: ", "))"
        if let appAppleID = apple.appAppleID {
            accepts += ", app Apple ID \(appAppleID)"
        } else if apple.environments.contains("Production") {
            return DoctorCheck(.failed, name, "\(roots), \(accepts), but WALLET_APPLE_APP_APPLE_ID is not set: "
                               + "every Production notification is refused")
        }
        return DoctorCheck(.ok, name, "\(roots); \(accepts)")
    }

    /// One Get Transaction Info per accepted environment: Apple checks the
    /// token before it looks, so its TransactionIdNotFound proves the key,
    /// the issuer and the bundle id.
    private func serverAPIChecks(report: (DoctorCheck) -> Void) {
        let api = configuration.apple.api
        guard api.isConfigured else {
            return report(DoctorCheck(.skipped, "appstore api", "not configured: WALLET_APPLE_API_KEY_ID, "
                                      + "WALLET_APPLE_API_ISSUER_ID and WALLET_APPLE_API_PRIVATE_KEY_FILE are not set"))
        }
        let client: ServerAPIClient
        do {
            guard let made = try AppStoreSetup.serverAPIClient(configuration, metrics: metrics, logger: logger) else {
                return report(DoctorCheck(.skipped, "appstore api", "not all of its settings are set (configuration, above)"))
            }
            client = made
        } catch {
            return report(DoctorCheck(.failed, "appstore api", String(describing: error)))
        }
        for environment in configuration.apple.environments {
            report(serverAPICheck(client, environment: Environment(rawValue: environment)))
        }
    }

    private func serverAPICheck(_ client: ServerAPIClient, environment: Environment) -> DoctorCheck {
        let name = "appstore api \(environment)"
        let (setting, url) = environment == .sandbox
            ? ("WALLET_APPLE_API_SANDBOX_URL", client.configuration.sandboxURL)
            : ("WALLET_APPLE_API_PRODUCTION_URL", client.configuration.productionURL)
        let claims = client.configuration.token
        do {
            _ = try client.transactionInfo(Self.madeUpTransactionID, environment: environment, deadline: client.deadline())
            return DoctorCheck(.ok, name, "\(url) accepted key \(claims.keyID) for \(claims.bundleID)")
        } catch .notFound(ServerAPIClient.transactionIDNotFound) {
            return DoctorCheck(.ok, name, "\(url) answered TransactionIdNotFound for a made-up transaction id: "
                               + "it accepts key \(claims.keyID), issuer \(claims.issuerID) and bundle id \(claims.bundleID)")
        } catch .refused(status: 401, _) {
            let unreleased = environment == .production ? " (Production answers 401 until the app's first release)" : ""
            return DoctorCheck(.failed, name, "\(url) refused the key (HTTP 401): check WALLET_APPLE_API_KEY_ID "
                               + "(\(claims.keyID)), WALLET_APPLE_API_ISSUER_ID (\(claims.issuerID)) and "
                               + "WALLET_APPLE_API_PRIVATE_KEY_FILE, and the bundle id \(claims.bundleID)\(unreleased)")
        } catch .unavailable(let detail) {
            return DoctorCheck(.failed, name, "cannot reach \(setting) (\(url)): \(detail)")
        } catch {
            return DoctorCheck(.failed, name, "\(url) answered the lookup of a made-up transaction id with \(error), "
                               + "not TransactionIdNotFound: is \(setting) Apple's App Store Server API?")
        }
    }

    // MARK: Google Play

    private func googlePlayChecks(catalog: Catalog, report: (DoctorCheck) -> Void) {
        let client: PlayClient
        do {
            guard let made = try GooglePlaySetup.client(configuration, metrics: metrics) else {
                return report(DoctorCheck(.skipped, "googleplay", "not configured: WALLET_GOOGLE_SERVICE_ACCOUNT_FILE and "
                                          + "WALLET_GOOGLE_PACKAGE_NAME are not both set"))
            }
            client = made
        } catch {
            return report(DoctorCheck(.failed, "googleplay token", error.description))
        }
        let token = tokenCheck(client.tokens, name: "googleplay token", api: "the Android Publisher API",
                               deadline: client.deadline())
        report(token)
        let name = "googleplay purchases"
        guard token.outcome == .ok else {
            return report(DoctorCheck(.skipped, name, "needs an access token (googleplay token, above)"))
        }
        guard case .product(let product) = catalog else {
            if case .unavailable(let why) = catalog { report(DoctorCheck(.skipped, name, "needs a catalog product: \(why)")) }
            return
        }
        report(purchaseLookupCheck(client, product: product, name: name))
    }

    /// A grant from the key file's `token_uri`: the key is Google's, and
    /// the clock near enough.
    private func tokenCheck(_ tokens: AccessTokens, name: String, api: String,
                            deadline: ContinuousClock.Instant) -> DoctorCheck {
        let account = tokens.account
        let endpoint = "\(account.tokenURI) (token_uri of WALLET_GOOGLE_SERVICE_ACCOUNT_FILE)"
        do {
            _ = try tokens.token(deadline: deadline)
            return DoctorCheck(.ok, name, "\(account.tokenURI) granted \(account.clientEmail) an access token for \(api)")
        } catch .refused(let status, let reason) {
            return DoctorCheck(.failed, name, "the service account key was refused (HTTP \(status), \(reason ?? "no reason")) "
                               + "by \(endpoint): WALLET_GOOGLE_SERVICE_ACCOUNT_FILE holds a key of "
                               + "\(account.clientEmail) that Google does not accept (deleted, disabled, another "
                               + "project's), or this machine's clock is off")
        } catch .unavailable(let detail) {
            return DoctorCheck(.failed, name, "cannot reach \(endpoint): \(detail)")
        } catch {
            return DoctorCheck(.failed, name, "\(endpoint) answered \(error)")
        }
    }

    /// `purchases.products.get` of a token Google never issued: Google's
    /// not-found (404, 410, or 400 for a token it cannot read) comes only
    /// after the account's access to the app's purchases is checked.
    private func purchaseLookupCheck(_ client: PlayClient, product: String, name: String) -> DoctorCheck {
        let package = client.configuration.packageName
        let url = client.configuration.apiURL
        let email = client.tokens.account.clientEmail
        do {
            _ = try client.productPurchase(productID: product, token: Self.madeUpPurchaseToken, deadline: client.deadline())
            return DoctorCheck(.ok, name, "\(url) answered a purchase of \(product) in \(package) to \(email)")
        } catch .notFound, .refused(status: 400, _) {
            return DoctorCheck(.ok, name, "\(url) answered not found for a made-up purchase token of \(product): "
                               + "\(email) may read \(package)'s purchases")
        } catch .refused(let status, let reason) where status == 401 || status == 403 {
            return DoctorCheck(.failed, name, "\(email) may not read \(package)'s purchases (HTTP \(status), "
                               + "\(reason ?? "no reason")): in Play Console, Users and permissions, give it View "
                               + "financial data and Manage orders for the app, and enable the Google Play Android "
                               + "Developer API in its Cloud project; a new permission takes up to a day "
                               + "(WALLET_GOOGLE_SERVICE_ACCOUNT_FILE, WALLET_GOOGLE_PACKAGE_NAME)")
        } catch .unavailable(let detail) {
            return DoctorCheck(.failed, name, "cannot reach WALLET_GOOGLE_API_URL (\(url)): \(detail)")
        } catch {
            return DoctorCheck(.failed, name, "WALLET_GOOGLE_API_URL (\(url)) answered the lookup with \(error)")
        }
    }

    // MARK: The push subscription

    private func pushSubscriptionCheck() -> DoctorCheck {
        let name = "googleplay push subscription"
        let google = configuration.google
        guard let audience = google.pushAudience, let email = google.pushServiceAccount else {
            return DoctorCheck(.skipped, name, "not configured: WALLET_GOOGLE_PUSH_AUDIENCE is not set (no Google Play notifications)")
        }
        guard let subscriptionName = google.pushSubscription else {
            return DoctorCheck(.skipped, name, "set WALLET_GOOGLE_PUSH_SUBSCRIPTION (projects/P/subscriptions/S) to compare "
                               + "the push subscription with WALLET_GOOGLE_PUSH_AUDIENCE and WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT; "
                               + "the service account needs the Pub/Sub Viewer role (roles/pubsub.viewer) on it")
        }
        let client: PubSubClient
        do {
            guard let made = try GooglePlaySetup.pubSubClient(configuration) else {
                return DoctorCheck(.failed, name, "WALLET_GOOGLE_PUSH_SUBSCRIPTION is read as the service account of "
                                   + "WALLET_GOOGLE_SERVICE_ACCOUNT_FILE, which is not set")
            }
            client = made
        } catch {
            return DoctorCheck(.failed, name, error.description)
        }
        let deadline = client.deadline()
        let token = tokenCheck(client.tokens, name: name, api: "Pub/Sub", deadline: deadline)
        guard token.outcome == .ok else { return token }
        let subscription: PushSubscription
        do {
            subscription = try client.subscription(subscriptionName, deadline: deadline)
        } catch .notFound {
            return DoctorCheck(.failed, name, "Pub/Sub has no subscription \(subscriptionName): check WALLET_GOOGLE_PUSH_SUBSCRIPTION")
        } catch .refused(let status, let reason) where status == 401 || status == 403 {
            return DoctorCheck(.failed, name, "\(client.tokens.account.clientEmail) may not read \(subscriptionName) "
                               + "(HTTP \(status), \(reason ?? "no reason")): grant it the Pub/Sub Viewer role "
                               + "(roles/pubsub.viewer) on the subscription, or check WALLET_GOOGLE_PUSH_SUBSCRIPTION")
        } catch .unavailable(let detail) {
            return DoctorCheck(.failed, name, "cannot reach WALLET_GOOGLE_PUBSUB_URL (\(client.apiURL)): \(detail)")
        } catch {
            return DoctorCheck(.failed, name, "WALLET_GOOGLE_PUBSUB_URL (\(client.apiURL)) answered \(error)")
        }
        return compare(subscription, audience: audience, email: email, name: name)
    }

    /// What Pub/Sub signs its pushes with against what the service accepts.
    private func compare(_ subscription: PushSubscription, audience: String, email: String, name: String) -> DoctorCheck {
        guard let endpoint = subscription.pushConfig?.pushEndpoint, !endpoint.isEmpty else {
            return DoctorCheck(.failed, name, "\(subscription.name) is not a push subscription (no pushConfig.pushEndpoint): "
                               + "make it push to https://<host>\(googlePlayNotificationsPath)")
        }
        guard let token = subscription.pushConfig?.oidcToken else {
            return DoctorCheck(.failed, name, "\(subscription.name) pushes to \(endpoint) without authentication "
                               + "(no pushConfig.oidcToken): turn it on with service account \(email) and audience \(audience)")
        }
        var mismatches: [String] = []
        let signedAs = token.serviceAccountEmail ?? ""
        if signedAs != email {
            mismatches.append("it signs as \"\(signedAs)\" but WALLET_GOOGLE_PUSH_SERVICE_ACCOUNT is \"\(email)\"")
        }
        let tokenAudience = subscription.tokenAudience ?? ""
        if tokenAudience != audience {
            let defaulted = (token.audience ?? "").isEmpty ? " (none set: its push endpoint)" : ""
            mismatches.append("its audience is \"\(tokenAudience)\"\(defaulted) but WALLET_GOOGLE_PUSH_AUDIENCE is \"\(audience)\"")
        }
        guard mismatches.isEmpty else {
            return DoctorCheck(.failed, name, "\(subscription.name): " + mismatches.joined(separator: "; ")
                               + ": every push would be refused (401)")
        }
        let route = endpoint.hasSuffix(googlePlayNotificationsPath) ? ""
            : ", which does not end in \(googlePlayNotificationsPath): pushes reach the service only if a proxy maps it there"
        return DoctorCheck(.ok, name, "\(subscription.name) pushes to \(endpoint)\(route), signed as \(email) "
                           + "for audience \(audience), as the service expects")
    }
}
