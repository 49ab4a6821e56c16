// WalletCore
