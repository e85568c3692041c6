-- wrk script: durable appends of 256 bytes spread over N streams
-- (STREAMS env, default 500) at /v1/stream/wrk-<i>. Create the streams
-- first (bench/compare.sh does).
local streams = tonumber(os.getenv("STREAMS") or "500")
local prefix = os.getenv("STREAM_PREFIX") or "/v1/stream/wrk-"
local body = string.rep("x", 255) .. "\n"
local counter = 0

request = function()
  counter = counter + 1
  local path = prefix .. (counter % streams)
  return wrk.format("POST", path, { ["Content-Type"] = "text/plain" }, body)
end
