import Testing
import WalletCore
@testable import AppStore

/// What the service answers Apple's consumption request, from the ledger's
/// view of the purchase and the operator's preference.
@Suite struct ConsumptionAnswerTests {
    @Test func consumptionIsWhatIsNoLongerInTheWallet() {
        func answer(_ status: CreditStatus?, _ amount: Int64?, _ balance: Int64?,
                    _ preference: ConsumptionAnswer.Preference = .auto) -> ConsumptionAnswer {
            ConsumptionAnswer(creditStatus: status, creditedAmount: amount, balance: balance, preference: preference)
        }
        #expect(answer(.credited, 600, 600).consumptionPercentage == 0)
        #expect(answer(.credited, 600, 600).refundPreference.rawValue == "GRANT_FULL")
        // More coins than the purchase (other purchases): nothing of this one spent.
        #expect(answer(.credited, 600, 5_000).consumptionPercentage == 0)
        #expect(answer(.credited, 600, 300).consumptionPercentage == 50_000)
        #expect(answer(.credited, 600, 300).refundPreference.rawValue == "GRANT_PRORATED")
        // Rounded down: 599/600 spent is 99833.33… milliunits.
        #expect(answer(.credited, 600, 1).consumptionPercentage == 99_833)
        #expect(answer(.credited, 600, 0).consumptionPercentage == 100_000)
        #expect(answer(.credited, 600, -250).consumptionPercentage == 100_000)
        #expect(answer(.credited, 600, -250).refundPreference.rawValue == "DECLINE")
        // Not delivered: no percentage, and a full grant under auto.
        #expect(answer(.refunded, 600, 0).deliveryStatus.rawValue == "UNDELIVERED_OTHER")
        #expect(answer(.refunded, 600, 0).consumptionPercentage == nil)
        #expect(answer(nil, nil, nil).refundPreference.rawValue == "GRANT_FULL")
        #expect(answer(nil, nil, nil).json == #"{"customerConsented":true,"deliveryStatus":"UNDELIVERED_OTHER","#
            + #""refundPreference":"GRANT_FULL","sampleContentProvided":false}"#)
        // A fixed preference wins over auto.
        #expect(answer(.credited, 600, 600, .decline).refundPreference.rawValue == "DECLINE")
        #expect(answer(.credited, 600, 0, .grantFull).refundPreference.rawValue == "GRANT_FULL")
        #expect(answer(.credited, 600, 0, .grantProrated).refundPreference.rawValue == "GRANT_PRORATED")
        #expect(answer(.credited, 1_200, 300).json == #"{"customerConsented":true,"consumptionPercentage":75000,"#
            + #""deliveryStatus":"DELIVERED","refundPreference":"GRANT_PRORATED","sampleContentProvided":false}"#)
    }
}
