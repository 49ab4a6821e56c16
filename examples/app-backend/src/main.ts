// The app backend as a command: credit one reported purchase, or run the demo.
//
//   node dist/main.js credit --user U --product P --transaction T [--signed-transaction JWS]
//   node dist/main.js demo [--user U] [--other-user V] [--product P] [--transaction T]
//
// WALLET_URL (default http://127.0.0.1:8080) and WALLET_APP_KEY, a key with
// scopes credit and read (`make run` prints one as app-backend).
// `credit` exits 0 when the player has the coins (credited now or before), 2
// when the app must not count on them, 64 on a usage error. `demo` exits 0
// when every step answered as the service promises, 1 otherwise.
import { WalletClient } from "../../../clients/typescript/index.js";
import { describe, handlePurchase, type Outcome, type PurchaseReport } from "./purchases.js";

const USAGE = `usage:
  main.js credit --user U --product P --transaction T [--signed-transaction JWS]
  main.js demo [--user U] [--other-user V] [--product P] [--transaction T]
environment: WALLET_URL (http://127.0.0.1:8080), WALLET_APP_KEY (scopes credit, read)`;

class UsageError extends Error {}

function options(args: readonly string[], allowed: readonly string[]): Map<string, string> {
  const found = new Map<string, string>();
  for (let index = 0; index < args.length; index += 2) {
    const name = args[index] ?? "";
    const value = args[index + 1];
    if (!name.startsWith("--") || !allowed.includes(name.slice(2)) || value === undefined) {
      throw new UsageError(`unexpected argument ${JSON.stringify(name)}`);
    }
    found.set(name.slice(2), value);
  }
  return found;
}

function required(found: Map<string, string>, name: string): string {
  const value = found.get(name);
  if (value === undefined || value === "") throw new UsageError(`--${name} is required`);
  return value;
}

function walletClient(): WalletClient {
  const apiKey = process.env["WALLET_APP_KEY"];
  if (apiKey === undefined || apiKey === "") throw new UsageError("WALLET_APP_KEY is not set");
  return new WalletClient({ baseUrl: process.env["WALLET_URL"] ?? "http://127.0.0.1:8080", apiKey });
}

async function creditCommand(args: readonly string[]): Promise<number> {
  const found = options(args, ["user", "product", "transaction", "signed-transaction"]);
  const report: PurchaseReport = {
    userId: required(found, "user"),
    productId: required(found, "product"),
    transactionId: required(found, "transaction"),
  };
  const signed = found.get("signed-transaction");
  if (signed !== undefined) report.signedTransaction = signed;
  const result = await handlePurchase(walletClient(), report);
  console.log(describe(report, result));
  return result.outcome === "credited" || result.outcome === "already_credited" ? 0 : 2;
}

/** A purchase reported twice (the second is a replay), the same transaction
 *  claimed for another player, and a product the catalog lacks. */
async function demoCommand(args: readonly string[]): Promise<number> {
  const found = options(args, ["user", "other-user", "product", "transaction"]);
  const user = found.get("user") ?? "player-1";
  const otherUser = found.get("other-user") ?? "player-2";
  const product = found.get("product") ?? "guodong600";
  const transaction = found.get("transaction") ?? `2000${Date.now()}`;
  const wallet = walletClient();

  const steps: { title: string; report: PurchaseReport; expected: Outcome[] }[] = [
    {
      title: `${user} bought ${product}: the app reports transaction ${transaction}`,
      report: { userId: user, productId: product, transactionId: transaction },
      expected: ["credited", "already_credited"],
    },
    {
      title: "the app did not get the answer and reports the same purchase again",
      report: { userId: user, productId: product, transactionId: transaction },
      expected: ["already_credited"],
    },
    {
      title: `a tampered app claims the same transaction for ${otherUser}`,
      report: { userId: otherUser, productId: product, transactionId: transaction },
      expected: ["needs_support"],
    },
    {
      title: `${user} bought a product the catalog lacks`,
      report: { userId: user, productId: "retired-bundle", transactionId: `${transaction}.2` },
      expected: ["blocked"],
    },
  ];

  let failures = 0;
  for (const [index, step] of steps.entries()) {
    console.log(`${index + 1}. ${step.title}`);
    const result = await handlePurchase(wallet, step.report);
    console.log(`   ${describe(step.report, result).replaceAll("\n", "\n   ")}`);
    if (!step.expected.includes(result.outcome)) {
      console.log(`   UNEXPECTED: wanted ${step.expected.join(" or ")}`);
      failures += 1;
    }
  }

  // What the wallet holds for that transaction now: one credit, to the first player.
  const { credit } = await wallet.getCredit(transaction);
  console.log(
    `wallet: transaction ${transaction} is one credit of ${credit.amount} ${credit.currency} to ${credit.user_id} ` +
      `(status ${credit.status}, source ${credit.source})`,
  );
  if (credit.user_id !== user) failures += 1;
  console.log(failures === 0 ? "demo: every answer as expected" : `demo: ${failures} unexpected answer(s)`);
  return failures === 0 ? 0 : 1;
}

async function main(): Promise<number> {
  const [command, ...rest] = process.argv.slice(2);
  try {
    if (command === "credit") return await creditCommand(rest);
    if (command === "demo") return await demoCommand(rest);
    throw new UsageError(command === undefined ? "no command" : `unknown command ${JSON.stringify(command)}`);
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`${error.message}\n${USAGE}`);
      return 64;
    }
    throw error;
  }
}

process.exitCode = await main();
