// The service and clients the suites of one test file share: started once
// before the first test, stopped after the last.
import { after, before } from "node:test";
import { WalletClient } from "../../index.js";
import { startService } from "./service.js";

export const ctx = {
  /** @type {import("./service.js").WalletService} */
  service: null,
  /** The app backend's client (credit, read). */
  app: null,
  /** The game server's client (debit, grant, read). */
  game: null,
  /** The events reader's client (events, read). */
  feed: null,
};

before(async () => {
  ctx.service = await startService("wallet");
  ctx.app = new WalletClient({ baseUrl: ctx.service.url, apiKey: ctx.service.keys.app });
  ctx.game = new WalletClient({ baseUrl: ctx.service.url, apiKey: ctx.service.keys.game });
  ctx.feed = new WalletClient({ baseUrl: ctx.service.url, apiKey: ctx.service.keys.events });
});

after(async () => {
  await ctx.service?.stop();
});
