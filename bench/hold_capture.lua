-- Hold 1 coin of a wallet drawn uniformly from u0 .. u1999, then capture the
-- hold: two requests per operation, each under a new Idempotency-Key. A
-- thread sends a capture for every hold it has been answered, before the
-- next hold.
-- Run: BENCH_DEBIT_KEY=wk_... wrk -t2 -c64 -d10s --latency -s bench/hold_capture.lua http://127.0.0.1:8080
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local bench = dofile(here .. "common.lua")

local headers = {
  ["Authorization"] = "Bearer " .. bench.env("BENCH_DEBIT_KEY"),
  ["Content-Type"] = "application/json",
}

-- Holds answered and not yet captured, by this thread.
local held = {}

scenario{
  name = "hold-capture",
  make = function(reference)
    headers["Idempotency-Key"] = reference
    local id = table.remove(held)
    if id then
      return wrk.format("POST", "/v1/holds/" .. id .. "/capture", headers, "{}")
    end
    return wrk.format("POST", "/v1/holds", headers,
      '{"user_id":"' .. bench.spread_wallet() .. '","amount":1,"expires_in_seconds":600}')
  end,
  on_response = function(status, body)
    if status == 201 and body:find('"status":"held"', 1, true) then
      local id = body:match('"id":(%d+)')
      if id then
        table.insert(held, id)
      end
    end
  end,
}
