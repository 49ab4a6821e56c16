// Runs the real `wallet serve` on its embedded development database for a
// test: a data dir of its own, a free loopback port, the development keys
// read from its banner. Every wait has a deadline.
import { spawn, execFile } from "node:child_process";
import {
  chmodSync, closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, rmdirSync, writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const here = dirname(fileURLToPath(import.meta.url));
const repository = resolve(here, "../../../..");

export const walletBinary = process.env.WALLET_BINARY || join(repository, ".build/debug/wallet");
const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

/** A fresh directory for one service, under the suite's root when test.sh gave one. */
function makeWorkDir(name) {
  let root = process.env.WALLET_TEST_ROOT;
  let ownRoot = null;
  if (!root) {
    const base = process.env.WALLET_TEST_TMPDIR || (existsSync("/dev/shm") ? "/dev/shm" : tmpdir());
    root = ownRoot = mkdtempSync(join(base, "wallet-client-ts-"));
    // As root PostgreSQL runs as `postgres`, which must reach the data dir.
    chmodSync(root, 0o755);
  }
  const dir = mkdtempSync(join(root, `${name}-`));
  chmodSync(dir, 0o755);
  return { dir, ownRoot };
}

export async function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

function serviceEnvironment(extra) {
  const env = {};
  for (const [name, value] of Object.entries(process.env)) {
    // Nothing of the caller's own wallet configuration leaks into the test service.
    if (!name.startsWith("WALLET_")) env[name] = value;
  }
  return { ...env, ...extra };
}

async function waitFor(what, deadlineMs, check, intervalMs = 50) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((done) => setTimeout(done, intervalMs));
  }
}

