-- Argo CD health check for shardring.io ConsumerPool: maps the pool's status
-- to Argo CD's health statuses (the health table in docs/operations.md),
-- first match wins:
--   1. no status: Healthy. The operator writes a pool's status only when it
--      plans a ShardGroup that references the pool, so a pool nobody
--      references yet has none; like Flux's kstatus, which calls an object
--      without status Current, this is not a failure;
--   2. status.observedGeneration missing or behind metadata.generation:
--      Progressing;
--   3. Ready=False: Degraded (groups reference the pool but none of its pods
--      is Ready); Ready=True: Healthy with its message; Ready Unknown:
--      Progressing; no Ready condition (a status written by an operator that
--      predates it): Healthy, with a message built from the counts.
-- Messages are "<reason>: <message>" of the Ready condition. Uses only the
-- base, string, table and math libraries, the ones Argo CD's Lua sandbox
-- opens; tested with lua5.4 (cargo test -p shardring-ops).

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

if status == nil then
  return health("Healthy",
    "no ShardGroup references this pool yet: the operator writes a pool's status when it plans its groups")
end

if status.observedGeneration == nil
    or (generation ~= nil and status.observedGeneration < generation) then
  if generation == nil then
    return health("Progressing", "waiting for the operator to write the status")
  end
  local waiting = "waiting for the operator to observe generation " .. number_text(generation)
  if status.observedGeneration == nil then
    return health("Progressing", waiting .. " (the status names no observedGeneration)")
  end
  return health("Progressing", waiting .. " (the status describes generation "
    .. number_text(status.observedGeneration) .. ")")
end

local ready = find_condition(status, "Ready")
if ready == nil then
  return health("Healthy", number_text(status.readyPods or 0) .. " of " .. number_text(status.pods or 0)
    .. " selected pods are Ready; " .. number_text(status.groups or 0) .. " groups, "
    .. number_text(status.shards or 0) .. " shards")
end
if ready.status == "False" then
  return health("Degraded", describe(ready))
elseif ready.status == "True" then
  return health("Healthy", describe(ready))
end
return health("Progressing", "Ready is " .. tostring(ready.status) .. ": " .. describe(ready))
