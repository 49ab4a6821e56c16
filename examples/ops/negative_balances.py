#!/usr/bin/env python3
"""Lists the players whose balance in some currency is below zero.

A balance goes below zero only through a refund of coins already spent, or an
operator's revoke that allows it, and every such change is followed by a
`balance.negative` event. So the candidates come from the event feed (that
type alone), and each player's current balance, read with getWallet, says
whether they still owe: a later purchase or grant may have repaid the debt.

    examples/ops/negative_balances.py [--url URL] [--key KEY] [--after ID]

--url defaults to $WALLET_URL (http://127.0.0.1:8080); --key to
$WALLET_OPS_KEY, a key with scopes events and read
(`wallet keys create --name ops --scopes events,read`). --after starts the
feed after that event id (0, the oldest kept; the feed keeps
WALLET_EVENTS_RETENTION_DAYS of events, so an older debt is not found here).
Prints a table, or a line saying there is none; exits 0 either way, 1 when
the wallet could not be read, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
from dataclasses import dataclass
from datetime import datetime

# The client from this repository, imported by path: nothing to install.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "clients" / "python"))

from wallet_client import TransportError, Wallet, WalletClient, WalletError  # noqa: E402


@dataclass
class Debt:
    user_id: str
    currency: str
    balance: int
    debt: int
    since: datetime  # the latest balance.negative event's time
    cause: str  # the change that took it below zero
    events: int  # how many balance.negative events the feed has for it


def find_negative_balances(wallet: WalletClient, after: int = 0) -> list[Debt]:
    # The newest balance.negative per player and currency.
    latest: dict[tuple[str, str], tuple[datetime, str, int]] = {}
    for event in wallet.iter_events(after=after, page_size=1000, event_type="balance.negative"):
        key = (event.user_id, event.currency)
        count = latest[key][2] + 1 if key in latest else 1
        latest[key] = (event.created_at, str(event.data.get("cause", "?")), count)

    # Each player's balances as they are now: one read per player.
    debts: list[Debt] = []
    now: dict[str, Wallet] = {}
    for (user_id, currency), (since, cause, count) in sorted(latest.items()):
        if user_id not in now:
            now[user_id] = wallet.get_wallet(user_id)
        balance = now[user_id].currency(currency)
        if balance is not None and balance.balance < 0:
            debts.append(Debt(user_id, currency, balance.balance, balance.debt, since, cause, count))
    return debts


def print_table(debts: list[Debt]) -> None:
    header = ("USER", "CURRENCY", "BALANCE", "DEBT", "NEGATIVE SINCE", "CAUSE")
    rows = [
        (d.user_id, d.currency, str(d.balance), str(d.debt), d.since.strftime("%Y-%m-%d %H:%M:%SZ"), d.cause)
        for d in debts
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    numeric = {2, 3}
    for row in [header, *rows]:
        cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i]) for i, cell in enumerate(row)]
        print("  ".join(cells).rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Players whose balance in some currency is below zero.")
    parser.add_argument("--url", default=os.environ.get("WALLET_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--key", default=os.environ.get("WALLET_OPS_KEY"), help="scopes events and read")
    parser.add_argument("--after", type=int, default=0, help="start after this event id (0: the oldest kept)")
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("no key: pass --key or set WALLET_OPS_KEY (scopes events, read)")

    with WalletClient(args.url, args.key) as wallet:
        try:
            debts = find_negative_balances(wallet, after=args.after)
        except TransportError as error:
            print(f"negative_balances: the wallet at {args.url} could not be reached: {error}", file=sys.stderr)
            return 1
        except WalletError as error:
            print(f"negative_balances: the wallet refused: {error}", file=sys.stderr)
            return 1

    if not debts:
        print("no player has a negative balance")
        return 0
    print_table(debts)
    total: dict[str, int] = {}
    for d in debts:
        total[d.currency] = total.get(d.currency, 0) + d.debt
    owed = ", ".join(f"{amount} {currency}" for currency, amount in sorted(total.items()))
    print(f"{len(debts)} negative balance(s); owed in all: {owed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
