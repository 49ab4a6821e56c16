-- Credit one guodong600 bundle (600 coins) to a wallet drawn uniformly from
-- u0 .. u1999, each request with a new flow_no.
-- Run: BENCH_CREDIT_KEY=wk_... wrk -t2 -c64 -d10s --latency -s bench/credit_spread.lua http://127.0.0.1:8080
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(here .. "common.lua")

local headers = {
  ["Authorization"] = "Bearer " .. bench.env("BENCH_CREDIT_KEY"),
  ["Content-Type"] = "application/json",
}

scenario{
  name = "credit-spread",
  make = function(reference)
    return wrk.format("POST", "/v1/credits", headers,
      '{"user_id":"' .. bench.spread_wallet() .. '","flow_no":"' .. reference .. '","product_id":"guodong600"}')
  end,
}
