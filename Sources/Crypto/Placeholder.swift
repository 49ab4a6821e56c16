// Crypto
