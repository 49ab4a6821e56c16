-- Debit 1 coin from the one hot wallet, each request under a new
-- Idempotency-Key.
-- Run: BENCH_DEBIT_KEY=wk_... wrk -t2 -c64 -d10s --latency -s bench/debit_hot.lua http://127.0.0.1:8080
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(here .. "common.lua")

local headers = {
  ["Authorization"] = "Bearer " .. bench.env("BENCH_DEBIT_KEY"),
  ["Content-Type"] = "application/json",
}
local body = '{"user_id":"' .. bench.hot_wallet .. '","amount":1}'

scenario{
  name = "debit-hot",
  make = function(reference)
    headers["Idempotency-Key"] = reference
    return wrk.format("POST", "/v1/debits", headers, body)
  end,
}
