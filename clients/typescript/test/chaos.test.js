// Chaos: 500 debits through the client's default retries from concurrent
// workers, while `wallet serve` is SIGKILLed and restarted on the same port
// and data dir. Afterwards the API must show each debit applied exactly once.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { WalletClient } from "../index.js";
import { report, startService, walletBinary, within } from "./support/service.js";

const DEBITS = 500;
const WORKERS = 8;
const PLAYERS = 5;
const KILL_AT = [0.15, 0.4, 0.65];
const RUN_DEADLINE_MS = 45_000;

let service;

before(async () => {
  service = await startService("chaos");
});

after(async () => {
  await service?.stop();
});

/** A fixed amount for each debit, 1 to 29 coins. */
function amountOf(index) {
  return 1 + ((index * 7919) % 29);
}

test("500 debits while the service is killed and restarted: each applied exactly once", async () => {
  const app = new WalletClient({ baseUrl: service.url, apiKey: service.keys.app });
  const game = new WalletClient({ baseUrl: service.url, apiKey: service.keys.game });
  const players = Array.from({ length: PLAYERS }, (_, i) => `chaos-player-${i}`);

  const before = new Map();
  for (const [i, player] of players.entries()) {
    await app.createCredit({ user_id: player, flow_no: `4000000000000${i}`, product_id: "guodong5000", quantity: 2 });
    before.set(player, (await game.getWallet(player)).balances[0].balance);
  }

  const results = new Array(DEBITS);
  const failures = [];
  let next = 0;
  let done = 0;
  let kills = 0;
  let running = true;

  const worker = async () => {
    while (next < DEBITS) {
      const index = next++;
      const player = players[index % PLAYERS];
      try {
        results[index] = await game.createDebit({ user_id: player, amount: amountOf(index), reason: `chaos ${index}` });
      } catch (error) {
        failures.push({ index, error });
      }
      done++;
    }
  };

  const killer = async () => {
    for (const fraction of KILL_AT) {
      const deadline = Date.now() + RUN_DEADLINE_MS;
      while (running && done < fraction * DEBITS) {
        if (Date.now() > deadline) throw new Error(`no progress past ${done} debits`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      if (!running) return;
      await service.kill();
      kills++;
      await service.start();
    }
  };

  const started = Date.now();
  const killing = killer();
  const workers = Array.from({ length: WORKERS }, () => worker());
  const finished = await within(Promise.all(workers).then(() => true), RUN_DEADLINE_MS);
  running = false;
  await killing;
  assert.equal(finished, true, `the debits did not finish within ${RUN_DEADLINE_MS} ms (${done} done)`);
  const took = Date.now() - started;

  assert.deepEqual(failures.map(({ index, error }) => `${index}: ${error.name} ${error.message}`), []);

  // Every debit entry of the players, read back through the API.
  const keys = new Map(results.map((result, index) => [result.idempotencyKey, index]));
  assert.equal(keys.size, DEBITS, "each call had a key of its own");
  const counts = new Map();
  let debitEntries = 0;
  for (const player of players) {
    for await (const entry of game.iterateEntries(player, { limit: 200, maxPages: 50 })) {
      if (entry.kind !== "debit") continue;
      debitEntries++;
      counts.set(entry.reference, (counts.get(entry.reference) ?? 0) + 1);
    }
  }
  const applied = [...keys.keys()].filter((key) => counts.get(key) === 1).length;
  const doubled = [...counts.values()].filter((count) => count > 1).length;
  const stray = [...counts.keys()].filter((reference) => !keys.has(reference)).length;

  for (const player of players) {
    const taken = results.filter((_, index) => players[index % PLAYERS] === player)
      .reduce((sum, result) => sum + result.debit.amount, 0);
    const now = (await game.getWallet(player)).balances[0].balance;
    assert.equal(before.get(player) - now, taken, `${player}'s balance fell by the sum of its debits`);
  }

  const stats = game.stats;
  const replayed = results.filter((result) => result.replayed).length;
  report(`chaos: debits=${DEBITS} applied=${applied} doubled=${doubled} retries=${game.retryCount} kills=${kills}`);
  report(`chaos detail: ${took} ms, replayed=${replayed}, retries by reason ${JSON.stringify(stats.retriesByReason)}`);

  assert.equal(kills, KILL_AT.length);
  assert.equal(debitEntries, DEBITS);
  assert.equal(applied, DEBITS);
  assert.equal(doubled, 0);
  assert.equal(stray, 0);
  assert.ok(game.retryCount > 0, "the kills made the client retry");

  // The ledger's own invariants still hold.
  const { stdout } = await promisify(execFile)(walletBinary, ["check"], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", WALLET_DATA_DIR: service.dataDir, WALLET_LOG_LEVEL: "error" },
    timeout: 30_000,
  });
  assert.match(stdout, /^ok: no invariant is violated/m);
});
