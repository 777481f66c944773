-- Argo CD health check for kvbench.io/BenchmarkExperiment: the value of argocd-cm's
-- `resource.customizations.health.kvbench.io_BenchmarkExperiment` (docs/gitops.md).
-- Healthy once every planned run is recorded, Degraded once the experiment failed (or its
-- spec changed after it started, so its results are not what the spec says), Progressing
-- while it waits or runs, and until the operator has seen the resource's latest generation.
local hs = {}
local status = obj.status

local function condition(kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function runs()
  if status.progress == nil or status.progress.display == nil then
    return "runs"
  end
  local text = status.progress.display .. " runs"
  if status.progress.failed ~= nil and status.progress.failed > 0 then
    text = text .. ", " .. status.progress.failed .. " failed"
  end
  return text
end

if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the kvbench operator"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil
    and status.observedGeneration ~= generation then
  hs.status = "Progressing"
  hs.message = "the operator has not seen generation " .. generation .. " yet"
  return hs
end

local changed = condition("SpecChanged")
if changed ~= nil and changed.status == "True" then
  hs.status = "Degraded"
  hs.message = changed.message
  return hs
end

if status.phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = runs() .. " recorded"
elseif status.phase == "Failed" then
  hs.status = "Degraded"
  local failed = condition("Failed")
  hs.message = status.message or (failed ~= nil and failed.message) or "failed"
elseif status.phase == "Pending" or status.phase == "Running" then
  hs.status = "Progressing"
  local message = status.phase .. ": " .. runs()
  if status.current ~= nil then
    message = message .. ", run " .. status.current.id .. " " .. status.current.stage
  end
  hs.message = message
else
  hs.status = "Unknown"
  hs.message = "unknown phase " .. status.phase
end
return hs
