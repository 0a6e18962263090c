-- Argo CD health check for shardring.io ShardGroup: maps the conditions the
-- operator writes to Argo CD's health statuses (the health table in
-- docs/operations.md), first match wins:
--   1. no status, or status.observedGeneration missing or behind
--      metadata.generation: Progressing (the operator has not seen the spec);
--   2. Degraded=True: Degraded (also while Ready stays True on a stale
--      topology read);
--   3. Ready=False: Progressing for FirstPublishHeld (the first publish
--      waits for pods about to pass minReadySeconds), else Degraded;
--      Ready missing or Unknown: Progressing;
--   4. Balanced=False: Degraded for UnassignedShards and OutOfBand (they
--      need action), Suspended for MovesDeferred (optional moves wait for the
--      move budget's window to slide);
--   5. Progressing=True: Suspended for WaitingForReturn (shards held for a
--      pod that may come back), else Progressing (handoffs in flight);
--   6. otherwise Healthy, with the Ready condition's message.
-- LoadMeasured and OrderingNotEnforced are informational and never change
-- the health. Messages are "<reason>: <message>" of the deciding condition.
-- Uses only the base, string, table and math libraries, the ones Argo CD's
-- Lua sandbox opens; tested with lua5.4 (cargo test -p shardring-ops).

local function number_text(n)
  -- Argo CD's Lua reads every JSON number as a float: print whole numbers
  -- without a fraction whichever Lua runs this.
  if type(n) == "number" and math.floor(n) == n then
    return string.format("%d", n)
  end
  return tostring(n)
end

local function find_condition(status, condition_type)
  if type(status.conditions) ~= "table" then
    return nil
  end
  for _, condition in ipairs(status.conditions) do
    if condition.type == condition_type then
      return condition
    end
  end
  return nil
end

local function describe(condition)
  local reason = condition.reason or ""
  local message = condition.message or ""
  if message == "" then
    return reason
  end
  if reason == "" then
    return message
  end
  return reason .. ": " .. message
end

-- The health Argo CD shows.
local function health(state, message)
  return {status = state, message = message}
end

local metadata = obj.metadata or {}
local generation = metadata.generation
local status = obj.status

if status == nil or status.observedGeneration == nil
    or (generation ~= nil and status.observedGeneration < generation) then
  if generation == nil then
    return health("Progressing", "waiting for the operator to write the status")
  end
  local waiting = "waiting for the operator to observe generation " .. number_text(generation)
  if status == nil then
    return health("Progressing", waiting .. " (no status yet)")
  elseif status.observedGeneration == nil then
    return health("Progressing", waiting .. " (the status names no observedGeneration)")
  end
  return health("Progressing", waiting .. " (the status describes generation "
    .. number_text(status.observedGeneration) .. ")")
end

local degraded = find_condition(status, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  return health("Degraded", describe(degraded))
end

local ready = find_condition(status, "Ready")
if ready == nil then
  return health("Progressing", "waiting for the operator to report the Ready condition")
end
if ready.status == "False" then
  if ready.reason == "FirstPublishHeld" then
    return health("Progressing", describe(ready))
  end
  return health("Degraded", describe(ready))
end
if ready.status ~= "True" then
  return health("Progressing", "Ready is " .. tostring(ready.status) .. ": " .. describe(ready))
end

local balanced = find_condition(status, "Balanced")
if balanced ~= nil and balanced.status == "False" then
  if balanced.reason == "UnassignedShards" or balanced.reason == "OutOfBand" then
    return health("Degraded", describe(balanced))
  end
  if balanced.reason == "MovesDeferred" then
    return health("Suspended", describe(balanced))
  end
end

local progressing = find_condition(status, "Progressing")
if progressing ~= nil and progressing.status == "True" then
  if progressing.reason == "WaitingForReturn" then
    return health("Suspended", describe(progressing))
  end
  return health("Progressing", describe(progressing))
end

return health("Healthy", describe(ready))
