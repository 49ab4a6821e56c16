-- Shared by the wrk scenarios in this directory (see README.md).
--
-- Each scenario file calls `scenario{...}` once, which defines the globals
-- wrk looks for: setup, init, request, response and done.
--
-- * Every request carries a reference (Idempotency-Key or flow_no) that is
--   unique across threads and runs: "<run tag>-<thread id>-<counter>".
-- * response() counts answers outside 2xx, per thread.
-- * done() prints one line the runner parses:
--     bench-result scenario=<name> requests=N non2xx=N connect=N read=N write=N timeout=N p50_us=N p99_us=N
--
-- Settings come from the environment, so the same files work by hand:
--   BENCH_CREDIT_KEY, BENCH_DEBIT_KEY   API key secrets (credit,read / debit,read)
--   BENCH_RUN_TAG                        prefix of every reference (default: the time)
--   BENCH_WALLETS                        spread wallets are u0 .. u<N-1> (default 2000)
--   BENCH_HOT_WALLET                     the one hot wallet's user id (default hot)

local threads = {}

local function env(name, default)
  local value = os.getenv(name)
  if value == nil or value == "" then
    if default == nil then
      error(name .. " is not set")
    end
    return default
  end
  return value
end

local bench = {
  env = env,
  tag = env("BENCH_RUN_TAG", tostring(os.time())),
  wallets = tonumber(env("BENCH_WALLETS", "2000")),
  hot_wallet = env("BENCH_HOT_WALLET", "hot"),
}

-- A user id drawn uniformly from u0 .. u<wallets-1>.
function bench.spread_wallet()
  return "u" .. math.random(0, bench.wallets - 1)
end

-- `spec.name` names the scenario in the summary line; `spec.make(reference)`
-- returns one HTTP request, given a fresh unique reference.
-- `spec.on_response(status, body)`, optional, sees every answer (a scenario
-- whose next request depends on the last answer keeps its state there).
function scenario(spec)
  function setup(thread)
    thread:set("thread_id", #threads)
    table.insert(threads, thread)
  end

  function init(args)
    sent = 0
    non2xx = 0
    -- Threads must not walk the same sequence of wallets in step.
    math.randomseed(os.time() * 1000 + thread_id * 7919)
    prefix = bench.tag .. "-" .. thread_id .. "-"
  end

  function request()
    sent = sent + 1
    return spec.make(prefix .. sent)
  end

  function response(status, headers, body)
    if status < 200 or status > 299 then
      non2xx = non2xx + 1
    end
    if spec.on_response then
      spec.on_response(status, body)
    end
  end

  function done(summary, latency, requests)
    local bad = 0
    for _, thread in ipairs(threads) do
      bad = bad + thread:get("non2xx")
    end
    local errors = summary.errors
    io.write(string.format(
      "bench-result scenario=%s requests=%d non2xx=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p99_us=%d\n",
      spec.name, summary.requests, bad, errors.connect, errors.read, errors.write, errors.timeout,
      latency:percentile(50.0), latency:percentile(99.0)))
  end
end

return bench
