print("wallet")