function findPgCtl() {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    if (dir && existsSync(join(dir, "pg_ctl")) && existsSync(join(dir, "initdb"))) return join(dir, "pg_ctl");
  }
  const versions = existsSync("/usr/lib/postgresql")
    ? readdirSync("/usr/lib/postgresql").filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a))
    : [];
  for (const version of versions) {
    const candidate = `/usr/lib/postgresql/${version}/bin/pg_ctl`;
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

/** The promise's value, or undefined once `ms` have passed; leaves no timer behind. */
export async function within(promise, ms) {
  let timer;
  try {
    return await Promise.race([promise, new Promise((done) => { timer = setTimeout(done, ms); })]);
  } finally {
    clearTimeout(timer);
  }
}

export class WalletService {
  constructor(name, { env = {} } = {}) {
    this.extraEnv = env;
    if (!existsSync(walletBinary)) throw new Error(`no wallet binary at ${walletBinary} (pass it to test.sh or set WALLET_BINARY)`);
    this.name = name;
    ({ dir: this.workDir, ownRoot: this.ownRoot } = makeWorkDir(name));
    this.dataDir = join(this.workDir, "data");
    mkdirSync(this.dataDir, { recursive: true, mode: 0o755 });
    chmodSync(this.dataDir, 0o755);
    this.port = 0;
    this.url = "";
    this.child = null;
    this.starts = 0;
    this.clusterDir = null;
    this.keys = {};
  }

  /** Starts the service and waits until /readyz says ready; the first start also reads the keys. */
  async start() {
    if (!this.port) this.port = await freePort();
    this.url = `http://127.0.0.1:${this.port}`;
    this.starts++;
    const outPath = join(this.workDir, `serve-${this.starts}.out`);
    const errPath = join(this.workDir, `serve-${this.starts}.err`);
    const out = openSync(outPath, "w");
    const err = openSync(errPath, "w");
    const child = spawn(walletBinary, ["serve"], {
      env: serviceEnvironment({
        WALLET_DATA_DIR: this.dataDir,
        WALLET_LISTEN: `127.0.0.1:${this.port}`,
        WALLET_LOG_LEVEL: "error",
        ...this.extraEnv,
      }),
      stdio: ["ignore", out, err],
    });
    closeSync(out);
    closeSync(err);
    this.child = child;
    let exited = null;
    child.once("exit", (code, signal) => {
      exited = { code, signal };
    });
    child.exitPromise = new Promise((done) => child.once("exit", () => done()));
    writeFileSync(join(this.workDir, "serve.pid"), `${child.pid}\n`);
    const failIfExited = () => {
      if (exited) {
        throw new Error(`wallet serve exited (${exited.code ?? exited.signal}) during start: ${readFileSync(errPath, "utf8").slice(-2000)}`);
      }
    };
    const first = this.starts === 1;
    await waitFor(first ? "the development keys in the banner" : "the banner", 90_000, () => {
      failIfExited();
      const text = readFileSync(outPath, "utf8");
      const cluster = /development database: embedded PostgreSQL in (.+)$/m.exec(text);
      if (cluster) this.clusterDir = cluster[1].trim();
      if (!first) return /listening on http/.test(text);
      const app = /app-backend \(credit, read\):\s+(\S+)/.exec(text);
      const game = /game-server \(debit, grant, read\):\s+(\S+)/.exec(text);
      if (app && game) {
        this.keys.app = app[1];
        this.keys.game = game[1];
        return true;
      }
      return false;
    });
    await waitFor("/readyz", 30_000, async () => {
      failIfExited();
      try {
        const response = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(2_000) });
        await response.arrayBuffer();
        return response.status === 200;
      } catch {
        return false;
      }
    });
  }

  /** `wallet keys create` against the running service's database; returns the secret. */
  async createKey(name, scopes) {
    const { stdout } = await run(walletBinary, ["keys", "create", "--name", name, "--scopes", scopes], {
      env: serviceEnvironment({ WALLET_DATA_DIR: this.dataDir, WALLET_LOG_LEVEL: "error" }),
      timeout: 30_000,
    });
    const lines = stdout.trim().split("\n");
    const secret = lines[lines.length - 1].trim();
    if (!secret.startsWith("wk_")) throw new Error(`keys create printed no secret: ${stdout}`);
    return secret;
  }

  /** SIGKILL: nothing of the process gets to run; its PostgreSQL keeps running. */
  async kill() {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    child.kill("SIGKILL");
    await within(child.exitPromise, 10_000);
  }

  async restart() {
    await this.kill();
    await this.start();
  }

  /**
   * SIGTERM (SIGKILL after 15 s), then stops the cluster if it still runs,
   * and removes the service's directory (kept with WALLET_TEST_KEEP=1).
   */
  async stop() {
    await this.#stopProcesses();
    if (process.env.WALLET_TEST_KEEP === "1") return;
    rmSync(this.workDir, { recursive: true, force: true });
    if (this.ownRoot) rmdirSync(this.ownRoot);
  }

  async #stopProcesses() {
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const stopped = await within(child.exitPromise.then(() => true), 15_000);
      if (!stopped) await this.kill();
    }
    await this.stopCluster();
  }

  async stopCluster() {
    const clusterDir = this.clusterDir ?? join(this.dataDir, "postgres");
    const pgdata = join(clusterDir, "pgdata");
    if (!existsSync(join(pgdata, "postmaster.pid"))) return;
    const pgCtl = findPgCtl();
    if (!pgCtl) return;
    const command = isRoot ? "runuser" : pgCtl;
    const args = isRoot ? ["-u", "postgres", "--", pgCtl] : [];
    try {
      await run(command, [...args, "-D", pgdata, "stop", "-m", "fast", "-w", "-t", "30"], { timeout: 40_000 });
    } catch (error) {
      if (existsSync(join(pgdata, "postmaster.pid"))) throw error;
    }
  }
}

/** A started service with an events key too. */
export async function startService(name) {
  const service = new WalletService(name);
  try {
    await service.start();
    service.keys.events = await service.createKey(`events-${process.pid}`, "events,read");
  } catch (error) {
    await service.stop().catch(() => {});
    throw error;
  }
  return service;
}

/** Where the suite's report lines go (printed by test.sh at the end). */
export function report(line) {
  console.log(line);
  const root = process.env.WALLET_TEST_ROOT;
  if (root) writeFileSync(join(root, "report.txt"), `${line}\n`, { flag: "a" });
}
