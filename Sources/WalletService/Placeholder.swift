// WalletService
