-- Read the balances of a wallet drawn uniformly from u0 .. u1999.
-- Run: BENCH_DEBIT_KEY=wk_... wrk -t2 -c64 -d10s --latency -s bench/read_spread.lua http://127.0.0.1:8080
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(here .. "common.lua")

-- Any key with the read scope will do; the debit key has it.
local headers = {
  ["Authorization"] = "Bearer " .. bench.env("BENCH_DEBIT_KEY"),
}

scenario{
  name = "read-spread",
  make = function(reference)
    return wrk.format("GET", "/v1/wallets/" .. bench.spread_wallet(), headers)
  end,
}
