-- Debit 1 coin from a wallet drawn uniformly from u0 .. u1999, each request
-- under a new Idempotency-Key.
-- Run: BENCH_DEBIT_KEY=wk_... wrk -t2 -c64 -d10s --latency -s bench/debit_spread.lua http://127.0.0.1:8080
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(here .. "common.lua")

local headers = {
  ["Authorization"] = "Bearer " .. bench.env("BENCH_DEBIT_KEY"),
  ["Content-Type"] = "application/json",
}

scenario{
  name = "debit-spread",
  make = function(reference)
    headers["Idempotency-Key"] = reference
    return wrk.format("POST", "/v1/debits", headers,
      '{"user_id":"' .. bench.spread_wallet() .. '","amount":1}')
  end,
}
